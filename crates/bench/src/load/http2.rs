//! The HTTP/2 client side, on the `h2` crate: the run's requests as `http::Request`s, the
//! connection handshake (large flow-control windows, so throughput tests measure the
//! target, not window updates) and one request/response exchange on a stream.

use std::cell::RefCell;
use std::io;

use bytes::Bytes;
use h2::client::{Connection, SendRequest};
use http::header::{HeaderName, HeaderValue, CONTENT_ENCODING, COOKIE, SET_COOKIE};
use http::{HeaderMap, Request, Uri};
use tokio::io::{AsyncRead, AsyncWrite};

use super::http1::{Jar, Response};
use super::spec::LoadSpec;

/// Stream-level receive window (bytes).
const STREAM_WINDOW: u32 = 1 << 20;
/// Connection-level receive window (bytes).
const CONNECTION_WINDOW: u32 = 16 << 20;
/// Request headers that are connection-specific in HTTP/1.1 and forbidden in HTTP/2.
const HOP_BY_HOP: &[&str] =
    &["host", "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te"];

/// The run's requests for HTTP/2: one URI per path, and the extra headers.
#[derive(Debug)]
pub struct Requests {
    uris: Vec<Uri>,
    headers: HeaderMap,
}

impl Requests {
    /// Builds the requests of `spec`; `tls` picks the `:scheme`. The `:authority` is the
    /// `host` header of `spec.headers` if any, else `spec.host`.
    pub fn new(spec: &LoadSpec, tls: bool) -> io::Result<Requests> {
        let bad = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
        let host = spec.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case("host")).map_or(&spec.host, |(_, v)| v);
        let scheme = if tls { "https" } else { "http" };
        let uris = spec
            .paths
            .iter()
            .map(|p| {
                format!("{scheme}://{host}{p}").parse::<Uri>().map_err(|e| bad(format!("request path {p:?}: {e}")))
            })
            .collect::<io::Result<_>>()?;
        let mut headers = HeaderMap::new();
        for (name, value) in &spec.headers {
            if HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h)) {
                continue;
            }
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| bad(format!("header {name:?}: {e}")))?;
            let value = HeaderValue::from_str(value).map_err(|e| bad(format!("header value {value:?}: {e}")))?;
            headers.append(name, value);
        }
        Ok(Requests { uris, headers })
    }

    /// Request `index`, carrying `jar`'s cookies.
    pub fn build(&self, index: usize, jar: &Jar) -> Request<()> {
        let mut request = Request::new(());
        *request.uri_mut() = self.uris[index].clone();
        *request.headers_mut() = self.headers.clone();
        if !jar.is_empty() {
            if let Ok(value) = HeaderValue::from_str(jar.value()) {
                request.headers_mut().insert(COOKIE, value);
            }
        }
        request
    }
}

/// Starts an HTTP/2 connection (prior knowledge, or after ALPN `h2`) on `io`. The
/// returned [`Connection`] must be polled (spawned) for any stream to make progress.
pub async fn handshake<S>(io: S) -> Result<(SendRequest<Bytes>, Connection<S, Bytes>), h2::Error>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    h2::client::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .handshake(io)
        .await
}

/// Sends `request` on a new stream (waiting for the peer's concurrency limit) and reads
/// its response to the end; cookies go to `jar` when given.
pub async fn exchange(
    send: &mut SendRequest<Bytes>,
    request: Request<()>,
    jar: Option<&RefCell<Jar>>,
) -> Result<Response, h2::Error> {
    std::future::poll_fn(|cx| send.poll_ready(cx)).await?;
    let (response, _) = send.send_request(request, true)?;
    let response = response.await?;
    let status = response.status().as_u16();
    let encoded = response.headers().get(CONTENT_ENCODING).is_some_and(|v| v.as_bytes() != b"identity");
    if let Some(jar) = jar {
        let mut jar = jar.borrow_mut();
        for value in response.headers().get_all(SET_COOKIE) {
            jar.set(value.as_bytes());
        }
    }
    let mut body = response.into_body();
    let mut body_bytes = 0u64;
    while let Some(data) = body.data().await {
        let data = data?;
        body_bytes += data.len() as u64;
        // Returning capacity for received data cannot meaningfully fail here.
        let _ = body.flow_control().release_capacity(data.len());
    }
    Ok(Response { status, body_bytes, encoded, close: false })
}
