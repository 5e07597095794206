//! HTTP/2 frames (RFC 9113 4 and 6): the nine-byte header read in place,
//! and the frames a server writes, appended to its output buffer.

/// Frame types (RFC 9113 6).
#[allow(missing_docs)] // named as in RFC 9113
pub mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const PRIORITY: u8 = 0x2;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PUSH_PROMISE: u8 = 0x5;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags.
#[allow(missing_docs)] // named as in RFC 9113
pub mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

/// Settings identifiers (RFC 9113 6.5.2).
#[allow(missing_docs)] // named as in RFC 9113
pub mod setting {
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
}

/// Error codes (RFC 9113 7).
#[allow(missing_docs)] // named as in RFC 9113
pub mod code {
    pub const NO_ERROR: u32 = 0x0;
    pub const PROTOCOL_ERROR: u32 = 0x1;
    pub const INTERNAL_ERROR: u32 = 0x2;
    pub const FLOW_CONTROL_ERROR: u32 = 0x3;
    pub const STREAM_CLOSED: u32 = 0x5;
    pub const FRAME_SIZE_ERROR: u32 = 0x6;
    pub const REFUSED_STREAM: u32 = 0x7;
    pub const CANCEL: u32 = 0x8;
    pub const COMPRESSION_ERROR: u32 = 0x9;
    pub const ENHANCE_YOUR_CALM: u32 = 0xb;
}

/// Size of a frame header.
pub const HEADER_LEN: usize = 9;
/// The smallest (and initial) `SETTINGS_MAX_FRAME_SIZE`.
pub const MIN_MAX_FRAME_SIZE: u32 = 16_384;
/// The largest `SETTINGS_MAX_FRAME_SIZE`.
pub const MAX_MAX_FRAME_SIZE: u32 = (1 << 24) - 1;
/// The largest flow-control window.
pub const MAX_WINDOW: i64 = (1 << 31) - 1;

/// A frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// Payload length.
    pub len: usize,
    /// Frame type ([`kind`]).
    pub kind: u8,
    /// Flags ([`flag`]).
    pub flags: u8,
    /// Stream identifier (the reserved bit cleared).
    pub stream: u32,
}

impl Head {
    /// Reads a header from the first nine bytes of `b`, if there are nine.
    pub fn read(b: &[u8]) -> Option<Head> {
        let h: &[u8; HEADER_LEN] = b.get(..HEADER_LEN)?.try_into().ok()?;
        Some(Head {
            len: usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]),
            kind: h[3],
            flags: h[4],
            stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
        })
    }

    /// Whether `flag` is set.
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// A frame header's bytes.
pub fn head_bytes(len: usize, kind: u8, flags: u8, stream: u32) -> [u8; HEADER_LEN] {
    let l = (len as u32).to_be_bytes();
    let s = (stream & 0x7fff_ffff).to_be_bytes();
    [l[1], l[2], l[3], kind, flags, s[0], s[1], s[2], s[3]]
}

/// Appends a frame header.
pub fn write_head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    out.extend_from_slice(&head_bytes(len, kind, flags, stream));
}

/// Appends a SETTINGS frame.
pub fn write_settings(out: &mut Vec<u8>, settings: &[(u16, u32)]) {
    write_head(out, settings.len() * 6, kind::SETTINGS, 0, 0);
    for (id, value) in settings {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

/// Appends a WINDOW_UPDATE frame.
pub fn write_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    write_head(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&increment.to_be_bytes());
}

/// Appends an RST_STREAM frame.
pub fn write_reset(out: &mut Vec<u8>, stream: u32, code: u32) {
    write_head(out, 4, kind::RST_STREAM, 0, stream);
    out.extend_from_slice(&code.to_be_bytes());
}

/// Appends a GOAWAY frame.
pub fn write_goaway(out: &mut Vec<u8>, last_stream: u32, code: u32, debug: &[u8]) {
    write_head(out, 8 + debug.len(), kind::GOAWAY, 0, 0);
    out.extend_from_slice(&last_stream.to_be_bytes());
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(debug);
}

/// Appends a DATA frame.
pub fn write_data(out: &mut Vec<u8>, stream: u32, data: &[u8], end: bool) {
    write_head(out, data.len(), kind::DATA, if end { flag::END_STREAM } else { 0 }, stream);
    out.extend_from_slice(data);
}

/// Turns the header block at `out[start + 9..]`, written after nine bytes
/// reserved for a frame header, into a HEADERS frame (patched in place) and,
/// when `max_frame` asks for it, CONTINUATION frames.
pub fn frame_block(out: &mut Vec<u8>, start: usize, stream: u32, end_stream: bool, max_frame: usize) {
    let max_frame = max_frame.max(1);
    let len = out.len() - start - HEADER_LEN;
    let end = if end_stream { flag::END_STREAM } else { 0 };
    if len <= max_frame {
        let head = head_bytes(len, kind::HEADERS, end | flag::END_HEADERS, stream);
        out[start..start + HEADER_LEN].copy_from_slice(&head);
        return;
    }
    let block = out.split_off(start + HEADER_LEN);
    out.truncate(start);
    let mut pieces = block.chunks(max_frame).peekable();
    let mut kind = kind::HEADERS;
    let mut flags = end;
    while let Some(piece) = pieces.next() {
        if pieces.peek().is_none() {
            flags |= flag::END_HEADERS;
        }
        write_head(out, piece.len(), kind, flags, stream);
        out.extend_from_slice(piece);
        (kind, flags) = (self::kind::CONTINUATION, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_read_back_as_written() {
        let mut out = Vec::new();
        write_head(&mut out, 0x12_3456, kind::HEADERS, flag::END_HEADERS, 0x8000_0007);
        let head = Head::read(&out).expect("nine bytes");
        assert_eq!(head, Head { len: 0x12_3456, kind: 1, flags: 4, stream: 7 }, "the reserved bit is dropped");
        assert!(Head::read(&out[..8]).is_none());
    }

    #[test]
    fn large_blocks_continue() {
        let mut out = b"xx".to_vec();
        out.extend_from_slice(&[0u8; HEADER_LEN]);
        out.extend_from_slice(&[7u8; 25]);
        frame_block(&mut out, 2, 3, true, 10);
        let mut at = 2;
        let mut seen = Vec::new();
        while let Some(h) = Head::read(&out[at..]) {
            seen.push((h.kind, h.flags, h.len));
            at += HEADER_LEN + h.len;
        }
        assert_eq!(at, out.len());
        assert_eq!(
            seen,
            [
                (kind::HEADERS, flag::END_STREAM, 10),
                (kind::CONTINUATION, 0, 10),
                (kind::CONTINUATION, flag::END_HEADERS, 5)
            ]
        );
        let mut small = vec![0u8; HEADER_LEN];
        small.extend_from_slice(&[1, 2, 3]);
        frame_block(&mut small, 0, 1, false, 10);
        assert_eq!(Head::read(&small).map(|h| (h.kind, h.flags, h.len)), Some((kind::HEADERS, flag::END_HEADERS, 3)));
    }
}
