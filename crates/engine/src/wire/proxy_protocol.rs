//! The HAProxy PROXY protocol: the header a proxy in front of us (or we, in
//! front of a server) sends first on a TCP connection to say who the client
//! really is. Version 1 is one text line, version 2 a binary block with
//! optional TLVs.
//!
//! [`parse`] reads a header from the first bytes of a connection; [`encode_v1`]
//! and [`encode_v2`] write one. Invariants:
//! - [`parse`] never panics and never looks past its input; a `Complete`
//!   header's `len` is at most the input's length, and the bytes after it are
//!   the connection's payload.
//! - `Incomplete` is only returned while the input can still become a valid
//!   header, and never once it holds [`MAX_V1_LEN`] (v1) or [`MAX_V2_LEN`] (v2)
//!   bytes: a caller that reads up to [`MAX_LEN`] bytes always gets a verdict.
//! - Version 2 allows 16 + 65 535 bytes; we cap the whole header at
//!   [`MAX_V2_LEN`] (4 096 bytes, far above the addresses plus the usual TLVs)
//!   and the TLV count at [`MAX_TLVS`], so a peer cannot make us buffer 64 KiB.
//! - Parsing is strict: v1 fields are separated by exactly one space, ports
//!   have no sign and no leading zero, addresses belong to the named family;
//!   v2 accepts only the version, commands and family/transport bytes the
//!   specification defines, and TLVs must exactly fill the declared length.
//! - A `LOCAL` v2 header (a proxy's own health check) carries no addresses and
//!   no TLVs: the specification says its address block, family included, is
//!   ignored, so we skip it without validating it.
//! - The optional CRC32C TLV is returned like any other TLV, not verified.

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::cursor::Cursor;

/// Longest v1 header, CRLF included, per the specification.
pub const MAX_V1_LEN: usize = 107;
/// Longest v2 header we accept, its 16-byte preamble included (our cap, see the module doc).
pub const MAX_V2_LEN: usize = 4096;
/// Most bytes [`parse`] may need before it answers with a header or an error.
pub const MAX_LEN: usize = MAX_V2_LEN;
/// Most TLVs accepted in (or encoded into) one v2 header.
pub const MAX_TLVS: usize = 128;

/// The 12 bytes that open every v2 header.
const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// What opens every v1 header.
const V1_PREFIX: &[u8] = b"PROXY ";
/// The v2 preamble: signature, version/command, family/transport, length.
const V2_PREAMBLE: usize = 16;

/// Well-known v2 TLV types (any other type is carried through untouched).
pub mod tlv {
    /// The ALPN protocol the client negotiated with the proxy.
    pub const ALPN: u8 = 0x01;
    /// The host name the client asked for (SNI or Host).
    pub const AUTHORITY: u8 = 0x02;
    /// CRC32C of the whole header (not verified by [`super::parse`]).
    pub const CRC32C: u8 = 0x03;
    /// Padding, to be ignored.
    pub const NOOP: u8 = 0x04;
    /// An opaque connection identifier chosen by the proxy.
    pub const UNIQUE_ID: u8 = 0x05;
    /// TLS details of the client connection (with sub-TLVs).
    pub const SSL: u8 = 0x20;
    /// The network namespace the connection was accepted in.
    pub const NETNS: u8 = 0x30;
}

/// Which version of the protocol a header uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// The text line (`PROXY TCP4 ...\r\n`).
    V1,
    /// The binary block.
    V2,
}

/// What the sender asks the receiver to do with the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// The proxy opened the connection itself (e.g. a health check): use the
    /// real endpoints. Only v2 has it.
    Local,
    /// The connection is relayed for a client: the addresses, when present, are
    /// the client's and the one it connected to. Every v1 header is `Proxy`.
    Proxy,
}

/// The transport the relayed connection used, as declared by the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Not said (v1 `UNKNOWN`, v2 `AF_UNSPEC` or `LOCAL`).
    Unspec,
    /// A stream (TCP or a unix stream socket).
    Stream,
    /// Datagrams (UDP or a unix datagram socket).
    Dgram,
}

/// A parsed PROXY protocol header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The version it was written in.
    pub version: Version,
    /// Local (no client to speak of) or relayed.
    pub command: Command,
    /// The declared transport.
    pub transport: Transport,
    /// The client's address; `None` for v1 `UNKNOWN`, v2 `LOCAL`, `AF_UNSPEC` and `AF_UNIX`.
    pub source: Option<SocketAddr>,
    /// The address the client connected to; `None` exactly when `source` is.
    pub destination: Option<SocketAddr>,
    /// v2 type-length-value extensions in wire order (at most [`MAX_TLVS`]); empty for v1.
    pub tlvs: Vec<(u8, Vec<u8>)>,
}

impl Header {
    /// The value of the first TLV of type `kind`, if any.
    pub fn tlv(&self, kind: u8) -> Option<&[u8]> {
        self.tlvs.iter().find(|(k, _)| *k == kind).map(|(_, v)| v.as_slice())
    }
}

/// The outcome of [`parse`] on the bytes read so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// A valid header may still follow: read more (never beyond [`MAX_LEN`] bytes in all).
    Incomplete,
    /// A header, and how many bytes of the input it took.
    Complete {
        /// The header.
        header: Header,
        /// Its length on the wire; the connection's payload starts here.
        len: usize,
    },
}

/// Why bytes are not a valid PROXY protocol header, or a header cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The input starts with neither signature.
    #[error("not a PROXY protocol header")]
    NotProxy,
    /// No CRLF within the first [`MAX_V1_LEN`] bytes.
    #[error("PROXY v1 line longer than {MAX_V1_LEN} bytes")]
    V1TooLong,
    /// A CR not followed by LF, or an LF not preceded by CR.
    #[error("PROXY v1 line has a bare CR or LF")]
    V1LineEnding,
    /// The protocol field is not `TCP4`, `TCP6` or `UNKNOWN`.
    #[error("PROXY v1 protocol must be TCP4, TCP6 or UNKNOWN")]
    V1Protocol,
    /// Too few or too many fields, or fields not separated by exactly one space.
    #[error("PROXY v1 line must be `PROXY proto src dst sport dport` with single spaces")]
    V1Fields,
    /// An address that is not a valid address of the named family.
    #[error("PROXY v1 {0} address is not a valid address of the named family")]
    V1Address(&'static str),
    /// A port that is not a plain decimal number in 0..=65535.
    #[error("PROXY v1 {0} port must be a decimal number in 0..=65535 without sign or leading zero")]
    V1Port(&'static str),
    /// The v2 version nibble is not 2.
    #[error("PROXY v2 version must be 2, got {0}")]
    V2Version(u8),
    /// The v2 command nibble is neither LOCAL (0) nor PROXY (1).
    #[error("PROXY v2 command must be LOCAL or PROXY, got {0:#x}")]
    V2Command(u8),
    /// A family/transport byte the specification does not define.
    #[error("PROXY v2 address family/transport byte {0:#04x} is not defined")]
    V2Family(u8),
    /// The header exceeds [`MAX_V2_LEN`].
    #[error("PROXY v2 header of {len} bytes exceeds the {max}-byte limit")]
    V2TooLong {
        /// The header's total length (preamble included).
        len: usize,
        /// The limit, [`MAX_V2_LEN`].
        max: usize,
    },
    /// The declared length cannot hold the addresses of the declared family.
    #[error("PROXY v2 addresses need {need} bytes but the header declares {have}")]
    V2ShortAddress {
        /// Size of the family's address block.
        need: usize,
        /// Declared length after the preamble.
        have: usize,
    },
    /// A TLV whose header or value runs past the declared length.
    #[error("PROXY v2 TLV at byte {0} runs past the end of the header")]
    V2Tlv(usize),
    /// More than [`MAX_TLVS`] TLVs.
    #[error("PROXY v2 header carries more than {MAX_TLVS} TLVs")]
    V2TooManyTlvs,
}

/// Which version the input's first bytes announce: `Some` once the whole
/// signature (6 bytes for v1, 12 for v2) is present, `None` otherwise
/// (including a buffer too short to tell; [`parse`] answers `Incomplete` then).
pub fn detect(buf: &[u8]) -> Option<Version> {
    if buf.starts_with(&V2_SIGNATURE) {
        Some(Version::V2)
    } else if buf.starts_with(V1_PREFIX) {
        Some(Version::V1)
    } else {
        None
    }
}

/// Parses a PROXY protocol header (either version) at the start of `buf`.
pub fn parse(buf: &[u8]) -> Result<Parsed, Error> {
    match detect(buf) {
        Some(Version::V2) => parse_v2(buf),
        Some(Version::V1) => parse_v1(buf),
        None if V2_SIGNATURE.starts_with(buf) || V1_PREFIX.starts_with(buf) => Ok(Parsed::Incomplete),
        None => Err(Error::NotProxy),
    }
}

// ---------------------------------------------------------------- version 1

/// The fields after `PROXY TCPx`, in order, named for error messages.
const V1_FIELDS: [&str; 4] = ["source", "destination", "source", "destination"];

/// The address family a v1 line names.
#[derive(Clone, Copy)]
enum V1Family {
    Tcp4,
    Tcp6,
}

fn parse_v1(buf: &[u8]) -> Result<Parsed, Error> {
    let window = &buf[..buf.len().min(MAX_V1_LEN)];
    match memchr::memchr(b'\n', window) {
        Some(lf) => match lf.checked_sub(1).map(|cr| window.split_at(cr)) {
            Some((line, [b'\r', ..])) => Ok(Parsed::Complete { header: v1_line(line)?, len: lf + 1 }),
            _ => Err(Error::V1LineEnding),
        },
        None if buf.len() >= MAX_V1_LEN => Err(Error::V1TooLong),
        None => v1_partial(window).map(|()| Parsed::Incomplete),
    }
}

/// Parses a whole v1 line without its CRLF (it starts with `PROXY `).
fn v1_line(line: &[u8]) -> Result<Header, Error> {
    let body = line.get(V1_PREFIX.len()..).unwrap_or_default();
    if body.contains(&b'\r') {
        return Err(Error::V1LineEnding);
    }
    let mut fields = body.split(|&b| b == b' ');
    let family = match fields.next().unwrap_or_default() {
        // The specification says whatever follows UNKNOWN is to be ignored.
        b"UNKNOWN" => return Ok(unknown_v1()),
        b"TCP4" => V1Family::Tcp4,
        b"TCP6" => V1Family::Tcp6,
        _ => return Err(Error::V1Protocol),
    };
    let mut f: [&[u8]; 4] = [&[]; 4];
    for slot in &mut f {
        *slot = fields.next().ok_or(Error::V1Fields)?;
    }
    if fields.next().is_some() {
        return Err(Error::V1Fields);
    }
    let src = v1_addr(family, f[0], V1_FIELDS[0])?;
    let dst = v1_addr(family, f[1], V1_FIELDS[1])?;
    let sport = v1_port(f[2], V1_FIELDS[2])?;
    let dport = v1_port(f[3], V1_FIELDS[3])?;
    Ok(Header {
        version: Version::V1,
        command: Command::Proxy,
        transport: Transport::Stream,
        source: Some(SocketAddr::new(src, sport)),
        destination: Some(SocketAddr::new(dst, dport)),
        tlvs: Vec::new(),
    })
}

fn unknown_v1() -> Header {
    Header {
        version: Version::V1,
        command: Command::Proxy,
        transport: Transport::Unspec,
        source: None,
        destination: None,
        tlvs: Vec::new(),
    }
}

fn v1_addr(family: V1Family, field: &[u8], name: &'static str) -> Result<IpAddr, Error> {
    if field.is_empty() {
        return Err(Error::V1Fields);
    }
    let text = std::str::from_utf8(field).map_err(|_| Error::V1Address(name))?;
    // std's parsers are strict: dotted quads without leading zeros, no zone ids.
    match family {
        V1Family::Tcp4 => text.parse::<Ipv4Addr>().map(IpAddr::V4),
        V1Family::Tcp6 => text.parse::<Ipv6Addr>().map(IpAddr::V6),
    }
    .map_err(|_| Error::V1Address(name))
}

fn v1_port(field: &[u8], name: &'static str) -> Result<u16, Error> {
    if field.is_empty() {
        return Err(Error::V1Fields);
    }
    let plain = field.len() <= 5 && field.iter().all(u8::is_ascii_digit) && (field.len() == 1 || field[0] != b'0');
    if !plain {
        return Err(Error::V1Port(name));
    }
    // At most five digits: no overflow in u32.
    let value = field.iter().fold(0u32, |n, d| n * 10 + u32::from(d - b'0'));
    u16::try_from(value).map_err(|_| Error::V1Port(name))
}

/// Refuses a v1 line early, before its CRLF arrives, when what is there can
/// no longer become valid. It may let through prefixes that will fail later;
/// the length bound still ends those.
fn v1_partial(part: &[u8]) -> Result<(), Error> {
    let body = part.get(V1_PREFIX.len()..).unwrap_or_default();
    // A final CR may be the first half of the CRLF; any other CR is bare.
    let body = body.strip_suffix(b"\r").unwrap_or(body);
    if body.contains(&b'\r') {
        return Err(Error::V1LineEnding);
    }
    let mut fields = body.split(|&b| b == b' ');
    let proto = fields.next().unwrap_or_default();
    let Some(mut field) = fields.next() else {
        let known = [&b"TCP4"[..], b"TCP6", b"UNKNOWN"];
        return if known.iter().any(|p| p.starts_with(proto)) { Ok(()) } else { Err(Error::V1Protocol) };
    };
    let family = match proto {
        b"UNKNOWN" => return Ok(()),
        b"TCP4" => V1Family::Tcp4,
        b"TCP6" => V1Family::Tcp6,
        _ => return Err(Error::V1Protocol),
    };
    for (index, name) in V1_FIELDS.iter().enumerate() {
        let is_addr = index < 2;
        let Some(next) = fields.next() else {
            // The last field so far may still grow: check only what it holds.
            // Every non-empty prefix of a valid port is itself a valid port.
            return if is_addr {
                v1_partial_addr(family, field, name)
            } else if field.is_empty() {
                Ok(())
            } else {
                v1_port(field, name).map(|_| ())
            };
        };
        // A field followed by a space is complete: check it fully.
        if is_addr {
            v1_addr(family, field, name)?;
        } else {
            v1_port(field, name)?;
        }
        field = next;
    }
    Err(Error::V1Fields)
}

fn v1_partial_addr(family: V1Family, field: &[u8], name: &'static str) -> Result<(), Error> {
    let ok = match family {
        V1Family::Tcp4 => field.len() <= 15 && field.iter().all(|b| b.is_ascii_digit() || *b == b'.'),
        V1Family::Tcp6 => field.len() <= 45 && field.iter().all(|b| b.is_ascii_hexdigit() || b":.".contains(b)),
    };
    if ok {
        Ok(())
    } else {
        Err(Error::V1Address(name))
    }
}

// ---------------------------------------------------------------- version 2

/// The address family a v2 header declares, with the size of its address block.
#[derive(Clone, Copy)]
enum V2Family {
    Unspec,
    Inet,
    Inet6,
    Unix,
}

impl V2Family {
    fn block_len(self) -> usize {
        match self {
            V2Family::Unspec => 0,
            V2Family::Inet => 12,
            V2Family::Inet6 => 36,
            V2Family::Unix => 216,
        }
    }
}

/// Decodes the family/transport byte; only the seven values the specification defines are valid.
fn v2_family(byte: u8) -> Result<(V2Family, Transport), Error> {
    Ok(match byte {
        0x00 => (V2Family::Unspec, Transport::Unspec),
        0x11 => (V2Family::Inet, Transport::Stream),
        0x12 => (V2Family::Inet, Transport::Dgram),
        0x21 => (V2Family::Inet6, Transport::Stream),
        0x22 => (V2Family::Inet6, Transport::Dgram),
        0x31 => (V2Family::Unix, Transport::Stream),
        0x32 => (V2Family::Unix, Transport::Dgram),
        other => return Err(Error::V2Family(other)),
    })
}

/// Parses a v2 header; `buf` starts with the whole signature.
fn parse_v2(buf: &[u8]) -> Result<Parsed, Error> {
    let command = match buf.get(12) {
        None => return Ok(Parsed::Incomplete),
        Some(b) if b >> 4 != 2 => return Err(Error::V2Version(b >> 4)),
        Some(b) if b & 0x0f == 0 => Command::Local,
        Some(b) if b & 0x0f == 1 => Command::Proxy,
        Some(b) => return Err(Error::V2Command(b & 0x0f)),
    };
    let family = match (command, buf.get(13)) {
        (_, None) => return Ok(Parsed::Incomplete),
        (Command::Local, Some(_)) => None,
        (Command::Proxy, Some(&b)) => Some(v2_family(b)?),
    };
    let Some(&[hi, lo]) = buf.get(14..V2_PREAMBLE) else {
        return Ok(Parsed::Incomplete);
    };
    let have = usize::from(u16::from_be_bytes([hi, lo]));
    let len = V2_PREAMBLE + have;
    if len > MAX_V2_LEN {
        return Err(Error::V2TooLong { len, max: MAX_V2_LEN });
    }
    if let Some((family, _)) = family {
        let need = family.block_len();
        if have < need {
            return Err(Error::V2ShortAddress { need, have });
        }
    }
    let Some(payload) = buf.get(V2_PREAMBLE..len) else {
        return Ok(Parsed::Incomplete);
    };
    let header = match family {
        None => Header {
            version: Version::V2,
            command: Command::Local,
            transport: Transport::Unspec,
            source: None,
            destination: None,
            tlvs: Vec::new(),
        },
        Some((family, transport)) => v2_proxy(family, transport, payload)?,
    };
    Ok(Parsed::Complete { header, len })
}

/// The addresses and TLVs of a `PROXY` v2 header; `payload` holds at least the address block.
fn v2_proxy(family: V2Family, transport: Transport, payload: &[u8]) -> Result<Header, Error> {
    let (block, tlv_bytes) = payload.split_at(family.block_len().min(payload.len()));
    let mut r = Cursor::new(block);
    let ips = match family {
        V2Family::Inet => r.array::<4>().zip(r.array::<4>()).map(|(s, d)| (IpAddr::from(s), IpAddr::from(d))),
        V2Family::Inet6 => r.array::<16>().zip(r.array::<16>()).map(|(s, d)| (IpAddr::from(s), IpAddr::from(d))),
        // A unix socket path is of no use to a TCP relay: treat it like "no address".
        V2Family::Unspec | V2Family::Unix => None,
    };
    let ports = r.u16().zip(r.u16());
    let (source, destination) = match ips.zip(ports) {
        Some(((s, d), (sp, dp))) => (Some(SocketAddr::new(s, sp)), Some(SocketAddr::new(d, dp))),
        None => (None, None),
    };
    let tlvs = v2_tlvs(tlv_bytes, V2_PREAMBLE + block.len())?;
    Ok(Header { version: Version::V2, command: Command::Proxy, transport, source, destination, tlvs })
}

/// Walks the TLVs, which must exactly fill `bytes`; `base` is their offset in the header, for errors.
fn v2_tlvs(bytes: &[u8], base: usize) -> Result<Vec<(u8, Vec<u8>)>, Error> {
    let mut r = Cursor::new(bytes);
    let mut tlvs = Vec::new();
    let mut offset = base;
    while !r.is_empty() {
        let (kind, value) = r.u8().zip(r.vec16()).ok_or(Error::V2Tlv(offset))?;
        if tlvs.len() == MAX_TLVS {
            return Err(Error::V2TooManyTlvs);
        }
        offset += 3 + value.len();
        tlvs.push((kind, value.to_vec()));
    }
    Ok(tlvs)
}

// ---------------------------------------------------------------- encoding

/// Brings two addresses to one family: both IPv4 when both are IPv4 (an
/// IPv4-mapped IPv6 address counts as IPv4), else both IPv6 with any IPv4
/// address mapped (`::ffff:a.b.c.d`).
fn one_family(src: SocketAddr, dst: SocketAddr) -> (IpAddr, IpAddr) {
    match (src.ip().to_canonical(), dst.ip().to_canonical()) {
        (s @ IpAddr::V4(_), d @ IpAddr::V4(_)) => (s, d),
        (s, d) => (IpAddr::V6(mapped(s)), IpAddr::V6(mapped(d))),
    }
}

fn mapped(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// Appends a v1 line for a relayed TCP connection from `src` to `dst`.
///
/// Two IPv4 addresses (IPv4-mapped IPv6 ones included) give `TCP4`; otherwise
/// `TCP6`, with an IPv4 side written as an IPv4-mapped IPv6 address.
pub fn encode_v1(src: SocketAddr, dst: SocketAddr, out: &mut Vec<u8>) {
    let (s, d) = one_family(src, dst);
    let proto = if s.is_ipv4() { "TCP4" } else { "TCP6" };
    // Writing into a Vec cannot fail.
    let _ = write!(out, "PROXY {proto} {s} {d} {} {}\r\n", src.port(), dst.port());
}

/// Appends a v2 `PROXY` header for a TCP connection from `src` to `dst`,
/// followed by `tlvs` in order.
///
/// Two IPv4 addresses (IPv4-mapped IPv6 ones included) give `AF_INET`;
/// otherwise `AF_INET6`, with an IPv4 side mapped. Refuses (leaving `out`
/// untouched) a header that [`parse`] would refuse: over [`MAX_V2_LEN`] bytes
/// or [`MAX_TLVS`] TLVs.
pub fn encode_v2(src: SocketAddr, dst: SocketAddr, out: &mut Vec<u8>, tlvs: &[(u8, &[u8])]) -> Result<(), Error> {
    if tlvs.len() > MAX_TLVS {
        return Err(Error::V2TooManyTlvs);
    }
    let (s, d) = one_family(src, dst);
    let (family, block) = if s.is_ipv4() { (0x11, 12) } else { (0x21, 36) };
    let have = block + tlvs.iter().map(|(_, v)| 3 + v.len()).sum::<usize>();
    let len = V2_PREAMBLE + have;
    let too_long = Error::V2TooLong { len, max: MAX_V2_LEN };
    if len > MAX_V2_LEN {
        return Err(too_long);
    }
    // Cannot fail under the cap, which also keeps every TLV length below in a u16.
    let have = u16::try_from(have).map_err(|_| too_long)?;
    out.reserve(len);
    out.extend_from_slice(&V2_SIGNATURE);
    out.extend_from_slice(&[0x21, family]);
    out.extend_from_slice(&have.to_be_bytes());
    for ip in [s, d] {
        match ip {
            IpAddr::V4(v4) => out.extend_from_slice(&v4.octets()),
            IpAddr::V6(v6) => out.extend_from_slice(&v6.octets()),
        }
    }
    out.extend_from_slice(&src.port().to_be_bytes());
    out.extend_from_slice(&dst.port().to_be_bytes());
    for (kind, value) in tlvs {
        out.push(*kind);
        // Fits: each value is shorter than the whole header, checked above.
        out.extend_from_slice(&(value.len() as u16).to_be_bytes());
        out.extend_from_slice(value);
    }
    Ok(())
}

#[cfg(test)]
#[path = "proxy_protocol_tests.rs"]
mod tests;
