//! A peek at the TLS ClientHello: the server name (SNI), ALPN protocols and
//! versions a client asks for, read from the first bytes of a connection
//! without terminating TLS, so a `tls-passthrough` service can route it and
//! then relay the very same bytes to the chosen server.
//!
//! [`peek`] works on the bytes read so far. Invariants:
//! - It never panics and checks every length field against the bytes that
//!   remain, at every level (record, handshake message, each vector inside it).
//! - The ClientHello may be split across several handshake records (TLS
//!   allows fragmentation); it is reassembled up to [`MAX_HELLO_LEN`] (16 KiB,
//!   its 4-byte handshake header included) over at most [`MAX_RECORDS`]
//!   records. Real hellos are well under 2 KiB, post-quantum key shares
//!   included. So [`Peek::NeedMore`] is never returned once the input holds
//!   [`MAX_PEEK_LEN`] bytes: a caller reading that much always gets a verdict.
//! - A record's bytes are used as they arrive: a record longer than the
//!   hello need not be complete for the hello to be read.
//! - The server name is validated as a DNS name (ASCII letters, digits,
//!   hyphens, dot-separated labels of 1..=63, at most 253 bytes, no trailing
//!   dot) and lower-cased; anything else, a second host name, or a duplicate
//!   extension makes the hello [`Peek::Malformed`] rather than routable.

use std::borrow::Cow;

use super::cursor::Cursor;

/// Largest ClientHello handshake message reassembled, its 4-byte header included.
pub const MAX_HELLO_LEN: usize = 16 * 1024;
/// Most TLS records the ClientHello may be spread over.
pub const MAX_RECORDS: usize = 16;
/// Most bytes [`peek`] may need before it answers something other than [`Peek::NeedMore`].
pub const MAX_PEEK_LEN: usize = MAX_HELLO_LEN + RECORD_HEADER * MAX_RECORDS;

/// TLS record header: type, version (2), length (2).
const RECORD_HEADER: usize = 5;
/// Largest plaintext record fragment (RFC 8446 §5.1).
const MAX_RECORD_LEN: usize = 1 << 14;
/// Record content type of handshake messages.
const HANDSHAKE: u8 = 22;
/// Handshake message type of the ClientHello.
const CLIENT_HELLO: u8 = 1;
/// Longest DNS name, in bytes, without a trailing dot.
const MAX_NAME_LEN: usize = 253;

/// Extension numbers this module reads.
const EXT_SERVER_NAME: u16 = 0;
const EXT_ALPN: u16 = 16;
const EXT_SUPPORTED_VERSIONS: u16 = 43;

/// What a ClientHello asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientHelloInfo {
    /// The host name from the server_name extension, lower-cased; `None` when
    /// the client sent none (e.g. it connects to an IP address).
    pub sni: Option<String>,
    /// ALPN protocol names in the client's order of preference (empty: no ALPN).
    pub alpn: Vec<Vec<u8>>,
    /// The ClientHello's `legacy_version` (0x0303 for TLS 1.2 and 1.3 clients).
    pub legacy_version: u16,
    /// The supported_versions extension in the client's order (empty when
    /// absent, i.e. a client of TLS 1.2 or older).
    pub supported_versions: Vec<u16>,
}

/// The verdict of [`peek`] on the bytes read so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peek {
    /// The ClientHello is not complete yet: read more (never beyond [`MAX_PEEK_LEN`] bytes in all).
    NeedMore,
    /// Not a TLS connection: the first record is not a handshake record of a
    /// TLS version (e.g. plain HTTP, or an SSLv2-style hello).
    NotTls,
    /// A complete ClientHello.
    Hello(ClientHelloInfo),
    /// TLS records that do not carry a valid ClientHello, and why.
    Malformed(&'static str),
}

/// Reads the ClientHello at the start of `buf`, if there is one yet.
pub fn peek(buf: &[u8]) -> Peek {
    match gather(buf) {
        Ok(Some(message)) => match client_hello(&message) {
            Ok(info) => Peek::Hello(info),
            Err(why) => Peek::Malformed(why),
        },
        Ok(None) => Peek::NeedMore,
        Err(verdict) => verdict,
    }
}

/// Whether a server name matches a pattern, ignoring ASCII case: either the
/// exact name, or `*.suffix`, which matches exactly one more label in front of
/// `suffix` (`*.example.com` matches `a.example.com`, not `example.com` nor
/// `a.b.example.com`). A `*` anywhere else is an ordinary character.
pub fn sni_matches(pattern: &str, name: &str) -> bool {
    let (pattern, name) = (pattern.as_bytes(), name.as_bytes());
    let Some(suffix) = pattern.strip_prefix(b"*.") else {
        return pattern.eq_ignore_ascii_case(name);
    };
    // Split `name` into `label.` and a tail as long as the suffix.
    let Some(split) = name.len().checked_sub(suffix.len()) else {
        return false;
    };
    let (head, tail) = name.split_at(split);
    match head.split_last() {
        Some((b'.', label)) => {
            !suffix.is_empty() && !label.is_empty() && !label.contains(&b'.') && tail.eq_ignore_ascii_case(suffix)
        }
        _ => false,
    }
}

// ------------------------------------------------------------ records

/// Reassembles the ClientHello handshake message (header included) from the
/// records at the start of `buf`: `Ok(None)` while it is incomplete, `Err`
/// with the verdict when the records cannot carry one.
fn gather(buf: &[u8]) -> Result<Option<Cow<'_, [u8]>>, Peek> {
    let mut message: Vec<u8> = Vec::new();
    let mut rest = buf;
    for index in 0..MAX_RECORDS {
        record_header(rest.get(..RECORD_HEADER).unwrap_or(rest), index == 0)?;
        let Some(&[_, _, _, hi, lo]) = rest.get(..RECORD_HEADER) else {
            return Ok(None);
        };
        let len = usize::from(u16::from_be_bytes([hi, lo]));
        if len == 0 {
            return Err(Peek::Malformed("empty handshake record"));
        }
        if len > MAX_RECORD_LEN {
            return Err(Peek::Malformed("record longer than 16 KiB"));
        }
        let body = &rest[RECORD_HEADER..];
        let fragment = &body[..len.min(body.len())];
        // The usual case: the whole hello in the first record, no copy.
        if message.is_empty() {
            if let Some(total) = hello_len(fragment)?.filter(|&t| t <= fragment.len()) {
                return Ok(Some(Cow::Borrowed(&fragment[..total])));
            }
        }
        message.extend_from_slice(fragment);
        if let Some(total) = hello_len(&message)?.filter(|&t| t <= message.len()) {
            message.truncate(total);
            return Ok(Some(Cow::Owned(message)));
        }
        if fragment.len() < len {
            return Ok(None);
        }
        rest = &body[len..];
    }
    Err(Peek::Malformed("ClientHello spread over too many records"))
}

/// Checks the part of a record header present in `header` (up to 5 bytes).
/// Anything odd in the first record means the peer is not speaking TLS; in a
/// later one, that the ClientHello is broken.
fn record_header(header: &[u8], first: bool) -> Result<(), Peek> {
    let fail = |why| if first { Peek::NotTls } else { Peek::Malformed(why) };
    if header.first().is_some_and(|&t| t != HANDSHAKE) {
        return Err(fail("ClientHello interrupted by a non-handshake record"));
    }
    // Record versions are 3.0 (SSL 3) to 3.4; TLS 1.3 still writes 3.1 or 3.3.
    if header.get(1).is_some_and(|&major| major != 3) || header.get(2).is_some_and(|&minor| minor > 4) {
        return Err(fail("record version is not TLS"));
    }
    Ok(())
}

/// The length of the handshake message that opens `message`, header
/// included, once its 4-byte header is there.
fn hello_len(message: &[u8]) -> Result<Option<usize>, Peek> {
    let Some(&[kind, a, b, c]) = message.get(..4) else {
        return Ok(None);
    };
    if kind != CLIENT_HELLO {
        return Err(Peek::Malformed("first handshake message is not a ClientHello"));
    }
    let total = 4 + ((usize::from(a) << 16) | (usize::from(b) << 8) | usize::from(c));
    if total > MAX_HELLO_LEN {
        return Err(Peek::Malformed("ClientHello larger than 16 KiB"));
    }
    Ok(Some(total))
}

// ------------------------------------------------------------ the hello

/// Parses a whole ClientHello handshake message (header included).
fn client_hello(message: &[u8]) -> Result<ClientHelloInfo, &'static str> {
    let mut r = Cursor::new(message.get(4..).unwrap_or_default());
    let legacy_version = r.u16().ok_or("truncated ClientHello version")?;
    if legacy_version >> 8 != 3 {
        return Err("ClientHello version is not TLS");
    }
    r.take(32).ok_or("truncated ClientHello random")?;
    let session_id = r.vec8().ok_or("truncated session id")?;
    if session_id.len() > 32 {
        return Err("session id longer than 32 bytes");
    }
    let suites = r.vec16().ok_or("truncated cipher suites")?;
    if suites.is_empty() || suites.len() % 2 != 0 {
        return Err("cipher suites length is zero or odd");
    }
    let compression = r.vec8().ok_or("truncated compression methods")?;
    if compression.is_empty() {
        return Err("no compression method");
    }
    let mut info = ClientHelloInfo { legacy_version, ..ClientHelloInfo::default() };
    // Extensions are optional before TLS 1.3: nothing may follow the compression methods.
    if r.is_empty() {
        return Ok(info);
    }
    let extensions = r.vec16().ok_or("extensions overrun the ClientHello")?;
    if !r.is_empty() {
        return Err("bytes after the extensions");
    }
    read_extensions(extensions, &mut info)?;
    Ok(info)
}

/// Walks the extensions block, keeping the ones [`ClientHelloInfo`] holds.
fn read_extensions(block: &[u8], info: &mut ClientHelloInfo) -> Result<(), &'static str> {
    let mut r = Cursor::new(block);
    let mut seen = Vec::new();
    while !r.is_empty() {
        let kind = r.u16().ok_or("truncated extension header")?;
        let data = r.vec16().ok_or("extension overruns the extensions block")?;
        seen.push(kind);
        match kind {
            EXT_SERVER_NAME => info.sni = Some(server_name(data)?),
            EXT_ALPN => info.alpn = alpn(data)?,
            EXT_SUPPORTED_VERSIONS => info.supported_versions = supported_versions(data)?,
            _ => {}
        }
    }
    // Sorting keeps this linear-logarithmic however many empty extensions a peer sends.
    seen.sort_unstable();
    if seen.windows(2).any(|w| w[0] == w[1]) {
        return Err("duplicate extension");
    }
    Ok(())
}

/// The single host name of a server_name extension (RFC 6066 §3).
fn server_name(data: &[u8]) -> Result<String, &'static str> {
    let mut r = Cursor::new(data);
    let list = r.vec16().ok_or("server name list overruns its extension")?;
    if !r.is_empty() || list.is_empty() {
        return Err("server name list is empty or not alone in its extension");
    }
    let mut r = Cursor::new(list);
    let mut name = None;
    while !r.is_empty() {
        // Only host_name (0) is defined; another type's layout is unknown, so it cannot be skipped.
        if r.u8() != Some(0) {
            return Err("unknown server name type");
        }
        let host = r.vec16().ok_or("host name overruns the server name list")?;
        if name.is_some() {
            return Err("more than one host name");
        }
        name = Some(dns_name(host).ok_or("host name is not a valid DNS name")?);
    }
    name.ok_or("server name list is empty")
}

/// `bytes` as a lower-case DNS name, if it is one.
fn dns_name(bytes: &[u8]) -> Option<String> {
    if bytes.is_empty() || bytes.len() > MAX_NAME_LEN {
        return None;
    }
    let label_ok = |l: &[u8]| (1..=63).contains(&l.len()) && l.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-');
    if !bytes.split(|&b| b == b'.').all(label_ok) {
        return None;
    }
    // Only ASCII bytes are left, so this is valid UTF-8.
    std::str::from_utf8(bytes).ok().map(str::to_ascii_lowercase)
}

/// The protocol names of an ALPN extension (RFC 7301 §3.1).
fn alpn(data: &[u8]) -> Result<Vec<Vec<u8>>, &'static str> {
    let mut r = Cursor::new(data);
    let list = r.vec16().ok_or("ALPN list overruns its extension")?;
    if !r.is_empty() || list.is_empty() {
        return Err("ALPN list is empty or not alone in its extension");
    }
    let mut r = Cursor::new(list);
    let mut names = Vec::new();
    while !r.is_empty() {
        let name = r.vec8().ok_or("ALPN name overruns the list")?;
        if name.is_empty() {
            return Err("empty ALPN name");
        }
        names.push(name.to_vec());
    }
    Ok(names)
}

/// The versions of a ClientHello's supported_versions extension (RFC 8446 §4.2.1).
fn supported_versions(data: &[u8]) -> Result<Vec<u16>, &'static str> {
    let mut r = Cursor::new(data);
    let list = r.vec8().ok_or("supported versions overrun their extension")?;
    if !r.is_empty() || list.is_empty() || list.len() % 2 != 0 {
        return Err("supported versions list is empty, odd or not alone in its extension");
    }
    Ok(list.chunks_exact(2).map(|v| u16::from_be_bytes([v[0], v[1]])).collect())
}

#[cfg(test)]
#[path = "sni_tests.rs"]
mod tests;
