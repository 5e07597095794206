//! The replication protocol's bytes: handshake, frames and records. Sans-io.
//!
//! A connection goes from the node that *sends* updates (the dialer) to the
//! node that takes them (the acceptor); each node dials each of its peers, so
//! a pair runs two connections, one per direction.
//!
//! Handshake (mutual proof of the shared key, HMAC-SHA256, no secret on the wire):
//!
//! ```text
//! dialer   → acceptor: "SYPEER01" | nonce_d (32) | name length (1) | name
//! acceptor → dialer:   nonce_a (32) | HMAC(key, "acceptor" | nonce_d | nonce_a)
//! dialer   → acceptor: HMAC(key, "dialer" | nonce_d | nonce_a | name)
//! ```
//!
//! Then frames: `length (u32, big endian) | payload | HMAC(session, seq | payload)`,
//! where `session = HMAC(key, direction | nonce_d | nonce_a)` (one key per
//! direction) and `seq` counts the frames of that direction from 0, so a frame
//! cannot be altered, replayed or moved to another connection. Payload type 1
//! is a batch of records (dialer → acceptor), type 2 an acknowledgement of the
//! batch with sequence number `seq` (acceptor → dialer). The traffic is
//! authenticated, not encrypted: it carries client addresses and session keys,
//! so it belongs on a private link.
//!
//! Records: 1 `Set` and 2 `Remove` (a stick-table entry), 3 `SyncStart` and
//! 4 `SyncDone` (a full copy's frame), 5 `Rate` (a client's rate-limit
//! buckets in a service's protection table, as time ahead of the sending
//! instant, so the two nodes' clocks need not agree).
//!
//! Invariants: decoding never panics and never allocates more than the frame's
//! declared length, which is at most [`MAX_FRAME`]; a malformed frame is an
//! error that closes the connection.

use aws_lc_rs::hmac;

use crate::persist::MAX_NAME_KEY;
use crate::replica::TableKind;

/// First bytes of a dialer's hello.
pub const MAGIC: &[u8; 8] = b"SYPEER01";
/// Bytes of a nonce and of a MAC.
pub const TAG: usize = 32;
/// Largest frame payload accepted.
pub const MAX_FRAME: usize = 4 << 20;
/// Records per batch a sender aims at (a full copy is many batches).
pub const BATCH: usize = 1024;

const BATCH_FRAME: u8 = 1;
const ACK_FRAME: u8 = 2;

/// One replicated change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A key sticks to a server.
    Set {
        /// Pool name.
        pool: String,
        /// The pool's table kind.
        kind: TableKind,
        /// The key in wire form.
        key: Vec<u8>,
        /// Server name.
        server: String,
        /// Milliseconds since the entry's last use, at sending.
        idle_ms: u32,
    },
    /// A key left a table.
    Remove {
        /// Pool name.
        pool: String,
        /// The pool's table kind.
        kind: TableKind,
        /// The key in wire form.
        key: Vec<u8>,
    },
    /// A client's rate-limit buckets in a service's protection table.
    Rate {
        /// Service name.
        service: String,
        /// The client address: 4 or 16 bytes.
        client: Vec<u8>,
        /// How far the connection bucket's theoretical arrival time is ahead
        /// of the sending instant, in microseconds (0: the bucket is full).
        connection_us: u64,
        /// The same for the request bucket.
        request_us: u64,
    },
    /// A full copy begins.
    SyncStart,
    /// A full copy is complete: the receiver now holds everything the sender had.
    SyncDone,
}

/// What a frame's payload says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// Records, in order.
    Batch(Vec<Record>),
    /// The batch with this sequence number was applied.
    Ack(u64),
}

/// Why bytes from a peer were refused; the connection closes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Not a switchyard peer, or another protocol version.
    #[error("not a switchyard peer hello")]
    BadHello,
    /// A proof or a frame MAC did not verify: the peer does not hold the key.
    #[error("authentication failed (wrong or missing cluster key)")]
    BadMac,
    /// A frame longer than [`MAX_FRAME`].
    #[error("frame of {0} bytes is too large")]
    TooLarge(usize),
    /// A payload that does not parse.
    #[error("malformed frame: {0}")]
    Malformed(&'static str),
}

fn sign(key: &[u8], parts: &[&[u8]]) -> hmac::Tag {
    let mut ctx = hmac::Context::with_key(&hmac::Key::new(hmac::HMAC_SHA256, key));
    parts.iter().for_each(|p| ctx.update(p));
    ctx.sign()
}

/// The acceptor's proof that it holds `key`.
pub fn acceptor_proof(key: &[u8], nonce_d: &[u8], nonce_a: &[u8]) -> [u8; TAG] {
    tag(sign(key, &[b"acceptor", nonce_d, nonce_a]))
}

/// The dialer's proof that it holds `key`, bound to the name it claims.
pub fn dialer_proof(key: &[u8], nonce_d: &[u8], nonce_a: &[u8], name: &[u8]) -> [u8; TAG] {
    tag(sign(key, &[b"dialer", nonce_d, nonce_a, name]))
}

/// Compares a received proof with the expected one in constant time.
pub fn verify(expected: &[u8; TAG], got: &[u8]) -> Result<(), WireError> {
    aws_lc_rs::constant_time::verify_slices_are_equal(expected, got).map_err(|_| WireError::BadMac)
}

fn tag(t: hmac::Tag) -> [u8; TAG] {
    let mut out = [0; TAG];
    out.copy_from_slice(t.as_ref());
    out
}

/// The dialer's hello: magic, nonce, name (at most 255 bytes; validation keeps names to 64).
pub fn hello(nonce_d: &[u8; TAG], name: &str) -> Vec<u8> {
    let name = &name.as_bytes()[..name.len().min(255)];
    let mut out = Vec::with_capacity(MAGIC.len() + TAG + 1 + name.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(nonce_d);
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out
}

/// Frame authentication for one direction of one connection.
pub struct Sealer {
    key: hmac::Key,
    seq: u64,
}

impl Sealer {
    /// The sealer of direction `direction` (`b"d2a"` or `b"a2d"`) after a handshake.
    pub fn new(key: &[u8], direction: &[u8], nonce_d: &[u8], nonce_a: &[u8]) -> Self {
        let session = sign(key, &[direction, nonce_d, nonce_a]);
        Sealer { key: hmac::Key::new(hmac::HMAC_SHA256, session.as_ref()), seq: 0 }
    }

    /// Sequence number the next frame gets.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// `payload` as a whole frame: length, payload, MAC. Advances the sequence.
    pub fn seal(&mut self, payload: &[u8]) -> Vec<u8> {
        let mac = self.mac(payload);
        self.seq += 1;
        let mut out = Vec::with_capacity(4 + payload.len() + TAG);
        out.extend_from_slice(&((payload.len() + TAG) as u32).to_be_bytes());
        out.extend_from_slice(payload);
        out.extend_from_slice(&mac);
        out
    }

    /// Checks a received frame body (payload and MAC, without the length) and
    /// returns its payload. Advances the sequence.
    pub fn open<'f>(&mut self, body: &'f [u8]) -> Result<&'f [u8], WireError> {
        let split = body.len().checked_sub(TAG).ok_or(WireError::Malformed("frame shorter than its MAC"))?;
        let (payload, mac) = body.split_at(split);
        verify(&self.mac(payload), mac)?;
        self.seq += 1;
        Ok(payload)
    }

    fn mac(&self, payload: &[u8]) -> [u8; TAG] {
        let mut ctx = hmac::Context::with_key(&self.key);
        ctx.update(&self.seq.to_be_bytes());
        ctx.update(payload);
        tag(ctx.sign())
    }
}

/// A frame body's length from its 4-byte prefix, refused above [`MAX_FRAME`].
pub fn frame_len(prefix: [u8; 4]) -> Result<usize, WireError> {
    let len = u32::from_be_bytes(prefix) as usize;
    if len > MAX_FRAME + TAG {
        return Err(WireError::TooLarge(len));
    }
    Ok(len)
}

/// Encodes a batch payload.
pub fn encode_batch(records: &[Record]) -> Vec<u8> {
    let mut out = vec![BATCH_FRAME];
    for r in records {
        match r {
            Record::Set { pool, kind, key, server, idle_ms } => {
                out.push(1);
                short(&mut out, pool.as_bytes());
                out.push(kind.code());
                long(&mut out, key);
                short(&mut out, server.as_bytes());
                out.extend_from_slice(&idle_ms.to_be_bytes());
            }
            Record::Remove { pool, kind, key } => {
                out.push(2);
                short(&mut out, pool.as_bytes());
                out.push(kind.code());
                long(&mut out, key);
            }
            Record::Rate { service, client, connection_us, request_us } => {
                out.push(5);
                short(&mut out, service.as_bytes());
                short(&mut out, client);
                out.extend_from_slice(&connection_us.to_be_bytes());
                out.extend_from_slice(&request_us.to_be_bytes());
            }
            Record::SyncStart => out.push(3),
            Record::SyncDone => out.push(4),
        }
    }
    out
}

/// Encodes an acknowledgement payload.
pub fn encode_ack(seq: u64) -> Vec<u8> {
    let mut out = vec![ACK_FRAME];
    out.extend_from_slice(&seq.to_be_bytes());
    out
}

/// Decodes a payload.
pub fn decode(payload: &[u8]) -> Result<Payload, WireError> {
    let mut r = Reader(payload);
    match r.u8()? {
        ACK_FRAME => Ok(Payload::Ack(u64::from_be_bytes(r.array()?))),
        BATCH_FRAME => {
            let mut records = Vec::new();
            while !r.0.is_empty() {
                records.push(r.record()?);
            }
            Ok(Payload::Batch(records))
        }
        _ => Err(WireError::Malformed("unknown frame type")),
    }
}

/// Names are at most 255 bytes (one length byte); longer ones are cut.
fn short(out: &mut Vec<u8>, s: &[u8]) {
    let s = &s[..s.len().min(255)];
    out.push(s.len() as u8);
    out.extend_from_slice(s);
}

/// Keys are at most [`MAX_NAME_KEY`] bytes, so two length bytes always suffice.
fn long(out: &mut Vec<u8>, s: &[u8]) {
    let s = &s[..s.len().min(u16::MAX as usize)];
    out.extend_from_slice(&(s.len() as u16).to_be_bytes());
    out.extend_from_slice(s);
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], WireError> {
        if self.0.len() < n {
            return Err(WireError::Malformed("truncated record"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        self.take(N)?.try_into().map_err(|_| WireError::Malformed("truncated record"))
    }

    fn text(&mut self) -> Result<String, WireError> {
        let n = self.u8()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| WireError::Malformed("name is not UTF-8"))
    }

    fn key(&mut self) -> Result<Vec<u8>, WireError> {
        let n = u16::from_be_bytes(self.array()?) as usize;
        if n > MAX_NAME_KEY {
            return Err(WireError::Malformed("key too long"));
        }
        Ok(self.take(n)?.to_vec())
    }

    fn kind(&mut self) -> Result<TableKind, WireError> {
        TableKind::of(self.u8()?).ok_or(WireError::Malformed("unknown table kind"))
    }

    fn record(&mut self) -> Result<Record, WireError> {
        Ok(match self.u8()? {
            1 => {
                let (pool, kind, key) = (self.text()?, self.kind()?, self.key()?);
                let server = self.text()?;
                Record::Set { pool, kind, key, server, idle_ms: u32::from_be_bytes(self.array()?) }
            }
            2 => Record::Remove { pool: self.text()?, kind: self.kind()?, key: self.key()? },
            3 => Record::SyncStart,
            4 => Record::SyncDone,
            5 => {
                let service = self.text()?;
                let n = self.u8()? as usize;
                if n != 4 && n != 16 {
                    return Err(WireError::Malformed("client address is neither 4 nor 16 bytes"));
                }
                let client = self.take(n)?.to_vec();
                let connection_us = u64::from_be_bytes(self.array()?);
                Record::Rate { service, client, connection_us, request_us: u64::from_be_bytes(self.array()?) }
            }
            _ => return Err(WireError::Malformed("unknown record type")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(pool: &str, key: &[u8], server: &str) -> Record {
        Record::Set { pool: pool.into(), kind: TableKind::Header, key: key.to_vec(), server: server.into(), idle_ms: 7 }
    }

    #[test]
    fn batches_round_trip() {
        let records = vec![
            Record::SyncStart,
            set("web", b"alice", "a"),
            Record::Set {
                pool: "p".into(),
                kind: TableKind::Source,
                key: vec![10, 0, 0, 1],
                server: "b".into(),
                idle_ms: 0,
            },
            Record::Remove { pool: "web".into(), kind: TableKind::CookieLearn, key: b"s1".to_vec() },
            Record::Rate { service: "web".into(), client: vec![10, 0, 0, 9], connection_us: 0, request_us: 1_500_000 },
            Record::Rate { service: "web".into(), client: vec![0xfd; 16], connection_us: u64::MAX, request_us: 3 },
            Record::SyncDone,
        ];
        assert_eq!(decode(&encode_batch(&records)), Ok(Payload::Batch(records)));
        assert_eq!(decode(&encode_ack(42)), Ok(Payload::Ack(42)));
    }

    #[test]
    fn frames_verify_in_order_and_only_with_the_key() {
        let (nd, na) = ([1; TAG], [2; TAG]);
        let key = b"0123456789abcdef";
        let mut tx = Sealer::new(key, b"d2a", &nd, &na);
        let mut rx = Sealer::new(key, b"d2a", &nd, &na);
        let first = tx.seal(b"one");
        let second = tx.seal(b"two");
        // Replaying or reordering fails: the MAC covers the sequence number.
        assert_eq!(Sealer::new(key, b"d2a", &nd, &na).open(&second[4..]), Err(WireError::BadMac));
        assert_eq!(rx.open(&first[4..]), Ok(&b"one"[..]));
        assert_eq!(rx.open(&second[4..]), Ok(&b"two"[..]));
        let mut wrong = Sealer::new(b"another key 1234", b"d2a", &nd, &na);
        assert_eq!(wrong.open(&first[4..]), Err(WireError::BadMac));
        // The other direction's key does not open it either.
        assert_eq!(Sealer::new(key, b"a2d", &nd, &na).open(&first[4..]), Err(WireError::BadMac));
    }

    #[test]
    fn proofs_depend_on_key_nonces_and_name() {
        let key = b"0123456789abcdef";
        let p = dialer_proof(key, &[1; TAG], &[2; TAG], b"lb1");
        assert!(verify(&p, &dialer_proof(key, &[1; TAG], &[2; TAG], b"lb1")).is_ok());
        assert!(verify(&p, &dialer_proof(key, &[1; TAG], &[2; TAG], b"lb2")).is_err());
        assert!(verify(&p, &dialer_proof(b"fedcba9876543210", &[1; TAG], &[2; TAG], b"lb1")).is_err());
        assert!(verify(&p, &acceptor_proof(key, &[1; TAG], &[2; TAG])).is_err());
        assert!(frame_len(((MAX_FRAME + TAG + 1) as u32).to_be_bytes()).is_err());
    }

    #[test]
    fn a_rate_record_with_a_bad_address_length_is_refused() {
        let record = Record::Rate { service: "web".into(), client: vec![1, 2, 3, 4], connection_us: 1, request_us: 2 };
        let mut bytes = encode_batch(&[record]);
        // Frame type, record type, service length, "web", then the address length.
        bytes[6] = 5;
        assert_eq!(decode(&bytes), Err(WireError::Malformed("client address is neither 4 nor 16 bytes")));
    }

    proptest! {
        #[test]
        fn decoding_any_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn sets_round_trip(pool in "[a-z]{1,20}", key in proptest::collection::vec(any::<u8>(), 0..253), server in "[a-z0-9]{1,20}", idle_ms in any::<u32>()) {
            let r = vec![Record::Set { pool, kind: TableKind::Sni, key, server, idle_ms }];
            prop_assert_eq!(decode(&encode_batch(&r)), Ok(Payload::Batch(r)));
        }
    }
}
