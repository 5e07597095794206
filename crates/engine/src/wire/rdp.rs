//! A peek at the RDP connection request: the `mstshash` cookie a terminal-services
//! client sends first, read without answering so a `tcp` service with `rdp_cookie`
//! persistence can send the user back to the server holding their session, and then
//! relay the very same bytes.
//!
//! The first bytes of an RDP connection are one TPKT packet (RFC 1006: version 3, a
//! reserved byte, a big-endian length counting the 4-byte header) carrying an X.224
//! Connection Request TPDU (ITU-T X.224 §13.3: length indicator, code `0xE0`, two
//! references and a class byte), whose user data may start with the line
//! `Cookie: mstshash=NAME\r\n` (MS-RDPBCGR 2.2.1.1).
//!
//! Invariants: [`peek`] never panics, never asks for more than [`MAX_PEEK_LEN`] bytes,
//! and checks the TPKT length against what it read; a packet that is not a connection
//! request, or one longer than the bound, is [`Peek::NotRdp`] (balanced normally).

/// Most bytes [`peek`] may need before it answers something other than [`Peek::NeedMore`].
pub const MAX_PEEK_LEN: usize = 1024;

/// TPKT header: version 3, reserved, length (2).
const TPKT_HEADER: usize = 4;
/// X.224 CR fixed part: length indicator, code, DST-REF (2), SRC-REF (2), class.
const CR_FIXED: usize = 7;
/// X.224 TPDU code of a Connection Request (upper nibble; the lower one is the credit).
const CR_CODE: u8 = 0xE0;
const COOKIE_PREFIX: &[u8] = b"Cookie: mstshash=";

/// The verdict of [`peek`] on the bytes read so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peek<'a> {
    /// The connection request is not complete yet: read more (never beyond [`MAX_PEEK_LEN`]).
    NeedMore,
    /// Not an RDP connection request (or one too long to be one).
    NotRdp,
    /// A complete connection request, with its `mstshash` name if it carries one
    /// (trimmed, non-empty).
    Request(Option<&'a [u8]>),
}

/// Reads the connection request at the start of `buf`, if there is one yet.
pub fn peek(buf: &[u8]) -> Peek<'_> {
    let Some(header) = buf.get(..TPKT_HEADER) else {
        // Even a partial header can already say it is not TPKT.
        return match buf {
            [v, ..] if *v != 3 => Peek::NotRdp,
            [_, r, ..] if *r != 0 => Peek::NotRdp,
            _ => Peek::NeedMore,
        };
    };
    let len = usize::from(u16::from_be_bytes([header[2], header[3]]));
    if header[0] != 3 || header[1] != 0 || !(TPKT_HEADER + CR_FIXED..=MAX_PEEK_LEN).contains(&len) {
        return Peek::NotRdp;
    }
    let Some(tpdu) = buf.get(TPKT_HEADER..len) else { return Peek::NeedMore };
    // The length indicator counts the TPDU header after itself; it cannot run past the packet.
    let li = usize::from(tpdu[0]);
    if tpdu[1] & 0xF0 != CR_CODE || li + 1 > tpdu.len() || li + 1 < CR_FIXED {
        return Peek::NotRdp;
    }
    let Some(data) = tpdu.get(CR_FIXED..) else { return Peek::NotRdp };
    Peek::Request(mstshash(data))
}

/// The name of a `Cookie: mstshash=NAME\r\n` line at the start of `data`.
fn mstshash(data: &[u8]) -> Option<&[u8]> {
    let rest = data.strip_prefix(COOKIE_PREFIX)?;
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    let name = rest[..end].trim_ascii();
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TPKT + X.224 CR as mstsc sends it, with `user data` after the fixed part.
    fn request(data: &[u8]) -> Vec<u8> {
        let len = TPKT_HEADER + CR_FIXED + data.len();
        let mut out = vec![3, 0];
        out.extend_from_slice(&(len as u16).to_be_bytes());
        out.push((CR_FIXED - 1 + data.len()) as u8);
        out.extend_from_slice(&[CR_CODE, 0, 0, 0, 0, 0]);
        out.extend_from_slice(data);
        out
    }

    /// The RDP_NEG_REQ asking for TLS and CredSSP.
    const NEG_REQ: &[u8] = &[1, 0, 8, 0, 3, 0, 0, 0];

    #[test]
    fn reads_the_cookie_of_a_real_request() {
        let mut data = b"Cookie: mstshash=alice\r\n".to_vec();
        data.extend_from_slice(NEG_REQ);
        let bytes = request(&data);
        assert_eq!(peek(&bytes), Peek::Request(Some(&b"alice"[..])));
        // Every prefix needs more; none panics.
        for n in 0..bytes.len() {
            assert_eq!(peek(&bytes[..n]), Peek::NeedMore, "prefix of {n} bytes");
        }
        // Bytes after the packet (the client's next one) do not matter.
        let mut more = bytes.clone();
        more.extend_from_slice(b"\x03\x00\x00\x08garbage");
        assert_eq!(peek(&more), Peek::Request(Some(&b"alice"[..])));
    }

    #[test]
    fn a_request_without_a_cookie_or_with_a_broken_one_has_no_name() {
        assert_eq!(peek(&request(NEG_REQ)), Peek::Request(None));
        assert_eq!(peek(&request(b"")), Peek::Request(None));
        assert_eq!(peek(&request(b"Cookie: mstshash=\r\n")), Peek::Request(None));
        assert_eq!(peek(&request(b"Cookie: mstshash=bob")), Peek::Request(None), "no CRLF");
        assert_eq!(peek(&request(b"Cookie: msts=3640205228.15629.0000\r\n")), Peek::Request(None));
    }

    #[test]
    fn other_protocols_and_lying_lengths_are_not_rdp() {
        let cases: &[&[u8]] = &[
            b"GET / HTTP/1.1\r\n\r\n",
            b"\x16\x03\x01\x02\x00\x01",
            b"\x04",
            b"\x03\x01",
            b"\x03\x00\x00\x05\x00",
            b"\x03\x00\xff\xff",
        ];
        for bytes in cases {
            assert_eq!(peek(bytes), Peek::NotRdp, "{bytes:?}");
        }
        // A connection confirm (0xD0), not a request.
        let mut confirm = request(b"");
        confirm[5] = 0xD0;
        assert_eq!(peek(&confirm), Peek::NotRdp);
        // A length indicator running past the packet.
        let mut long = request(b"");
        long[4] = 200;
        assert_eq!(peek(&long), Peek::NotRdp);
    }

    proptest::proptest! {
        /// Any bytes get a verdict without panicking, and a request's cookie survives
        /// whatever follows the packet; more bytes never turn a verdict into "need more".
        #[test]
        fn total_over_any_bytes(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..1200),
            user in "[a-zA-Z0-9._-]{1,40}",
        ) {
            let verdict = peek(&bytes);
            if bytes.len() >= MAX_PEEK_LEN {
                proptest::prop_assert_ne!(verdict, Peek::NeedMore);
            }
            let mut data = format!("Cookie: mstshash={user}\r\n").into_bytes();
            data.extend_from_slice(NEG_REQ);
            let mut packet = request(&data);
            packet.extend_from_slice(&bytes);
            proptest::prop_assert_eq!(peek(&packet), Peek::Request(Some(user.as_bytes())));
        }
    }
}
