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
//! sent as one chunk per batch. After each read, bytes that are already
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
//! goes through [`relay`] here, otherwise through [`super::body::relay`]
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
use switchyard_config::{Compression, Encoding};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::timeout;

use super::body::{write_all, write_all_two, Body, RelayError, Sink};
use super::parse::Field;

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

/// q-values of a request's `Accept-Encoding`, in thousandths: `None` for a
/// coding the field does not name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Accepted {
    /// The request had an `Accept-Encoding` field.
    pub present: bool,
    gzip: Option<u16>,
    br: Option<u16>,
    zstd: Option<u16>,
    identity: Option<u16>,
    any: Option<u16>,
}

impl Accepted {
    /// Reads every `Accept-Encoding` value of a request (RFC 9110 12.5.3).
    /// Unknown codings and malformed members are ignored; a member named
    /// twice keeps its last q-value.
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Accepted {
        let mut a = Accepted::default();
        for value in values {
            a.present = true;
            for member in value.split(|&b| b == b',') {
                let mut parts = member.split(|&b| b == b';');
                let coding = parts.next().unwrap_or(b"").trim_ascii();
                if coding.is_empty() {
                    continue;
                }
                let mut q = Some(1000);
                for param in parts {
                    let param = param.trim_ascii();
                    if param.len() >= 2 && param[..2].eq_ignore_ascii_case(b"q=") {
                        q = qvalue(param[2..].trim_ascii());
                    }
                }
                let Some(q) = q else { continue };
                let slot = match coding.to_ascii_lowercase().as_slice() {
                    b"gzip" | b"x-gzip" => &mut a.gzip,
                    b"br" => &mut a.br,
                    b"zstd" => &mut a.zstd,
                    b"identity" => &mut a.identity,
                    b"*" => &mut a.any,
                    _ => continue,
                };
                *slot = Some(q);
            }
        }
        a
    }

    /// The q-value of `algorithm`: named, or through `*`, or 0.
    pub fn q(&self, algorithm: Encoding) -> u16 {
        let named = match algorithm {
            Encoding::Gzip => self.gzip,
            Encoding::Brotli => self.br,
            Encoding::Zstd => self.zstd,
        };
        named.or(self.any).unwrap_or(0)
    }

    /// Whether the client refused the unencoded form (`identity;q=0`, or
    /// `*;q=0` without naming identity).
    pub fn refuses_identity(&self) -> bool {
        self.identity.or(self.any) == Some(0)
    }

    /// The algorithm to encode with: the highest q-value above 0, ties to
    /// the earliest in `preference`; `None` when the client accepts none, or
    /// names identity with a higher q-value than the best of them.
    pub fn choose(&self, preference: &[Encoding]) -> Option<Encoding> {
        let mut best: Option<(Encoding, u16)> = None;
        for &algorithm in preference {
            let q = self.q(algorithm);
            if q > 0 && best.is_none_or(|(_, b)| q > b) {
                best = Some((algorithm, q));
            }
        }
        let (algorithm, q) = best?;
        match self.identity {
            Some(identity) if identity > q => None,
            _ => Some(algorithm),
        }
    }
}

/// A q-value ("1", "0.5", "0.001"), in thousandths; `None` when malformed.
fn qvalue(text: &[u8]) -> Option<u16> {
    let (int, frac) = match text.iter().position(|&b| b == b'.') {
        Some(i) => (&text[..i], &text[i + 1..]),
        None => (text, &b""[..]),
    };
    if frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths = 0u16;
    for i in 0..3 {
        thousandths = thousandths * 10 + frac.get(i).map_or(0, |d| u16::from(d - b'0'));
    }
    match int {
        b"0" => Some(thousandths),
        b"1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// What happens to a response body on its way to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    /// Encode with the algorithm at the level.
    Encode(Encoding, u32),
    /// Decode a gzip body for a client that does not accept gzip (`decompress`).
    Gunzip,
}

/// What of a request's `Accept-Encoding` can change how [`decide`] treats a
/// response under `config`: the algorithm it would pick (or `identity`),
/// whether it refuses identity, and, with `decompress`, whether it takes gzip.
/// The cache keys its `Accept-Encoding` variants by this, so clients that
/// would get the same bytes share one stored variant (`br;q=1, gzip;q=0.5`
/// and `br` both get the `br` one).
pub fn variant_key<'a>(config: &Compression, values: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let accepted = Accepted::parse(values);
    let mut key = accepted.choose(&config.algorithms).map_or("identity", Encoding::token).as_bytes().to_vec();
    if accepted.refuses_identity() {
        key.extend_from_slice(b";no-identity");
    }
    if config.decompress && accepted.q(Encoding::Gzip) == 0 {
        key.extend_from_slice(b";no-gzip");
    }
    key
}

/// The facts of a request [`decide`] needs.
#[derive(Debug, Clone, Copy)]
pub struct RequestFacts {
    /// What the client accepts.
    pub accepted: Accepted,
    /// The request is a HEAD.
    pub head_method: bool,
    /// A matching rule said `compress = false`.
    pub switched_off: bool,
}

/// Why [`decide`] leaves a body as the server sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Nothing about the request would change that (no compression here, the
    /// type, the size, the status, an existing coding, `no-transform`...).
    Ineligible,
    /// Only because the client accepts none of the configured algorithms: the
    /// response still varies on `Accept-Encoding` ([`add_vary`]), or a shared
    /// cache would give this unencoded form to clients that get it encoded.
    NotAccepted,
}

/// Decides whether and how the response body is transformed, or why it is
/// left alone. `has_body` is false when the status or method means the
/// response has none; `length` is the server's `Content-Length`, when it
/// framed the body with one.
pub fn decide(
    config: Option<&Compression>,
    request: RequestFacts,
    status: u16,
    has_body: bool,
    length: Option<u64>,
    head: &[u8],
    fields: &[Field],
) -> Result<Coding, Skip> {
    let config = config.ok_or(Skip::Ineligible)?;
    if request.switched_off || request.head_method || !has_body || status < 200 || status == 206 || length == Some(0) {
        return Err(Skip::Ineligible);
    }
    let mut content_type: &[u8] = b"";
    let mut encoding: Option<&[u8]> = None;
    for f in fields {
        let name = &head[f.name.clone()];
        let value = &head[f.value.clone()];
        if name.eq_ignore_ascii_case(b"content-type") {
            content_type = value;
        } else if name.eq_ignore_ascii_case(b"content-encoding") {
            // Two fields mean two codings: never "just gzip".
            encoding = if encoding.is_some() { Some(b"?") } else { Some(value.trim_ascii()) };
        } else if name.eq_ignore_ascii_case(b"content-range")
            || (name.eq_ignore_ascii_case(b"cache-control")
                && value.split(|&b| b == b',').any(|d| d.trim_ascii().eq_ignore_ascii_case(b"no-transform")))
        {
            return Err(Skip::Ineligible);
        }
    }
    match encoding {
        Some(e) if e.eq_ignore_ascii_case(b"identity") => {}
        Some(e) => {
            let gunzip = config.decompress
                && (e.eq_ignore_ascii_case(b"gzip") || e.eq_ignore_ascii_case(b"x-gzip"))
                && request.accepted.q(Encoding::Gzip) == 0;
            return if gunzip { Ok(Coding::Gunzip) } else { Err(Skip::Ineligible) };
        }
        None => {}
    }
    if !config.matches_type(content_type) {
        return Err(Skip::Ineligible);
    }
    if let Some(n) = length {
        // A client that refuses the unencoded form gets even a small body encoded.
        if (n < config.min_size && !request.accepted.refuses_identity()) || n > config.max_size {
            return Err(Skip::Ineligible);
        }
    }
    let algorithm = request.accepted.choose(&config.algorithms).ok_or(Skip::NotAccepted)?;
    Ok(Coding::Encode(algorithm, config.level(algorithm)))
}

/// Edits the response head in `out` (as [`super::rewrite::response_head`]
/// wrote it) for a body sent with `coding`; `chunked` when the body goes to
/// the client in chunked coding.
pub fn rewrite_head(out: &mut Vec<u8>, coding: Coding, chunked: bool) {
    rewrite(out, Some(coding), chunked);
}

/// Adds `Accept-Encoding` to the `Vary` of the response head in `out`, for a
/// body left unencoded because of [`Skip::NotAccepted`]; nothing else changes.
pub fn add_vary(out: &mut Vec<u8>) {
    rewrite(out, None, false);
}

/// [`rewrite_head`] for `Some(coding)`; only the `Vary` merge for `None`.
fn rewrite(out: &mut Vec<u8>, coding: Option<Coding>, chunked: bool) {
    let head = std::mem::take(out);
    let mut vary: Vec<u8> = Vec::new();
    let mut lines = head.split(|&b| b == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    out.extend_from_slice(lines.next().unwrap_or(b"HTTP/1.1 200 OK"));
    out.extend_from_slice(b"\r\n");
    for line in lines.filter(|l| !l.is_empty()) {
        let colon = line.iter().position(|&b| b == b':').unwrap_or(line.len());
        let (name, value) = (&line[..colon], line.get(colon + 1..).unwrap_or(b"").trim_ascii());
        let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
        let coded = coding.is_some();
        if coded && (is(b"content-length") || is(b"transfer-encoding") || is(b"content-encoding")) {
            continue;
        }
        if is(b"vary") {
            if !value.is_empty() {
                if !vary.is_empty() {
                    vary.extend_from_slice(b", ");
                }
                vary.extend_from_slice(value);
            }
            continue;
        }
        if coded && is(b"etag") && value.starts_with(b"\"") {
            out.extend_from_slice(b"etag: W/");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
            continue;
        }
        out.extend_from_slice(line);
        out.extend_from_slice(b"\r\n");
    }
    let varies = vary.split(|&b| b == b',').map(<[u8]>::trim_ascii);
    let (star, listed) =
        varies.fold((false, false), |(s, l), v| (s || v == b"*", l || v.eq_ignore_ascii_case(b"accept-encoding")));
    if !star && !listed {
        if !vary.is_empty() {
            vary.extend_from_slice(b", ");
        }
        vary.extend_from_slice(b"Accept-Encoding");
    }
    out.extend_from_slice(b"vary: ");
    out.extend_from_slice(&vary);
    out.extend_from_slice(b"\r\n");
    if let Some(Coding::Encode(algorithm, _)) = coding {
        out.extend_from_slice(b"content-encoding: ");
        out.extend_from_slice(algorithm.token().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

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
        let out = vec![0; CHUNK_HEAD];
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
pub async fn relay<R: AsyncRead + Unpin, W: Sink>(
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
    let coder_error = |_| RelayError::Framing("content coding failed");
    let mut coder = Coder::new(coding, length).map_err(coder_error)?;
    let mut out = Output { head: Some(head), chunked, last: false, coded: Coded::default() };
    loop {
        let (consumed, payload) = body.take_payload(buf)?;
        coder.write(&buf[..payload]).map_err(coder_error)?;
        out.coded.payload_in += payload as u64;
        buf.advance(consumed);
        if body.is_finished() {
            break;
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
                    break;
                }
                return Err(RelayError::Read(io::ErrorKind::UnexpectedEof.into()));
            }
            Ok(_) => {}
        }
        if coder.output().len() >= SEND_AT {
            out.send(dst, coder.output(), idle).await?;
        }
    }
    let mut last = coder.finish().map_err(coder_error)?;
    // The last chunk and the terminating empty chunk leave in one write.
    out.last = true;
    out.send(dst, &mut last, idle).await?;
    Ok(out.coded)
}

/// Where coder output goes: the head first (with the first output), chunk framing.
struct Output<'h> {
    head: Option<&'h [u8]>,
    chunked: bool,
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

    fn accepted(value: &str) -> Accepted {
        Accepted::parse([value.as_bytes()])
    }

    const PREF: [Encoding; 3] = [Encoding::Zstd, Encoding::Brotli, Encoding::Gzip];

    #[test]
    fn negotiation_table() {
        use Encoding::*;
        let table: &[(&str, &[Encoding], Option<Encoding>)] = &[
            ("gzip", &PREF, Some(Gzip)),
            ("gzip, br", &PREF, Some(Brotli)),
            ("gzip, deflate, br, zstd", &PREF, Some(Zstd)),
            ("gzip, br, zstd", &[Gzip, Brotli], Some(Gzip)),
            ("br;q=0.5, gzip;q=0.8", &PREF, Some(Gzip)),
            ("br;q=1.0, gzip;q=0.8", &PREF, Some(Brotli)),
            ("GZIP;Q=0.5", &PREF, Some(Gzip)),
            ("gzip;q=0", &PREF, None),
            ("*", &PREF, Some(Zstd)),
            ("*;q=0.5, gzip", &PREF, Some(Gzip)),
            ("*, zstd;q=0", &PREF, Some(Brotli)),
            ("*;q=0", &PREF, None),
            ("identity", &PREF, None),
            ("deflate", &PREF, None),
            ("", &PREF, None),
            ("gzip;q=0.5, identity", &PREF, None),
            ("gzip;q=0.5, identity;q=0.5", &PREF, Some(Gzip)),
            ("gzip, identity;q=0", &PREF, Some(Gzip)),
            ("gzip;q=2", &PREF, None),
            ("gzip;q=0.0001", &PREF, None),
            ("x-gzip", &[Gzip], Some(Gzip)),
            (" zstd ; q=0.9 ,br;q=0.9", &[Brotli, Zstd], Some(Brotli)),
        ];
        for (value, pref, want) in table {
            assert_eq!(accepted(value).choose(pref), *want, "{value:?} {pref:?}");
        }
    }

    #[test]
    fn identity_refusal() {
        assert!(accepted("gzip, identity;q=0").refuses_identity());
        assert!(accepted("*;q=0, gzip").refuses_identity());
        assert!(!accepted("*;q=0, identity").refuses_identity());
        assert!(!accepted("gzip").refuses_identity());
        assert!(!Accepted::parse(std::iter::empty()).present);
        assert!(accepted("gzip").present);
    }

    #[test]
    fn qvalues() {
        assert_eq!(qvalue(b"1"), Some(1000));
        assert_eq!(qvalue(b"1.000"), Some(1000));
        assert_eq!(qvalue(b"0.5"), Some(500));
        assert_eq!(qvalue(b"0.123"), Some(123));
        assert_eq!(qvalue(b"0"), Some(0));
        for bad in [&b"1.5"[..], b"0.1234", b"x", b"", b"0.a", b"2"] {
            assert_eq!(qvalue(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    fn fields_of(head: &[u8]) -> Vec<Field> {
        let mut fields = Vec::new();
        super::super::parse::parse_response(head, 64 * 1024, &mut fields).expect("valid").expect("complete");
        fields
    }

    fn plan_for(head: &str, accept: &str, config: &Compression) -> Option<Coding> {
        let request =
            RequestFacts { accepted: Accepted::parse([accept.as_bytes()]), head_method: false, switched_off: false };
        let fields = fields_of(head.as_bytes());
        let length = fields
            .iter()
            .find(|f| head.as_bytes()[f.name.clone()].eq_ignore_ascii_case(b"content-length"))
            .and_then(|f| std::str::from_utf8(&head.as_bytes()[f.value.clone()]).ok()?.parse().ok());
        let status = head[9..12].parse().expect("status");
        decide(Some(config), request, status, true, length, head.as_bytes(), &fields).ok()
    }

    #[test]
    fn plan_skips() {
        let c = Compression::default();
        let ok = "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: 1000\r\n";
        let gzip = Some(Coding::Encode(Encoding::Gzip, 1));
        assert_eq!(plan_for(&format!("{ok}\r\n"), "gzip", &c), gzip);
        assert_eq!(plan_for(&format!("{ok}\r\n"), "identity", &c), None);
        let table = [
            "content-encoding: br\r\n",
            "cache-control: public, no-transform\r\n",
            "content-range: bytes 0-999/2000\r\n",
        ];
        for extra in table {
            assert_eq!(plan_for(&format!("{ok}{extra}\r\n"), "gzip", &c), None, "{extra}");
        }
        let partial = "HTTP/1.1 206 Partial\r\ncontent-type: text/html\r\ncontent-length: 1000\r\n\r\n";
        assert_eq!(plan_for(partial, "gzip", &c), None);
        let image = "HTTP/1.1 200 OK\r\ncontent-type: image/png\r\ncontent-length: 1000\r\n\r\n";
        assert_eq!(plan_for(image, "gzip", &c), None);
        let small = "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 100\r\n\r\n";
        assert_eq!(plan_for(small, "gzip", &c), None);
        assert_eq!(plan_for(small, "gzip, identity;q=0", &c), gzip);
        let chunked = "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n";
        assert_eq!(plan_for(chunked, "gzip", &c), gzip);
        let prefix = Compression { types: vec!["text/*".into()], ..Compression::default() };
        let css = "HTTP/1.1 200 OK\r\ncontent-type: TEXT/CSS\r\ncontent-length: 1000\r\n\r\n";
        assert_eq!(plan_for(css, "gzip", &prefix), gzip);
        let gzipped = "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-encoding: gzip\r\n\r\n";
        let decompress = Compression { decompress: true, ..Compression::default() };
        assert_eq!(plan_for(gzipped, "br", &decompress), Some(Coding::Gunzip));
        assert_eq!(plan_for(gzipped, "gzip", &decompress), None);
        assert_eq!(plan_for(gzipped, "br", &c), None);
    }

    #[test]
    fn head_rewrite() {
        let mut out = b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 1000\r\netag: \"abc\"\r\n\
                        vary: Origin\r\n\r\n"
            .to_vec();
        rewrite_head(&mut out, Coding::Encode(Encoding::Brotli, 4), true);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\netag: W/\"abc\"\r\nvary: Origin, Accept-Encoding\r\n\
             content-encoding: br\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        let mut out = b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\netag: W/\"x\"\r\nvary: accept-encoding\r\n\
                        transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
            .to_vec();
        rewrite_head(&mut out, Coding::Gunzip, false);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "HTTP/1.1 200 OK\r\netag: W/\"x\"\r\nconnection: close\r\nvary: accept-encoding\r\n\r\n"
        );
    }

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
