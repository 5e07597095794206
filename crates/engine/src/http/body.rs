//! Message bodies: the chunked-coding scanner and the streaming relay.
//!
//! Bodies are never buffered whole. The relay moves bytes from one socket to
//! the other through one bounded buffer, and a chunked body is passed through
//! verbatim while [`ChunkedScanner`] validates its framing and finds its end,
//! so bytes of a pipelined next message are never forwarded with this one.
//!
//! Where a side's codec frames bodies (HTTP/2, HTTP/3), the body crosses as
//! parts instead ([`super::parts`]).

use std::io;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

use crate::transport::{Part, Trailers};

use switchyard_http::chunked::ChunkedScanner;
use switchyard_http::parse::Framing;

pub use crate::transport::Sink;

/// Read size while relaying large bodies.
const RELAY_CHUNK: usize = 64 * 1024;

/// Why a relay stopped early.
#[derive(Debug)]
pub enum RelayError {
    /// Reading the source failed or it closed before the body ended.
    Read(io::Error),
    /// The source sent nothing for the idle timeout.
    ReadTimeout,
    /// Writing to the destination failed.
    Write(io::Error),
    /// The destination accepted nothing for the idle timeout.
    WriteTimeout,
    /// The body's chunked framing is invalid.
    Framing(&'static str),
    /// The body exceeded the configured limit.
    TooLarge,
}

/// Body progress: how many bytes of it are still expected.
#[derive(Debug)]
enum Remaining {
    Length(u64),
    Chunked(ChunkedScanner),
    UntilClose,
}

/// One message body being relayed: its framing state and limit.
#[derive(Debug)]
pub struct Body {
    remaining: Remaining,
    limit: Option<u64>,
    total: u64,
    eof_ends: bool,
    decode: bool,
    last: bool,
    /// The trailers are kept for [`Body::trailer`].
    keep: bool,
    /// The trailers of a body relayed as parts, when kept.
    trailers: Option<Box<Trailers>>,
    /// A body relayed as parts ended (its last part came).
    parts_ended: bool,
}

impl Body {
    /// Payload bytes relayed so far.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// A body of `framing`, refused once it exceeds `limit` bytes of payload.
    pub fn new(framing: Framing, limit: Option<u64>) -> Result<Body, RelayError> {
        if let (Framing::Length(n), Some(max)) = (framing, limit) {
            if n > max {
                return Err(RelayError::TooLarge);
            }
        }
        Ok(Body { limit, ..Body::unlimited(framing) })
    }

    /// A body with no size limit (responses).
    pub fn unlimited(framing: Framing) -> Body {
        let remaining = match framing {
            Framing::Empty => Remaining::Length(0),
            Framing::Length(n) => Remaining::Length(n),
            Framing::Chunked => Remaining::Chunked(ChunkedScanner::new()),
            Framing::UntilClose => Remaining::UntilClose,
        };
        Body {
            remaining,
            limit: None,
            total: 0,
            eof_ends: false,
            decode: false,
            last: false,
            keep: false,
            trailers: None,
            parts_ended: false,
        }
    }

    /// Sends a chunked body decoded: payload only, no chunk framing or trailers.
    pub fn decoded(mut self) -> Self {
        self.decode = true;
        self
    }

    /// The connection closes once this body is sent, with nothing left
    /// unread: its last write may wait for the close's FIN
    /// ([`Sink::try_write_two_last`]).
    pub fn last_on_connection(mut self) -> Self {
        self.last = true;
        self
    }

    /// Keeps a chunked body's trailer fields as they pass (still relayed
    /// as they came), for [`trailer`](Self::trailer) to read at the end.
    pub fn keeping_trailers(mut self) -> Self {
        if let Remaining::Chunked(scanner) = &mut self.remaining {
            *scanner = ChunkedScanner::collecting_trailers();
        }
        self.keep = true;
        self
    }

    /// The value of trailer field `name`, when kept and present.
    pub fn trailer(&self, name: &[u8]) -> Option<&[u8]> {
        if let Some(trailers) = &self.trailers {
            return trailers.get(name);
        }
        match &self.remaining {
            Remaining::Chunked(scanner) => scanner.trailers().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|f| f.1),
            _ => None,
        }
    }

    /// Whether every byte of the body has been relayed.
    pub fn is_finished(&self) -> bool {
        if self.parts_ended {
            return true;
        }
        match &self.remaining {
            Remaining::Length(n) => *n == 0,
            Remaining::Chunked(scanner) => scanner.is_done(),
            Remaining::UntilClose => self.eof_ends,
        }
    }

    /// How much room a read for the rest of this body wants: what is left of
    /// a body with a length (at least [`MIN_ROOM`]), else [`RELAY_CHUNK`]. A
    /// fresh buffer (an HTTP/2 server stream's) is then sized for the body,
    /// not 64 KiB for a few hundred bytes; a reused one keeps its room.
    pub(crate) fn room(&self) -> usize {
        match self.remaining {
            Remaining::Length(n) => usize::try_from(n).unwrap_or(usize::MAX).clamp(MIN_ROOM, RELAY_CHUNK),
            _ => RELAY_CHUNK,
        }
    }

    /// Body bytes relayed so far (framing included for chunked bodies).
    pub fn relayed(&self) -> u64 {
        self.total
    }

    /// Like `take`, for a body sent [`decoded`](Self::decoded): how many bytes
    /// at the front of `buf` belong to the body, and how many of them are
    /// payload (moved to the front of `buf`).
    pub(crate) fn take_payload(&mut self, buf: &mut [u8]) -> Result<(usize, usize), RelayError> {
        self.take(buf)
    }

    /// The source closed: whether that ends the body (framed by the close)
    /// rather than cutting it short.
    pub(super) fn end_at_close(&mut self) -> bool {
        if matches!(self.remaining, Remaining::UntilClose) {
            self.eof_ends = true;
        }
        self.eof_ends
    }

    /// The body is about to be taken apart into parts ([`super::parts`]):
    /// a chunked body's framing is removed as it is taken and its trailer
    /// fields kept. Before any of it was taken; again, it changes nothing.
    pub(crate) fn start_decoding(&mut self) {
        if self.decode {
            return;
        }
        self.decode = true;
        if let Remaining::Chunked(scanner) = &mut self.remaining {
            *scanner = ChunkedScanner::collecting_trailers();
        }
    }

    /// The trailer fields of a chunked body taken apart, once it ended:
    /// those that may be trailers, or `None` when none is left.
    pub(crate) fn scanned_trailers(&self) -> Option<Trailers> {
        let Remaining::Chunked(scanner) = &self.remaining else { return None };
        let mut trailers = Trailers::default();
        for (name, value) in scanner.trailers() {
            trailers.push(name, value);
        }
        (!trailers.is_empty()).then_some(trailers)
    }

    /// Whether the body is written in chunked coding to a sink of bytes
    /// (chunked framing, not decoded for an HTTP/1.0 client).
    pub(crate) fn writes_chunks(&self) -> bool {
        matches!(self.remaining, Remaining::Chunked(_)) && !self.decode
    }

    /// Whether the connection closes once this body is sent
    /// ([`Body::last_on_connection`]).
    pub(crate) fn is_last_on_connection(&self) -> bool {
        self.last
    }

    /// Counts a part of a body relayed as parts, as [`take`](Self::take)
    /// counts bytes: the payload against a length the head gave (no more,
    /// and all of it by the end) and against the limit. Returns whether the
    /// part ends the body.
    pub(crate) fn take_part(&mut self, part: &Part) -> Result<bool, RelayError> {
        let (len, end) = match part {
            Part::Data(data, end) => (data.len() as u64, *end),
            Part::Trailers(trailers) => {
                if self.keep {
                    self.trailers = Some(Box::new(trailers.clone()));
                }
                (0, true)
            }
            Part::End => (0, true),
        };
        self.total += len;
        if self.limit.is_some_and(|max| self.total > max) {
            return Err(RelayError::TooLarge);
        }
        if let Remaining::Length(left) = &mut self.remaining {
            if len > *left {
                return Err(RelayError::Framing("body longer than its content-length"));
            }
            *left -= len;
            if end && *left > 0 {
                return Err(RelayError::Read(io::ErrorKind::UnexpectedEof.into()));
            }
        }
        self.parts_ended = end;
        Ok(end)
    }

    /// How many bytes at the front of `buf` belong to the body, advancing the
    /// state, and how many to send: the bytes to send are moved to the front
    /// of `buf` (all of them, unless a chunked body is being decoded).
    fn take(&mut self, buf: &mut [u8]) -> Result<(usize, usize), RelayError> {
        if let (true, Remaining::Chunked(scanner)) = (self.decode, &mut self.remaining) {
            let mut runs = Vec::new();
            let consumed = scanner.scan_with(buf, |run| runs.push(run)).map_err(RelayError::Framing)?;
            if self.limit.is_some_and(|max| scanner.data_bytes() > max) {
                return Err(RelayError::TooLarge);
            }
            // Runs are ascending and never overlap their destination's tail,
            // so compacting them in place front to back is safe.
            let mut end = 0;
            for run in runs {
                let len = run.len();
                buf.copy_within(run, end);
                end += len;
            }
            self.total += end as u64;
            return Ok((consumed, end));
        }
        let take = match &mut self.remaining {
            Remaining::Length(n) => {
                let take = buf.len().min(usize::try_from(*n).unwrap_or(usize::MAX));
                *n -= take as u64;
                take
            }
            Remaining::Chunked(scanner) => {
                let take = scanner.scan(buf).map_err(RelayError::Framing)?;
                if self.limit.is_some_and(|max| scanner.data_bytes() > max) {
                    return Err(RelayError::TooLarge);
                }
                take
            }
            Remaining::UntilClose => buf.len(),
        };
        self.total += take as u64;
        Ok((take, take))
    }
}

/// Writes `head` and the part of `body` already in `buf`, in one write when
/// small. `buf` then starts with whatever follows those bytes.
pub async fn send_head<W: Sink>(
    head: &[u8],
    buf: &mut BytesMut,
    dst: &mut W,
    body: &mut Body,
    idle: Duration,
) -> Result<(), RelayError> {
    let (consumed, first) = body.take(buf)?;
    // Head and the body bytes already read leave in one gathered write (and,
    // when small, one packet) without being copied together first.
    if body.last && body.is_finished() {
        write_all_last(dst, head, &buf[..first], idle).await?;
    } else {
        write_all_two(dst, head, &buf[..first], idle).await?;
    }
    buf.advance(consumed);
    Ok(())
}

/// Makes room for a read of `want` bytes in `buf`. An empty buffer whose
/// allocation is too small (a new server connection's, an HTTP/2 server
/// stream's) is replaced rather than grown: growing copies the whole old
/// allocation over, though none of its bytes are still wanted.
pub(crate) fn make_room(buf: &mut BytesMut, want: usize) {
    if !buf.try_reclaim(want) && buf.is_empty() {
        *buf = BytesMut::with_capacity(want);
    }
    buf.reserve(want);
}

/// The least room a read is given ([`Body::room`]).
const MIN_ROOM: usize = 4 * 1024;

/// Relays the rest of `body` from `src` to `dst` through `buf`. On success,
/// `buf` keeps exactly the bytes that follow the body.
pub async fn pump<R: AsyncRead + Unpin, W: Sink>(
    src: &mut R,
    buf: &mut BytesMut,
    dst: &mut W,
    body: &mut Body,
    idle: Duration,
) -> Result<(), RelayError> {
    while !body.is_finished() {
        make_room(buf, body.room());
        match timeout(idle, src.read_buf(buf)).await {
            Err(_) => return Err(RelayError::ReadTimeout),
            Ok(Err(e)) => return Err(RelayError::Read(e)),
            Ok(Ok(0)) => {
                if matches!(body.remaining, Remaining::UntilClose) {
                    body.eof_ends = true;
                    break;
                }
                return Err(RelayError::Read(io::ErrorKind::UnexpectedEof.into()));
            }
            Ok(Ok(_)) => {}
        }
        let (consumed, send) = body.take(buf)?;
        if body.last && body.is_finished() {
            write_all_last(dst, &buf[..send], &[], idle).await?;
        } else {
            write_all(dst, &buf[..send], idle).await?;
        }
        buf.advance(consumed);
    }
    Ok(())
}

/// Writes all of `a` then all of `b`, gathered into one system call when the
/// socket takes them at once.
pub async fn write_all_two<W: Sink>(dst: &mut W, a: &[u8], b: &[u8], idle: Duration) -> Result<(), RelayError> {
    if b.is_empty() {
        return write_all(dst, a, idle).await;
    }
    let first = dst.try_write_two_now(a, b);
    write_rest(dst, a, b, first, idle).await
}

/// [`write_all_two`] for the last bytes before the connection closes: what
/// the socket takes at once may leave with the FIN ([`Sink::try_write_two_last`]);
/// a rest that has to wait goes the usual way.
pub(crate) async fn write_all_last<W: Sink>(dst: &mut W, a: &[u8], b: &[u8], idle: Duration) -> Result<(), RelayError> {
    if a.is_empty() && b.is_empty() {
        return Ok(());
    }
    let first = dst.try_write_two_last(a, b);
    write_rest(dst, a, b, first, idle).await
}

/// After a first non-blocking write of `a` then `b` that took `first` bytes,
/// writes what is left of them, waiting as needed.
async fn write_rest<W: Sink>(
    dst: &mut W,
    a: &[u8],
    b: &[u8],
    first: io::Result<usize>,
    idle: Duration,
) -> Result<(), RelayError> {
    let written = match first {
        Ok(n) => n,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
        Err(e) => return Err(RelayError::Write(e)),
    };
    if written < a.len() {
        write_all(dst, &a[written..], idle).await?;
        write_all(dst, b, idle).await
    } else {
        write_all(dst, &b[written - a.len()..], idle).await
    }
}

/// Writes all of `data`, bounded by `idle` for the whole write.
pub async fn write_all<W: Sink>(dst: &mut W, data: &[u8], idle: Duration) -> Result<(), RelayError> {
    if data.is_empty() {
        return Ok(());
    }
    // Fast path: a loopback or idle socket usually takes the whole write at once,
    // which spares arming a timer.
    let written = match dst.try_write_now(data) {
        Ok(n) => n,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
        Err(e) => return Err(RelayError::Write(e)),
    };
    if written == data.len() {
        return Ok(());
    }
    // The flush matters for streams that buffer (TLS records): a plain socket's is a no-op.
    let rest = async {
        dst.write_all(&data[written..]).await?;
        dst.flush().await
    };
    match timeout(idle, rest).await {
        Err(_) => Err(RelayError::WriteTimeout),
        Ok(Err(e)) => Err(RelayError::Write(e)),
        Ok(Ok(())) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn decoding_keeps_only_payload() {
        let mut body = Body::new(Framing::Chunked, None).expect("body").decoded();
        let mut buf = b"5\r\nhello\r\n6;x=1\r\n world\r\n0\r\nT: 1\r\n\r\nNEXT".to_vec();
        let (consumed, send) = body.take(&mut buf).expect("valid");
        assert_eq!(&buf[..send], b"hello world");
        assert_eq!(consumed, buf.len() - 4);
        assert!(body.is_finished());
    }

    #[test]
    fn room_for_a_read_keeps_what_is_unread() {
        // A consumed head in a small buffer: room is made, nothing is kept.
        let mut buf = BytesMut::with_capacity(1024);
        buf.extend_from_slice(b"HTTP/1.1 200 OK\r\n\r\n");
        buf.advance(buf.len());
        make_room(&mut buf, RELAY_CHUNK);
        assert!(buf.is_empty());
        assert!(buf.capacity() >= RELAY_CHUNK);
        // Bytes not yet relayed stay, in order.
        let mut buf = BytesMut::with_capacity(16);
        buf.extend_from_slice(b"head|body");
        buf.advance(5);
        make_room(&mut buf, RELAY_CHUNK);
        assert_eq!(&buf[..], b"body");
        assert!(buf.capacity() >= RELAY_CHUNK);
    }

    /// A short body with a length reads into a small buffer: a fresh HTTP/2
    /// server stream's buffer is then no 64 KiB allocation for 128 bytes.
    #[test]
    fn a_short_body_gets_a_small_room_and_a_long_one_the_whole_chunk() {
        let body = Body::new(Framing::Length(128), None).expect("body");
        assert_eq!(body.room(), MIN_ROOM);
        let mut buf = BytesMut::new();
        make_room(&mut buf, body.room());
        assert!((MIN_ROOM..RELAY_CHUNK).contains(&buf.capacity()), "{}", buf.capacity());
        let body = Body::new(Framing::Length(20_000), None).expect("body");
        assert_eq!(body.room(), 20_000);
        for framing in [Framing::Length(1 << 40), Framing::Chunked] {
            assert_eq!(Body::new(framing, None).expect("body").room(), RELAY_CHUNK);
        }
    }
}
