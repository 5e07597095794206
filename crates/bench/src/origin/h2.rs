//! HTTP/2 on the origin's side: cleartext with prior knowledge (the connection opens with
//! the 24-byte preface) and over TLS after ALPN `h2`.
//!
//! The behaviour is the HTTP/1.1 one (see the module docs of `origin`): the same query
//! string, the same headers (`x-origin`, `content-type`, `cache-control`, `content-length`,
//! `x-received-bytes`), the same two `/__origin/*` endpoints, the same counters. Each stream
//! is served on its own task, so one connection carries many requests at once; the
//! connection is counted once in `connections`, every stream in `requests`. With `echo=1`
//! the request body comes back as DATA frames as it arrives, with the request's
//! `content-length` when it had one. Bodies are cut from the same pre-generated buffers,
//! without copying.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

use super::body::CycledBody;
use super::http::{parse_query, Shape};
use super::Shared;

/// The client connection preface (RFC 9113 3.4).
pub(super) const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Flow-control window per stream and per connection: request bodies (1 MiB echoes) flow
/// without waiting for window updates at every 64 KiB.
const STREAM_WINDOW: u32 = 1024 * 1024;
const CONNECTION_WINDOW: u32 = 16 * 1024 * 1024;
/// Streams a client may have open at once on one connection.
const MAX_STREAMS: u32 = 256;

/// Serves one HTTP/2 connection until the peer leaves or shutdown (a graceful GOAWAY:
/// streams in flight finish).
pub(super) async fn serve<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    io: S,
    peer: SocketAddr,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut builder = h2::server::Builder::new();
    builder
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_concurrent_streams(MAX_STREAMS);
    let mut conn = match builder.handshake::<_, Bytes>(io).await {
        Ok(conn) => conn,
        Err(error) => {
            tracing::debug!(%peer, %error, "origin HTTP/2 handshake failed");
            return;
        }
    };
    let mut stopping = *shutdown.borrow();
    if stopping {
        conn.graceful_shutdown();
    }
    loop {
        let accepted = tokio::select! {
            accepted = conn.accept() => accepted,
            changed = shutdown.changed(), if !stopping => {
                if changed.is_err() || *shutdown.borrow() {
                    stopping = true;
                    conn.graceful_shutdown();
                }
                continue;
            }
        };
        match accepted {
            Some(Ok((request, respond))) => drop(tokio::spawn(stream(request, respond, Arc::clone(&shared), peer))),
            Some(Err(error)) => {
                tracing::debug!(%peer, %error, "origin HTTP/2 connection ended with an error");
                break;
            }
            None => break,
        }
    }
}

/// One request: read (or echo) the body, then answer as the query string asks.
async fn stream(request: Request<RecvStream>, mut respond: SendResponse<Bytes>, shared: Arc<Shared>, peer: SocketAddr) {
    let (parts, mut body) = request.into_parts();
    let path = parts.uri.path();
    let has_body = !body.is_end_stream();
    let is_head = parts.method == Method::HEAD;
    let stats = &shared.stats;
    let shape = match path {
        "/__origin/stats" | "/__origin/request" => Shape::default(),
        _ => match parse_query(parts.uri.query().unwrap_or("")) {
            Ok(shape) => shape,
            Err(reason) => {
                let _ = drain(&mut body).await;
                let text = format!("bad request: {reason}\n");
                send(&mut respond, head(&shared, 400, "text/plain; charset=utf-8", None, None), Some(text.into()));
                return;
            }
        },
    };
    let shaped = !path.starts_with("/__origin/");
    if shaped && shape.echo && has_body && !is_head && !matches!(shape.status, 204 | 304) {
        echo(&parts, body, respond, &shared, &shape).await;
        return;
    }
    let Ok(received) = drain(&mut body).await else {
        return;
    };
    if received > 0 {
        stats.bytes_received.fetch_add(received, Ordering::Relaxed);
    }
    if path != "/__origin/stats" {
        stats.requests.fetch_add(1, Ordering::Relaxed);
    }
    if shaped && shape.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(shape.delay_ms)).await;
    }
    let received = has_body.then_some(received);
    let json = |body: Vec<u8>| {
        let len = body.len() as u64;
        (head(&shared, 200, "application/json", Some(len), received), (!is_head).then(|| Bytes::from(body)))
    };
    match path {
        "/__origin/stats" => {
            let (response, body) = json(shared.stats_json());
            send(&mut respond, response, body);
        }
        "/__origin/request" => {
            let (response, body) = json(describe(&parts, peer));
            send(&mut respond, response, body);
        }
        _ => {
            let bodiless = matches!(shape.status, 204 | 304);
            let length = (!bodiless).then_some(shape.size);
            let mut response = head(&shared, shape.status, shape.kind.content_type(), length, received);
            cache(&mut response, &shape);
            let size = if bodiless || is_head { 0 } else { shape.size };
            let Ok(mut out) = respond.send_response(response, size == 0) else {
                return;
            };
            let mut data = CycledBody::new(shape.kind, size);
            while data.has_remaining() {
                let (at, n) = (data.position(), data.chunk().len());
                // The buffers are static: DATA frames point into them, nothing is copied.
                let bytes = Bytes::from_static(&shape.kind.buffer()[at..at + n]);
                data.advance(n);
                if send_data(&mut out, bytes, !data.has_remaining()).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Streams the request body back as the response body.
async fn echo(
    parts: &http::request::Parts,
    mut body: RecvStream,
    mut respond: SendResponse<Bytes>,
    shared: &Shared,
    shape: &Shape,
) {
    let length = parts.headers.get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let mut response = head(shared, shape.status, "application/octet-stream", length, length);
    cache(&mut response, shape);
    let Ok(mut out) = respond.send_response(response, false) else {
        return;
    };
    let mut total = 0u64;
    while let Some(data) = body.data().await {
        let Ok(data) = data else {
            return;
        };
        let n = data.len();
        total += n as u64;
        if send_data(&mut out, data, false).await.is_err() {
            return;
        }
        let _ = body.flow_control().release_capacity(n);
    }
    if out.send_data(Bytes::new(), true).is_err() {
        return;
    }
    let stats = &shared.stats;
    stats.bytes_received.fetch_add(total, Ordering::Relaxed);
    stats.requests.fetch_add(1, Ordering::Relaxed);
}

/// Reads and discards a request body, returning its length.
async fn drain(body: &mut RecvStream) -> Result<u64, h2::Error> {
    let mut total = 0u64;
    while let Some(data) = body.data().await {
        let data = data?;
        total += data.len() as u64;
        let _ = body.flow_control().release_capacity(data.len());
    }
    Ok(total)
}

/// A response head with the fields every origin response carries.
fn head(shared: &Shared, status: u16, content_type: &str, length: Option<u64>, received: Option<u64>) -> Response<()> {
    let mut response = Response::new(());
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let headers = response.headers_mut();
    if let Ok(name) = HeaderValue::from_str(&shared.name) {
        headers.insert("x-origin", name);
    }
    if !matches!(status, 204 | 304) {
        if let Ok(value) = HeaderValue::from_str(content_type) {
            headers.insert(http::header::CONTENT_TYPE, value);
        }
    }
    if let Some(n) = length {
        headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    headers.insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(n) = received {
        headers.insert("x-received-bytes", HeaderValue::from(n));
    }
    response
}

/// `cache=N`: `cache-control: public, max-age=N`.
fn cache(response: &mut Response<()>, shape: &Shape) {
    if let Some(max_age) = shape.cache {
        if let Ok(value) = HeaderValue::from_str(&format!("public, max-age={max_age}")) {
            response.headers_mut().insert(http::header::CACHE_CONTROL, value);
        }
    }
}

/// Sends a complete small response.
fn send(respond: &mut SendResponse<Bytes>, response: Response<()>, body: Option<Bytes>) {
    let body = body.filter(|b| !b.is_empty());
    let Ok(mut out) = respond.send_response(response, body.is_none()) else {
        return;
    };
    if let Some(body) = body {
        // Small: within the initial window, buffered by h2 and sent by the connection task.
        let _ = out.send_data(body, true);
    }
}

/// Sends `data` as the peer's flow-control window allows.
async fn send_data(out: &mut SendStream<Bytes>, mut data: Bytes, end: bool) -> Result<(), h2::Error> {
    while !data.is_empty() {
        out.reserve_capacity(data.len());
        let n = match std::future::poll_fn(|cx| out.poll_capacity(cx)).await {
            Some(Ok(n)) => n,
            Some(Err(e)) => return Err(e),
            None => return Err(h2::Error::from(h2::Reason::CANCEL)),
        };
        if n == 0 {
            continue;
        }
        let chunk = data.split_to(n.min(data.len()));
        out.send_data(chunk, end && data.is_empty())?;
    }
    Ok(())
}

/// `/__origin/request` for an HTTP/2 request: `:authority` is listed as `host`.
fn describe(parts: &http::request::Parts, peer: SocketAddr) -> Vec<u8> {
    let mut headers: Vec<[String; 2]> = Vec::new();
    if let Some(authority) = parts.uri.authority() {
        headers.push(["host".to_owned(), authority.to_string()]);
    }
    for (name, value) in &parts.headers {
        headers.push([name.to_string(), String::from_utf8_lossy(value.as_bytes()).into_owned()]);
    }
    let description = serde_json::json!({
        "method": parts.method.as_str(),
        "path": parts.uri.path(),
        "query": parts.uri.query().unwrap_or(""),
        "version": "HTTP/2",
        "headers": headers,
        "peer": peer.to_string(),
    });
    let mut body = serde_json::to_vec_pretty(&description).unwrap_or_default();
    body.push(b'\n');
    body
}
