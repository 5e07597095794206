//! Response compression: the phase between the response rewrite and the body
//! relay (phase 8 of [`super`]).
//!
//! Three steps, each its own function:
//! 1. [`Accepted::parse`] reads the request's `Accept-Encoding` while the
//!    request head is still in the buffer (the head leaves it before the
//!    request is forwarded), keeping only the q-values that matter.
//! 2. [`decide`] decides from the service's [`Compression`], the rules' `compress
//!    = false`, the request and the response head whether the body is encoded
//!    (or, with `decompress`, a gzip body decoded) and with what. Skipped:
//!    HEAD, statuses without a body, 206 and `Content-Range`, a response that
//!    already has a `Content-Encoding`, `Cache-Control: no-transform`, a
//!    type not in `types`, a `Content-Length` outside `min_size..=max_size`.
//!    A response of unknown length (chunked, until close) is compressed when
//!    its type matches: `max_size` cannot bound it without buffering.
//! 3. [`rewrite_head`] edits the rewritten response head: `Content-Length`
//!    goes (the new length is unknown until the end), `Transfer-Encoding:
//!    chunked` comes for an HTTP/1.1 client (an HTTP/1.0 client's body ends
//!    with the connection), `Content-Encoding` is set, `Accept-Encoding` is
//!    added to `Vary`, and a strong `ETag` is weakened (`W/`): the encoded
//!    bytes are not the origin's bytes, but they are semantically equivalent.
//!    Then [`relay`] streams the body through the coder.
//!
//! Streaming: the body is read as it arrives (payload only, whatever its
//! framing: [`Body::decoded`]), fed to the coder, and the coder's output is
//! sent as one chunk per batch (to an HTTP/2 or HTTP/3 client, as one DATA
//! part per batch: no chunk framing to be scanned again). After each read, bytes that are already
//! waiting are read too without flushing (a flush costs ratio, and brotli
//! much CPU); once the server has sent nothing for [`FLUSH_DELAY`], the
//! coder is flushed and what it produced goes to the client, so a slow
//! server's bytes are not held back longer than that. Memory per
//! response is the coder's state plus one read buffer and its output, never
//! the whole body. gzip is a raw deflate stream framed here (header, CRC-32,
//! length) so that its state can be reset and reused: each worker keeps a few
//! in a thread-local pool instead of allocating one per response.
//!
//! The hook in [`super::respond`] is one branch: with a [`Coding`] the body
//! goes through [`relay`] here, otherwise through [`super::parts::relay`]
//! unchanged. What leaves here is exactly what the client receives, so a
//! later tee of the response (a cache store) belongs after this phase, around
//! the client writes of both relays.
//!
//! Invariants: no peer input can panic this code; a coder error (a corrupt
//! gzip body being decoded) ends the response like a broken server would.

use std::future::Future;
use std::io::{self, Write};
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use switchyard_config::Encoding;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::timeout;

use super::body::{write_all, write_all_two, Body, RelayError, Sink};
use crate::transport::{Part, Source};

/// Read size while compressing.
const READ_CHUNK: usize = 64 * 1024;
/// Coder output sent without waiting for a flush once it grows this large.
const SEND_AT: usize = 64 * 1024;
/// How long a pause of the server may be before the coder is flushed and
/// what it produced is sent.
const FLUSH_DELAY: Duration = Duration::from_millis(5);
/// Room kept at the front of the output for the chunk-size line.
const CHUNK_HEAD: usize = 18;
/// Brotli window (log2): 512 KiB, a good ratio without a 4 MiB ring per response.
const BROTLI_WINDOW: u32 = 19;

pub use switchyard_http::compress::*;

/// Finished gzip compressors a worker keeps for reuse, per level (and as
/// many of switchyard's own encoders).
const GZIP_POOL: usize = 8;
/// Output room made before each deflate call.
const DEFLATE_ROOM: usize = 32 * 1024;

/// A worker's idle coder states, each with the level it was made for.
type Pool<T> = std::thread::LocalKey<std::cell::RefCell<Vec<(u32, T)>>>;

/// Takes an idle state made for `level` out of `pool`, if there is one.
fn take_pooled<T>(pool: &'static Pool<T>, level: u32) -> Option<T> {
    pool.with_borrow_mut(|pool| {
        let i = pool.iter().rposition(|(l, _)| *l == level)?;
        Some(pool.swap_remove(i).1)
    })
}

/// Gives a state back to `pool`, unless it holds `cap` already.
fn give_back<T>(pool: &'static Pool<T>, level: u32, state: T, cap: usize) {
    pool.with_borrow_mut(|pool| {
        if pool.len() < cap {
            pool.push((level, state));
        }
    });
}

thread_local! {
    /// A worker's reset compressors: a deflate state is about 300 KiB to
    /// allocate and fault in, which a small response would pay every time.
    static DEFLATERS: std::cell::RefCell<Vec<(u32, flate2::Compress)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Spare output buffers a worker keeps for the next responses.
const OUTPUT_POOL: usize = 8;
/// Output buffers larger than this are freed rather than kept.
const OUTPUT_KEEP: usize = 256 * 1024;

thread_local! {
    /// A worker's spare coder output buffers: a response's output grows to
    /// tens of KiB, which a fresh buffer would reallocate (and copy) on the
    /// way for every response.
    static OUTPUTS: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// An output buffer holding [`CHUNK_HEAD`] free bytes, spare if there is one.
fn take_output() -> Vec<u8> {
    let mut out = OUTPUTS.with_borrow_mut(Vec::pop).unwrap_or_default();
    out.clear();
    out.resize(CHUNK_HEAD, 0);
    out
}

/// Keeps a sent response's output buffer for the next one.
fn give_back_output(out: Vec<u8>) {
    if out.capacity() <= OUTPUT_KEEP {
        OUTPUTS.with_borrow_mut(|pool| {
            if pool.len() < OUTPUT_POOL {
                pool.push(out);
            }
        });
    }
}

thread_local! {
    /// A worker's idle level-1 encoders (about 200 KiB each once used).
    static FAST_GZIP: std::cell::RefCell<Vec<(u32, Box<switchyard_deflate::Gzip>)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// gzip level 1: switchyard's own single-pass encoder
/// ([`switchyard_deflate`]), several times cheaper per byte than zlib-rs at
/// level 1, at a better ratio. Its state comes from and goes back to the
/// worker's pool; starting a stream clears nothing.
struct FastGzip {
    gzip: Option<Box<switchyard_deflate::Gzip>>,
    out: Vec<u8>,
}

impl FastGzip {
    fn new(mut out: Vec<u8>) -> FastGzip {
        let mut gzip = take_pooled(&FAST_GZIP, 1).unwrap_or_default();
        gzip.start(&mut out);
        FastGzip { gzip: Some(gzip), out }
    }

    /// The encoder and the output buffer, unless the stream was finished.
    fn parts(&mut self) -> io::Result<(&mut switchyard_deflate::Gzip, &mut Vec<u8>)> {
        let gzip = self.gzip.as_deref_mut().ok_or_else(|| io::Error::other("gzip stream already finished"))?;
        Ok((gzip, &mut self.out))
    }

    fn write(&mut self, data: &[u8]) -> io::Result<()> {
        let (gzip, out) = self.parts()?;
        gzip.write(data, out);
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        let (gzip, out) = self.parts()?;
        gzip.flush(out);
        Ok(())
    }

    fn finish(&mut self) -> io::Result<Vec<u8>> {
        let (gzip, out) = self.parts()?;
        gzip.finish(out);
        Ok(std::mem::take(out))
    }
}

impl Drop for FastGzip {
    fn drop(&mut self) {
        if let Some(gzip) = self.gzip.take() {
            give_back(&FAST_GZIP, 1, gzip, GZIP_POOL);
        }
    }
}

/// gzip (RFC 1952) at levels 2 to 9: the 10-byte header, a raw deflate stream whose state
/// comes from and goes back to the worker's pool, and the CRC-32 and length.
struct Gzip {
    deflate: Option<flate2::Compress>,
    level: u32,
    crc: flate2::Crc,
    out: Vec<u8>,
}

impl Gzip {
    fn new(level: u32, mut out: Vec<u8>) -> Gzip {
        let deflate = take_pooled(&DEFLATERS, level)
            .unwrap_or_else(|| flate2::Compress::new(flate2::Compression::new(level), false));
        // No name, no time, unknown OS.
        out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255]);
        Gzip { deflate: Some(deflate), level, crc: flate2::Crc::new(), out }
    }

    fn write(&mut self, data: &[u8]) -> io::Result<()> {
        self.crc.update(data);
        self.deflate(data, flate2::FlushCompress::None)
    }

    fn finish(&mut self) -> io::Result<Vec<u8>> {
        self.deflate(&[], flate2::FlushCompress::Finish)?;
        let mut out = std::mem::take(&mut self.out);
        out.extend_from_slice(&self.crc.sum().to_le_bytes());
        out.extend_from_slice(&self.crc.amount().to_le_bytes());
        Ok(out)
    }

    fn deflate(&mut self, mut input: &[u8], flush: flate2::FlushCompress) -> io::Result<()> {
        let Some(d) = self.deflate.as_mut() else { return Err(io::Error::other("gzip stream already finished")) };
        loop {
            if self.out.capacity() - self.out.len() < DEFLATE_ROOM / 2 {
                self.out.reserve(DEFLATE_ROOM);
            }
            let (before_in, before_out) = (d.total_in(), d.total_out());
            let status = d.compress_vec(input, &mut self.out, flush).map_err(io::Error::other)?;
            let used = usize::try_from(d.total_in() - before_in).unwrap_or(input.len()).min(input.len());
            input = &input[used..];
            let room_left = self.out.len() < self.out.capacity();
            // zlib's contract: a flush is complete once a call leaves output room.
            let done = match flush {
                flate2::FlushCompress::Finish => status == flate2::Status::StreamEnd,
                _ => input.is_empty() && room_left,
            };
            if done {
                return Ok(());
            }
            if used == 0 && d.total_out() == before_out && room_left {
                return Err(io::Error::other("deflate made no progress"));
            }
        }
    }
}

impl Drop for Gzip {
    fn drop(&mut self) {
        if let Some(mut deflate) = self.deflate.take() {
            deflate.reset();
            give_back(&DEFLATERS, self.level, deflate, GZIP_POOL);
        }
    }
}

thread_local! {
    /// A worker's idle Zstandard contexts with their level: a context is
    /// hundreds of KiB to allocate and initialise, a session reset is cheap.
    static ZSTD: std::cell::RefCell<Vec<(u32, zstd::stream::raw::Encoder<'static>)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Zstandard contexts a worker keeps for reuse.
const ZSTD_POOL: usize = 4;

/// A Zstandard frame written into `out`; its context comes from and goes
/// back to the worker's pool.
struct Zstd {
    coder: Option<(u32, zstd::stream::raw::Encoder<'static>)>,
    out: Vec<u8>,
}

impl Zstd {
    fn new(level: u32, length: Option<u64>, out: Vec<u8>) -> io::Result<Zstd> {
        use zstd::stream::raw::Operation;
        let mut coder = match take_pooled(&ZSTD, level) {
            Some(mut c) => {
                c.reinit()?;
                c
            }
            None => zstd::stream::raw::Encoder::new(i32::try_from(level).unwrap_or(3))?,
        };
        // A known length lets zstd size its window to the body.
        coder.set_pledged_src_size(length)?;
        Ok(Zstd { coder: Some((level, coder)), out })
    }

    /// Runs `step` with more output room until it reports nothing left.
    fn drain(
        &mut self,
        mut step: impl FnMut(
            &mut zstd::stream::raw::Encoder<'static>,
            &mut zstd::stream::raw::OutBuffer<'_, Vec<u8>>,
        ) -> io::Result<usize>,
    ) -> io::Result<()> {
        let (_, coder) = self.coder.as_mut().ok_or_else(|| io::Error::other("zstd frame already finished"))?;
        loop {
            self.out.reserve(DEFLATE_ROOM);
            let at = self.out.len();
            let mut output = zstd::stream::raw::OutBuffer::around_pos(&mut self.out, at);
            let left = step(coder, &mut output)?;
            if left == 0 {
                return Ok(());
            }
        }
    }

    fn write(&mut self, data: &[u8]) -> io::Result<()> {
        use zstd::stream::raw::Operation;
        let mut input = zstd::stream::raw::InBuffer::around(data);
        // `run` reports a size hint, not what is left: loop on the input.
        self.drain(|coder, output| {
            coder.run(&mut input, output)?;
            Ok(data.len() - input.pos())
        })
    }

    fn flush(&mut self) -> io::Result<()> {
        use zstd::stream::raw::Operation;
        self.drain(|coder, output| coder.flush(output))
    }

    fn finish(&mut self) -> io::Result<Vec<u8>> {
        use zstd::stream::raw::Operation;
        self.drain(|coder, output| coder.finish(output, true))?;
        Ok(std::mem::take(&mut self.out))
    }
}

impl Drop for Zstd {
    fn drop(&mut self) {
        if let Some((level, coder)) = self.coder.take() {
            give_back(&ZSTD, level, coder, ZSTD_POOL);
        }
    }
}

/// A streaming encoder or decoder writing into a `Vec` whose first
/// [`CHUNK_HEAD`] bytes are kept free for the chunk-size line.
enum Coder {
    FastGzip(FastGzip),
    Gzip(Gzip),
    Brotli(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(Zstd),
    Gunzip(flate2::write::MultiGzDecoder<Vec<u8>>),
}

impl Coder {
    fn new(coding: Coding, length: Option<u64>) -> io::Result<Coder> {
        let out = take_output();
        Ok(match coding {
            Coding::Encode(Encoding::Gzip, 1) => Coder::FastGzip(FastGzip::new(out)),
            Coding::Encode(Encoding::Gzip, level) => Coder::Gzip(Gzip::new(level, out)),
            Coding::Encode(Encoding::Brotli, level) => {
                Coder::Brotli(Box::new(brotli::CompressorWriter::new(out, 16 * 1024, level, BROTLI_WINDOW)))
            }
            Coding::Encode(Encoding::Zstd, level) => Coder::Zstd(Zstd::new(level, length, out)?),
            Coding::Gunzip => Coder::Gunzip(flate2::write::MultiGzDecoder::new(out)),
        })
    }

    fn write(&mut self, data: &[u8]) -> io::Result<()> {
        match self {
            Coder::FastGzip(c) => c.write(data),
            Coder::Gzip(c) => c.write(data),
            Coder::Brotli(c) => c.write_all(data),
            Coder::Zstd(c) => c.write(data),
            Coder::Gunzip(c) => c.write_all(data),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Coder::FastGzip(c) => c.flush(),
            Coder::Gzip(c) => c.deflate(&[], flate2::FlushCompress::Sync),
            Coder::Brotli(c) => c.flush(),
            Coder::Zstd(c) => c.flush(),
            Coder::Gunzip(c) => c.flush(),
        }
    }

    /// Ends the stream, returning the output not taken yet.
    fn finish(self) -> io::Result<Vec<u8>> {
        match self {
            Coder::FastGzip(mut c) => c.finish(),
            Coder::Gzip(mut c) => c.finish(),
            Coder::Brotli(c) => Ok(c.into_inner()),
            Coder::Zstd(mut c) => c.finish(),
            Coder::Gunzip(c) => c.finish(),
        }
    }

    fn output(&mut self) -> &mut Vec<u8> {
        match self {
            Coder::FastGzip(c) => &mut c.out,
            Coder::Gzip(c) => &mut c.out,
            Coder::Brotli(c) => c.get_mut(),
            Coder::Zstd(c) => &mut c.out,
            Coder::Gunzip(c) => c.get_mut(),
        }
    }
}

/// Byte counts of a transformed body.
#[derive(Debug, Clone, Copy, Default)]
pub struct Coded {
    /// Bytes sent to the client, head and body framing included.
    pub sent: u64,
    /// Payload bytes read from the server.
    pub payload_in: u64,
    /// Payload bytes produced by the coder.
    pub payload_out: u64,
}

/// Writes `head`, then the body read from `src` (starting with what `buf`
/// holds) transformed by `coding`, in chunked coding when `chunked`. On
/// success `buf` keeps exactly the bytes that follow the body.
#[allow(clippy::too_many_arguments)]
pub async fn relay<R: Source, W: Sink>(
    head: &[u8],
    src: &mut R,
    buf: &mut BytesMut,
    dst: &mut W,
    mut body: Body,
    coding: Coding,
    length: Option<u64>,
    chunked: bool,
    idle: Duration,
) -> Result<Coded, RelayError> {
    let mut coder = Coder::new(coding, length).map_err(coder_error)?;
    // A client stream that takes the body as parts gets the coder's output
    // as DATA, with no chunked coding written to be scanned again.
    let parts = head.is_empty() && dst.takes_parts();
    let mut out = Output { head: Some(head), chunked: chunked && !parts, parts, last: false, coded: Coded::default() };
    if buf.is_empty() && !body.is_finished() && src.gives_parts() {
        code_parts(&mut coder, &mut out, src, dst, &mut body, idle).await?;
    } else {
        code_bytes(&mut coder, &mut out, src, buf, dst, &mut body, idle).await?;
    }
    let mut last = coder.finish().map_err(coder_error)?;
    // The last chunk and the terminating empty chunk leave in one write.
    out.last = true;
    out.send(dst, &mut last, idle).await?;
    give_back_output(last);
    Ok(out.coded)
}

/// A coder failure, as the relay reports it.
fn coder_error(_: io::Error) -> RelayError {
    RelayError::Framing("content coding failed")
}

/// Feeds the coder the body read as bytes from `src` (starting with what
/// `buf` holds), sending its output as it grows; ends at the body's end.
async fn code_bytes<R: AsyncRead + Unpin, W: Sink>(
    coder: &mut Coder,
    out: &mut Output<'_>,
    src: &mut R,
    buf: &mut BytesMut,
    dst: &mut W,
    body: &mut Body,
    idle: Duration,
) -> Result<(), RelayError> {
    loop {
        let (consumed, payload) = body.take_payload(buf)?;
        coder.write(&buf[..payload]).map_err(coder_error)?;
        out.coded.payload_in += payload as u64;
        buf.advance(consumed);
        if body.is_finished() {
            return Ok(());
        }
        // More bytes already waiting are read without flushing the coder.
        buf.reserve(READ_CHUNK);
        let read = match read_now(src, buf) {
            Some(read) => read,
            // Nothing ready: the rest is usually in flight, so wait a moment
            // before flushing (a flush costs ratio, and brotli much CPU);
            // a server that pauses longer gets its bytes flushed through.
            None => match timeout(FLUSH_DELAY, src.read_buf(buf)).await {
                Ok(read) => read,
                Err(_) => {
                    coder.flush().map_err(coder_error)?;
                    out.send(dst, coder.output(), idle).await?;
                    match timeout(idle, src.read_buf(buf)).await {
                        Err(_) => return Err(RelayError::ReadTimeout),
                        Ok(read) => read,
                    }
                }
            },
        };
        match read {
            Err(e) => return Err(RelayError::Read(e)),
            Ok(0) => {
                if body.end_at_close() {
                    return Ok(());
                }
                return Err(RelayError::Read(io::ErrorKind::UnexpectedEof.into()));
            }
            Ok(_) => {}
        }
        if coder.output().len() >= SEND_AT {
            out.send(dst, coder.output(), idle).await?;
        }
    }
}

/// Feeds the coder the body read as parts from `src` (an HTTP/2 server's:
/// payload, trailers, end; trailers are not relayed with an encoded body),
/// sending its output as it grows; ends at the part that ends the body.
async fn code_parts<R: Source, W: Sink>(
    coder: &mut Coder,
    out: &mut Output<'_>,
    src: &mut R,
    dst: &mut W,
    body: &mut Body,
    idle: Duration,
) -> Result<(), RelayError> {
    loop {
        let part = match crate::transport::now(|cx| src.poll_part(cx)) {
            Ok(part) => part,
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(RelayError::Read(e)),
            // Nothing ready: wait a moment before flushing, as for bytes.
            Err(_) => match timeout(FLUSH_DELAY, std::future::poll_fn(|cx| src.poll_part(cx))).await {
                Ok(part) => part.map_err(RelayError::Read)?,
                Err(_) => {
                    coder.flush().map_err(coder_error)?;
                    out.send(dst, coder.output(), idle).await?;
                    match timeout(idle, std::future::poll_fn(|cx| src.poll_part(cx))).await {
                        Err(_) => return Err(RelayError::ReadTimeout),
                        Ok(part) => part.map_err(RelayError::Read)?,
                    }
                }
            },
        };
        let last = body.take_part(&part)?;
        if let Part::Data(data, _) = &part {
            coder.write(data).map_err(coder_error)?;
            out.coded.payload_in += data.len() as u64;
        }
        if last {
            return Ok(());
        }
        if coder.output().len() >= SEND_AT {
            out.send(dst, coder.output(), idle).await?;
        }
    }
}

/// Where coder output goes: the head first (with the first output), chunk framing.
struct Output<'h> {
    head: Option<&'h [u8]>,
    chunked: bool,
    /// The output goes as parts ([`Sink::poll_send_part`]), not bytes.
    parts: bool,
    /// The next send is the body's end: in chunked coding it carries the
    /// terminating empty chunk too.
    last: bool,
    coded: Coded,
}

impl Output<'_> {
    /// Sends what the coder produced since the last call (`data` past its
    /// first [`CHUNK_HEAD`] bytes), leaving `data` empty again.
    async fn send<W: Sink>(&mut self, dst: &mut W, data: &mut Vec<u8>, idle: Duration) -> Result<(), RelayError> {
        let produced = data.len().saturating_sub(CHUNK_HEAD);
        if self.parts {
            if produced > 0 || self.last {
                let payload = bytes::Bytes::copy_from_slice(&data[CHUNK_HEAD.min(data.len())..]);
                super::parts::send_part(dst, &mut Part::Data(payload, self.last), idle).await?;
            }
            self.coded.payload_out += produced as u64;
            self.coded.sent += produced as u64;
            data.truncate(CHUNK_HEAD);
            return Ok(());
        }
        let start = if produced == 0 {
            data.len()
        } else if self.chunked {
            // The chunk-size line, hex digits then CRLF, right before the data.
            let mut start = CHUNK_HEAD - 2;
            data[start..CHUNK_HEAD].copy_from_slice(b"\r\n");
            let mut n = produced;
            loop {
                start -= 1;
                data[start] = b"0123456789abcdef"[n & 0xf];
                n >>= 4;
                if n == 0 {
                    break;
                }
            }
            data.extend_from_slice(b"\r\n");
            start
        } else {
            CHUNK_HEAD
        };
        if self.chunked && self.last {
            data.extend_from_slice(b"0\r\n\r\n");
        }
        self.coded.payload_out += produced as u64;
        let body = &data[start..];
        match self.head.take() {
            Some(head) => {
                write_all_two(dst, head, body, idle).await?;
                self.coded.sent += head.len() as u64;
            }
            None => write_all(dst, body, idle).await?,
        }
        self.coded.sent += body.len() as u64;
        data.truncate(CHUNK_HEAD);
        Ok(())
    }
}

/// Reads what `src` has ready now, without waiting: `None` when a read would
/// wait. A pending read registers interest as any poll does; the next real
/// read re-registers with the task's waker, so no wakeup is lost.
fn read_now<R: AsyncRead + Unpin>(src: &mut R, buf: &mut BytesMut) -> Option<io::Result<usize>> {
    let read = pin!(src.read_buf(buf));
    match read.poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(r) => Some(r),
        Poll::Pending => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn pooled_gzip_state_starts_every_stream_afresh() {
        let mut x = 0x1234_5678_u64;
        let random: Vec<u8> = (0..1 << 20)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let bodies = [random.clone(), Vec::new(), b"hello hello hello".repeat(1000), random];
        // Level 1 is switchyard's encoder, the others zlib-rs: both pooled.
        for (body, level) in bodies.iter().flat_map(|b| [(b, 1), (b, 2)]) {
            let mut coder = Coder::new(Coding::Encode(Encoding::Gzip, level), None).expect("coder");
            let mut encoded = Vec::new();
            for piece in body.chunks(100_000) {
                coder.write(piece).expect("write");
                encoded.extend_from_slice(&coder.output()[CHUNK_HEAD..]);
                coder.output().truncate(CHUNK_HEAD);
            }
            encoded.extend_from_slice(&coder.finish().expect("finish")[CHUNK_HEAD..]);
            let mut d = flate2::write::GzDecoder::new(Vec::new());
            d.write_all(&encoded).expect("gunzip");
            assert!(d.finish().expect("gunzip") == *body, "{} bytes at level {level}", body.len());
        }
        assert!(DEFLATERS.with_borrow(|pool| pool.len()) >= 1, "the zlib-rs state went back to the pool");
        assert!(FAST_GZIP.with_borrow(|pool| pool.len()) >= 1, "the level-1 state went back to the pool");
    }

    #[test]
    fn pooled_zstd_contexts_start_every_frame_afresh() {
        let text: Vec<u8> = (0..300_000u32).map(|i| b"pooled zstd context "[(i % 20) as usize]).collect();
        let bodies = [text.clone(), Vec::new(), text[..1000].to_vec(), text];
        // The second use of each context is a reuse (same level, same thread).
        for (body, known) in bodies.iter().flat_map(|b| [(b, true), (b, false)]) {
            let length = known.then_some(body.len() as u64);
            let mut coder = Coder::new(Coding::Encode(Encoding::Zstd, 3), length).expect("coder");
            for piece in body.chunks(70_000) {
                coder.write(piece).expect("write");
            }
            let encoded = coder.finish().expect("finish");
            let decoded = zstd::stream::decode_all(&encoded[CHUNK_HEAD..]).expect("unzstd");
            assert!(decoded == *body, "{} bytes, length known: {known}", body.len());
        }
        assert!(ZSTD.with_borrow(|pool| pool.len()) >= 1, "the context went back to the pool");
    }

    #[test]
    fn coders_round_trip_with_flushes() {
        let text: Vec<u8> = (0..200_000u32).map(|i| b"switchyard compresses "[(i % 22) as usize]).collect();
        let runs = Encoding::ALL.into_iter().map(|a| (a, 3)).chain([(Encoding::Gzip, 1)]);
        for (algorithm, level) in runs {
            let mut coder = Coder::new(Coding::Encode(algorithm, level), None).expect("coder");
            let mut encoded = Vec::new();
            for piece in text.chunks(7000) {
                coder.write(piece).expect("write");
                coder.flush().expect("flush");
                encoded.extend_from_slice(&coder.output()[CHUNK_HEAD..]);
                coder.output().truncate(CHUNK_HEAD);
            }
            encoded.extend_from_slice(&coder.finish().expect("finish")[CHUNK_HEAD..]);
            assert!(encoded.len() < text.len() / 4, "{algorithm:?}: {}", encoded.len());
            let decoded = match algorithm {
                Encoding::Gzip => {
                    let mut d = flate2::write::GzDecoder::new(Vec::new());
                    d.write_all(&encoded).expect("gunzip");
                    d.finish().expect("gunzip")
                }
                Encoding::Brotli => {
                    let mut d = brotli::DecompressorWriter::new(Vec::new(), 4096);
                    d.write_all(&encoded).expect("unbrotli");
                    d.into_inner().expect("unbrotli")
                }
                Encoding::Zstd => zstd::stream::decode_all(&encoded[..]).expect("unzstd"),
            };
            assert!(decoded == text, "{algorithm:?} round trip");
            // And back through the gunzip coder for gzip.
            if algorithm == Encoding::Gzip {
                let mut gunzip = Coder::new(Coding::Gunzip, None).expect("coder");
                for piece in encoded.chunks(999) {
                    gunzip.write(piece).expect("write");
                }
                assert!(gunzip.finish().expect("finish")[CHUNK_HEAD..] == text[..]);
            }
        }
    }
}
