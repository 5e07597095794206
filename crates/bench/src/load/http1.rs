//! The HTTP/1.1 client: pre-rendered requests, one write each, and a response reader
//! that frames bodies by `content-length`, `chunked` or connection close, reusing one
//! read buffer per connection slot. Bodies are counted and discarded.

use std::io;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::spec::LoadSpec;

/// Bytes asked of each read (large bodies stream through this much buffer).
const READ_CHUNK: usize = 64 * 1024;
/// Longest response head, chunk-size line or trailer section accepted.
const MAX_HEAD: usize = 64 * 1024;
/// Most header fields accepted in a response head.
const MAX_HEADERS: usize = 96;

/// The run's requests, rendered once: `GET path HTTP/1.1`, `host`, the extra headers.
#[derive(Debug)]
pub struct Requests {
    /// Each path's request up to and including the last header's CRLF (no blank line).
    heads: Vec<Box<[u8]>>,
    /// The same followed by the blank line: what is written when there are no cookies.
    full: Vec<Box<[u8]>>,
}

impl Requests {
    /// Renders the requests of `spec` (one per path).
    pub fn new(spec: &LoadSpec) -> Requests {
        let has_host = spec.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host"));
        let heads: Vec<Box<[u8]>> = spec
            .paths
            .iter()
            .map(|path| {
                let mut head = format!("GET {path} HTTP/1.1\r\n");
                if !has_host {
                    head.push_str(&format!("host: {}\r\n", spec.host));
                }
                for (name, value) in &spec.headers {
                    head.push_str(&format!("{name}: {value}\r\n"));
                }
                head.into_bytes().into_boxed_slice()
            })
            .collect();
        let full = heads.iter().map(|h| [&h[..], b"\r\n"].concat().into_boxed_slice()).collect();
        Requests { heads, full }
    }

    /// Paths in rotation.
    pub fn paths(&self) -> usize {
        self.full.len()
    }

    /// The bytes of request `index` carrying `jar`'s cookies; `scratch` is reused.
    pub fn render<'a>(&'a self, index: usize, jar: &Jar, scratch: &'a mut Vec<u8>) -> &'a [u8] {
        if jar.is_empty() {
            return &self.full[index];
        }
        scratch.clear();
        scratch.extend_from_slice(&self.heads[index]);
        scratch.extend_from_slice(b"cookie: ");
        scratch.extend_from_slice(jar.value().as_bytes());
        scratch.extend_from_slice(b"\r\n\r\n");
        scratch
    }
}

/// One user's cookies: `name=value` pairs from `set-cookie`, sent back in `cookie`.
#[derive(Debug, Default, Clone)]
pub struct Jar {
    pairs: Vec<(String, String)>,
    value: String,
}

impl Jar {
    /// No cookie held.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// The `cookie` header value (`a=1; b=2`).
    pub fn value(&self) -> &str {
        &self.value
    }

    /// Takes in one `set-cookie` header value: the pair before the first `;` is stored
    /// (replacing a cookie of the same name); `max-age=0` or an empty value removes it.
    /// Other attributes (path, domain, expiry) are ignored: a benchmark has one site.
    pub fn set(&mut self, header: &[u8]) {
        let Ok(header) = std::str::from_utf8(header) else { return };
        let mut parts = header.split(';');
        let Some((name, value)) = parts.next().and_then(|p| p.split_once('=')) else { return };
        let (name, value) = (name.trim(), value.trim());
        if name.is_empty() {
            return;
        }
        let expired = value.is_empty()
            || parts
                .any(|a| a.trim().split_once('=').is_some_and(|(k, v)| k.eq_ignore_ascii_case("max-age") && v == "0"));
        self.pairs.retain(|(n, _)| n != name);
        if !expired {
            self.pairs.push((name.to_owned(), value.to_owned()));
        }
        self.value = self.pairs.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join("; ");
    }
}

/// What a response was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Body bytes (decoded from chunks).
    pub body_bytes: u64,
    /// Carried a `content-encoding` other than `identity`.
    pub encoded: bool,
    /// The connection cannot be reused after it.
    pub close: bool,
}

/// Why an exchange failed.
#[derive(Debug)]
pub enum Failure {
    /// The connection was closed before any byte of the response: a reused connection the
    /// server had already closed (the request may be retried on a new one).
    Stale,
    /// Any other IO or protocol error (the cause is not kept: only counts are reported).
    Io,
}

impl From<io::Error> for Failure {
    fn from(_: io::Error) -> Self {
        Failure::Io
    }
}

/// Writes `request` (one write) and reads its response. `buf` is the connection's read
/// buffer (bytes after the response stay in it); cookies are stored in `jar` when given.
pub async fn exchange<S>(
    io: &mut S,
    request: &[u8],
    buf: &mut BytesMut,
    jar: Option<&mut Jar>,
) -> Result<Response, Failure>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    io.write_all(request).await?;
    io.flush().await?;
    read_response(io, buf, jar).await
}

/// Reads one response (skipping interim 1xx ones) and its body.
pub async fn read_response<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut BytesMut,
    mut jar: Option<&mut Jar>,
) -> Result<Response, Failure> {
    let mut first = true;
    let (mut response, framing) = loop {
        if let Some((len, response, framing)) = parse_head(buf, jar.as_deref_mut())? {
            buf.advance(len);
            if (100..200).contains(&response.status) && response.status != 101 {
                continue;
            }
            break (response, framing);
        }
        if buf.len() > MAX_HEAD {
            return Err(invalid("response head too long").into());
        }
        if read_more(io, buf).await? == 0 {
            return Err(if first && buf.is_empty() { Failure::Stale } else { eof().into() });
        }
        first = false;
    };
    response.body_bytes = match framing {
        Framing::None => 0,
        Framing::Length(n) => {
            skip(io, buf, n).await?;
            n
        }
        Framing::Chunked => read_chunked(io, buf).await?,
        Framing::Close => {
            let mut n = buf.len() as u64;
            buf.clear();
            loop {
                let read = read_more(io, buf).await?;
                if read == 0 {
                    break n;
                }
                n += read as u64;
                buf.clear();
            }
        }
    };
    Ok(response)
}

/// How a response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    None,
    Length(u64),
    Chunked,
    Close,
}

/// Parses a complete head at the start of `buf`: its length, the response and its framing.
fn parse_head(buf: &[u8], jar: Option<&mut Jar>) -> io::Result<Option<(usize, Response, Framing)>> {
    // Uninitialised: zeroing them all cost the generator more than the parse.
    let mut headers = [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut parsed = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut parsed, buf, &mut headers)
    {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(invalid(&format!("bad response head: {e}"))),
    };
    let status = parsed.code.unwrap_or(0);
    let mut close = parsed.version == Some(0);
    let (mut length, mut chunked, mut encoded) = (None, false, false);
    let mut jar = jar;
    for h in parsed.headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            let n = std::str::from_utf8(h.value).ok().and_then(|v| v.trim().parse::<u64>().ok());
            length = Some(n.ok_or_else(|| invalid("bad content-length"))?);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            chunked =
                h.value.rsplit(|&b| b == b',').next().is_some_and(|t| t.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in h.value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    close = false;
                }
            }
        } else if name.eq_ignore_ascii_case(b"content-encoding") {
            encoded |= !h.value.trim_ascii().eq_ignore_ascii_case(b"identity");
        } else if name.eq_ignore_ascii_case(b"set-cookie") {
            if let Some(jar) = jar.as_deref_mut() {
                jar.set(h.value);
            }
        }
    }
    let framing = if (100..200).contains(&status) || status == 204 || status == 304 {
        Framing::None
    } else if chunked {
        Framing::Chunked
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        close = true;
        Framing::Close
    };
    Ok(Some((len, Response { status, body_bytes: 0, encoded, close }, framing)))
}

/// Reads more bytes into `buf`; 0 at end of stream.
async fn read_more<S: AsyncRead + Unpin>(io: &mut S, buf: &mut BytesMut) -> io::Result<usize> {
    // An emptied buffer gets its whole allocation back instead of growing.
    if buf.is_empty() {
        buf.clear();
    }
    buf.reserve(READ_CHUNK);
    io.read_buf(buf).await
}

/// Consumes `n` body bytes, from `buf` then from `io`.
async fn skip<S: AsyncRead + Unpin>(io: &mut S, buf: &mut BytesMut, mut n: u64) -> io::Result<()> {
    loop {
        let take = n.min(buf.len() as u64);
        buf.advance(take as usize);
        n -= take;
        if n == 0 {
            return Ok(());
        }
        if read_more(io, buf).await? == 0 {
            return Err(eof());
        }
    }
}

/// The index just past the next `\n` in `buf`, reading more as needed.
async fn line<S: AsyncRead + Unpin>(io: &mut S, buf: &mut BytesMut) -> io::Result<usize> {
    let mut searched = 0;
    loop {
        if let Some(i) = buf[searched..].iter().position(|&b| b == b'\n') {
            return Ok(searched + i + 1);
        }
        searched = buf.len();
        if searched > MAX_HEAD {
            return Err(invalid("chunk line too long"));
        }
        if read_more(io, buf).await? == 0 {
            return Err(eof());
        }
    }
}

/// Reads a chunked body to its end (trailers included); returns the decoded length.
async fn read_chunked<S: AsyncRead + Unpin>(io: &mut S, buf: &mut BytesMut) -> io::Result<u64> {
    let mut total = 0u64;
    loop {
        let end = line(io, buf).await?;
        let size = parse_chunk_size(&buf[..end]).ok_or_else(|| invalid("bad chunk size"))?;
        buf.advance(end);
        if size == 0 {
            // Trailer fields, then the blank line.
            loop {
                let end = line(io, buf).await?;
                let blank = buf[..end].trim_ascii().is_empty();
                buf.advance(end);
                if blank {
                    return Ok(total);
                }
            }
        }
        skip(io, buf, size).await?;
        total += size;
        let end = line(io, buf).await?;
        if !buf[..end].trim_ascii().is_empty() {
            return Err(invalid("chunk not followed by CRLF"));
        }
        buf.advance(end);
    }
}

/// The size of a chunk-size line (`1a;ext=1\r\n`).
fn parse_chunk_size(line: &[u8]) -> Option<u64> {
    let digits = line.split(|&b| b == b';').next()?.trim_ascii();
    if digits.is_empty() || digits.len() > 15 {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &b| Some(n * 16 + (b as char).to_digit(16)? as u64))
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

fn eof() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed mid-response")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader yielding the input 3 bytes per read, to exercise every partial state.
    struct Pieces(std::collections::VecDeque<Vec<u8>>);

    impl AsyncRead for Pieces {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            out: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            if let Some(p) = self.0.pop_front() {
                out.put_slice(&p);
            }
            std::task::Poll::Ready(Ok(()))
        }
    }

    async fn read(input: &[u8]) -> Result<(Response, BytesMut, Jar), Failure> {
        let mut io = Pieces(input.chunks(3).map(<[u8]>::to_vec).collect());
        let mut buf = BytesMut::new();
        let mut jar = Jar::default();
        let r = read_response(&mut io, &mut buf, Some(&mut jar)).await?;
        Ok((r, buf, jar))
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().build().expect("runtime")
    }

    #[test]
    fn content_length_and_leftover() {
        let (r, rest, _) =
            rt().block_on(read(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhelloHTTP/1.1")).expect("response");
        assert_eq!(r, Response { status: 200, body_bytes: 5, encoded: false, close: false });
        // What was read past the body stays in the buffer for the next response.
        assert!(!rest.is_empty() && b"HTTP/1.1".starts_with(&rest), "{rest:?}");
    }

    #[test]
    fn chunked_with_extensions_and_trailers() {
        let input = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\ncontent-encoding: gzip\r\n\r\n\
            4;x=y\r\nwiki\r\n5\r\npedia\r\n0\r\nx-t: 1\r\n\r\n";
        let (r, rest, _) = rt().block_on(read(input)).expect("response");
        assert_eq!(r, Response { status: 200, body_bytes: 9, encoded: true, close: false });
        assert!(rest.is_empty());
    }

    #[test]
    fn close_delimited_and_interim() {
        let input = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 503 x\r\n\r\n0123456789";
        let (r, _, _) = rt().block_on(read(input)).expect("response");
        assert_eq!(r, Response { status: 503, body_bytes: 10, encoded: false, close: true });
    }

    #[test]
    fn no_body_statuses_and_connection_close() {
        let (r, _, _) =
            rt().block_on(read(b"HTTP/1.1 304 NM\r\nconnection: close\r\ncontent-length: 9\r\n\r\n")).expect("304");
        assert_eq!(r, Response { status: 304, body_bytes: 0, encoded: false, close: true });
    }

    #[test]
    fn stale_and_truncated() {
        assert!(matches!(rt().block_on(read(b"")), Err(Failure::Stale)));
        assert!(matches!(rt().block_on(read(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nab")), Err(Failure::Io)));
        assert!(matches!(rt().block_on(read(b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n")), Err(Failure::Io)));
        assert!(matches!(rt().block_on(read(b"garbage\r\n\r\n")), Err(Failure::Io)));
    }

    #[test]
    fn cookies_are_kept_replaced_and_expired() {
        let input = b"HTTP/1.1 200 OK\r\nset-cookie: a=1; Path=/\r\nSet-Cookie: b = 2\r\ncontent-length: 0\r\n\r\n";
        let (_, _, mut jar) = rt().block_on(read(input)).expect("response");
        assert_eq!(jar.value(), "a=1; b=2");
        jar.set(b"a=3; HttpOnly");
        assert_eq!(jar.value(), "b=2; a=3");
        jar.set(b"b=x; Max-Age=0");
        assert_eq!(jar.value(), "a=3");
        jar.set(b"junk");
        jar.set(b"\xff=1");
        assert_eq!(jar.value(), "a=3");
    }

    #[test]
    fn requests_render_with_and_without_cookies() {
        let spec = LoadSpec {
            target: ([127, 0, 0, 1], 1).into(),
            host: "example".into(),
            tls: None,
            protocol: super::super::spec::Protocol::Http1,
            paths: vec!["/a".into(), "/b?x=1".into()],
            headers: vec![("accept".into(), "*/*".into())],
            cookies: true,
            connections: 1,
            requests_per_connection: None,
            pace: super::super::spec::Pace::Closed,
            warmup: std::time::Duration::ZERO,
            duration: std::time::Duration::ZERO,
            threads: 1,
        };
        let reqs = Requests::new(&spec);
        assert_eq!(reqs.paths(), 2);
        let mut jar = Jar::default();
        let mut scratch = Vec::new();
        assert_eq!(reqs.render(1, &jar, &mut scratch), b"GET /b?x=1 HTTP/1.1\r\nhost: example\r\naccept: */*\r\n\r\n");
        jar.set(b"s=42");
        assert_eq!(
            reqs.render(0, &jar, &mut scratch),
            b"GET /a HTTP/1.1\r\nhost: example\r\naccept: */*\r\ncookie: s=42\r\n\r\n"
        );
    }

    #[test]
    fn chunk_sizes() {
        assert_eq!(parse_chunk_size(b"1A\r\n"), Some(26));
        assert_eq!(parse_chunk_size(b"0;x\r\n"), Some(0));
        assert_eq!(parse_chunk_size(b"\r\n"), None);
        assert_eq!(parse_chunk_size(b"g\r\n"), None);
        assert_eq!(parse_chunk_size(b"ffffffffffffffffff\r\n"), None);
    }
}
