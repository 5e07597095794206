//! HPACK's header tables (RFC 7541 2.3): the static table of Appendix A and
//! the dynamic table, a FIFO bounded by its size in the RFC's accounting
//! (name + value + 32 octets per entry).

use std::collections::VecDeque;

/// The static table, index 1 first.
pub(super) const STATIC: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// The static index (1-based) of a name, when the static table has it: a
/// `match`, which compiles to a switch on the length and a few compares
/// rather than a walk over the table.
pub(super) fn static_name(name: &[u8]) -> Option<usize> {
    Some(match name {
        b":authority" => 1,
        b":method" => 2,
        b":path" => 4,
        b":scheme" => 6,
        b":status" => 8,
        b"accept-charset" => 15,
        b"accept-encoding" => 16,
        b"accept-language" => 17,
        b"accept-ranges" => 18,
        b"accept" => 19,
        b"access-control-allow-origin" => 20,
        b"age" => 21,
        b"allow" => 22,
        b"authorization" => 23,
        b"cache-control" => 24,
        b"content-disposition" => 25,
        b"content-encoding" => 26,
        b"content-language" => 27,
        b"content-length" => 28,
        b"content-location" => 29,
        b"content-range" => 30,
        b"content-type" => 31,
        b"cookie" => 32,
        b"date" => 33,
        b"etag" => 34,
        b"expect" => 35,
        b"expires" => 36,
        b"from" => 37,
        b"host" => 38,
        b"if-match" => 39,
        b"if-modified-since" => 40,
        b"if-none-match" => 41,
        b"if-range" => 42,
        b"if-unmodified-since" => 43,
        b"last-modified" => 44,
        b"link" => 45,
        b"location" => 46,
        b"max-forwards" => 47,
        b"proxy-authenticate" => 48,
        b"proxy-authorization" => 49,
        b"range" => 50,
        b"referer" => 51,
        b"refresh" => 52,
        b"retry-after" => 53,
        b"server" => 54,
        b"set-cookie" => 55,
        b"strict-transport-security" => 56,
        b"transfer-encoding" => 57,
        b"user-agent" => 58,
        b"vary" => 59,
        b"via" => 60,
        b"www-authenticate" => 61,
        _ => return None,
    })
}

/// Bytes an entry counts for (RFC 7541 4.1).
pub(super) const ENTRY_OVERHEAD: usize = 32;

/// One dynamic entry: name then value in one allocation.
struct Entry {
    bytes: Box<[u8]>,
    name_len: usize,
}

/// The dynamic table, newest entry first.
pub(super) struct Dynamic {
    entries: VecDeque<Entry>,
    size: usize,
    max: usize,
}

impl Dynamic {
    pub(super) fn new(max: usize) -> Self {
        Dynamic { entries: VecDeque::new(), size: 0, max }
    }

    pub(super) fn max(&self) -> usize {
        self.max
    }

    pub(super) fn size(&self) -> usize {
        self.size
    }

    /// Changes the table's size limit, evicting what no longer fits.
    pub(super) fn set_max(&mut self, max: usize) {
        self.max = max;
        self.evict(0);
    }

    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            let Some(old) = self.entries.pop_back() else { break };
            self.size -= old.bytes.len() + ENTRY_OVERHEAD;
        }
    }

    /// Adds an entry; one larger than the table empties it (RFC 7541 4.4).
    pub(super) fn insert(&mut self, name: &[u8], value: &[u8]) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if size > self.max {
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict(size);
        let mut bytes = Vec::with_capacity(name.len() + value.len());
        bytes.extend_from_slice(name);
        bytes.extend_from_slice(value);
        self.entries.push_front(Entry { bytes: bytes.into_boxed_slice(), name_len: name.len() });
        self.size += size;
    }

    /// The entry at dynamic index `i` (0 = newest).
    pub(super) fn get(&self, i: usize) -> Option<(&[u8], &[u8])> {
        self.entries.get(i).map(|e| e.bytes.split_at(e.name_len))
    }
}

/// Looks up HPACK index `index` (1-based over both tables).
pub(super) fn get(dynamic: &Dynamic, index: usize) -> Option<(&[u8], &[u8])> {
    match index {
        0 => None,
        1..=61 => Some(STATIC[index - 1]),
        _ => dynamic.get(index - 62),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_names_are_found_at_their_first_index() {
        for (i, (name, _)) in STATIC.iter().enumerate() {
            let first = STATIC.iter().position(|(n, _)| n == name).map(|p| p + 1);
            assert_eq!(static_name(name), first, "entry {}", i + 1);
        }
        assert_eq!(static_name(b"x-custom"), None);
        assert_eq!(static_name(b"Content-Type"), None, "names are looked up lowercase");
    }
}
