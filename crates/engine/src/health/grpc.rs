//! The `grpc` health probe: one `grpc.health.v1.Health/Check` call over
//! HTTP/2 (the `h2` crate; h2c with prior knowledge, or TLS with ALPN `h2`),
//! as the standard health servicer of every gRPC implementation answers it.
//!
//! A pass is `grpc-status` 0 (from the trailers, or from the headers of a
//! trailers-only answer) with a `HealthCheckResponse` whose `status` is
//! `SERVING`. Everything read is bounded ([`MAX_MESSAGE`]); nothing the
//! server sends can panic this code.

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, Method, Request};
use tokio::io::{AsyncRead, AsyncWrite};

use super::Failure;

/// The method every gRPC health servicer serves.
const PATH: &str = "/grpc.health.v1.Health/Check";
/// Most bytes of the response body read: a health answer is a few bytes.
const MAX_MESSAGE: usize = 64 * 1024;
/// `HealthCheckResponse.ServingStatus.SERVING`.
const SERVING: u64 = 1;

/// Calls `Health/Check` for `service` over `io` and judges the answer.
pub(super) async fn check<S>(io: S, authority: &str, service: &str) -> Result<(), Failure>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (send, connection) = h2::client::handshake(io).await.map_err(|e| Failure::Http2(e.to_string()))?;
    let call = call(send, authority, service);
    tokio::pin!(connection, call);
    // The connection is driven beside the call; it ending first means the
    // server closed or broke it before answering.
    tokio::select! {
        verdict = &mut call => verdict,
        ended = &mut connection => Err(ended.err().map_or(Failure::Closed, |e| Failure::Http2(e.to_string()))),
    }
}

/// The request, the response head, the message and the status.
async fn call(mut send: h2::client::SendRequest<Bytes>, authority: &str, service: &str) -> Result<(), Failure> {
    let request = Request::builder()
        .method(Method::POST)
        .uri(format!("http://{authority}{PATH}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("user-agent", "switchyard-health-check")
        .body(())
        .map_err(|_| Failure::BadResponse)?;
    let h2 = |e: h2::Error| Failure::Http2(e.to_string());
    let (response, mut body) = send.send_request(request, false).map_err(h2)?;
    body.send_data(frame(&request_message(service)), true).map_err(h2)?;
    let response = response.await.map_err(h2)?;
    if response.status() != http::StatusCode::OK {
        return Err(Failure::Status(response.status().as_u16()));
    }
    let (head, mut recv) = response.into_parts();
    // A trailers-only answer (an error at once) carries the status in its head.
    if let Some(status) = grpc_status(&head.headers) {
        if status != 0 {
            return Err(Failure::GrpcStatus(status));
        }
    }
    let mut message = BytesMut::new();
    while let Some(data) = recv.data().await {
        let data = data.map_err(h2)?;
        let _ = recv.flow_control().release_capacity(data.len());
        if message.len() + data.len() > MAX_MESSAGE {
            return Err(Failure::BadResponse);
        }
        message.extend_from_slice(&data);
    }
    let trailers = recv.trailers().await.map_err(h2)?;
    match trailers.as_ref().and_then(grpc_status).or_else(|| grpc_status(&head.headers)) {
        Some(0) => {}
        Some(status) => return Err(Failure::GrpcStatus(status)),
        None => return Err(Failure::NoGrpcStatus),
    }
    match serving_status(&message) {
        Some(SERVING) => Ok(()),
        Some(status) => Err(Failure::NotServing(status)),
        None => Err(Failure::BadResponse),
    }
}

/// `grpc-status` as a number, when present and readable.
fn grpc_status(headers: &HeaderMap) -> Option<u32> {
    headers.get("grpc-status")?.to_str().ok()?.trim().parse().ok()
}

/// `HealthCheckRequest { service = 1 }`, protobuf-encoded (an empty name is
/// the default value, which protobuf leaves out).
fn request_message(service: &str) -> Vec<u8> {
    let mut message = Vec::with_capacity(service.len() + 6);
    if !service.is_empty() {
        message.push(0x0a);
        let mut len = service.len() as u64;
        while len >= 0x80 {
            message.push((len as u8 & 0x7f) | 0x80);
            len >>= 7;
        }
        message.push(len as u8);
        message.extend_from_slice(service.as_bytes());
    }
    message
}

/// One gRPC length-prefixed message, uncompressed.
fn frame(message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + message.len());
    out.extend_from_slice(&[0]);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out.freeze()
}

/// The `status` (field 1) of the one `HealthCheckResponse` in `body` (a
/// gRPC frame); 0 (`UNKNOWN`) when the field is absent, as protobuf encodes
/// a default. `None` when the body is not exactly one uncompressed frame of
/// well-formed fields.
fn serving_status(body: &[u8]) -> Option<u64> {
    let (&compressed, rest) = body.split_first()?;
    let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let mut message = rest.get(4..)?;
    if compressed != 0 || message.len() != len {
        return None;
    }
    let mut status = 0;
    while message.has_remaining() {
        let key = varint(&mut message)?;
        match (key >> 3, key & 7) {
            (1, 0) => status = varint(&mut message)?,
            (_, 0) => drop(varint(&mut message)?),
            (_, 1) => message = message.get(8..)?,
            (_, 2) => {
                let skip = usize::try_from(varint(&mut message)?).ok()?;
                message = message.get(skip..)?;
            }
            (_, 5) => message = message.get(4..)?,
            _ => return None,
        }
    }
    Some(status)
}

/// A protobuf varint (at most 10 bytes).
fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..70).step_by(7) {
        let (&byte, rest) = buf.split_first()?;
        *buf = rest;
        value |= u64::from(byte & 0x7f).checked_shl(shift)?;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(message: &[u8]) -> Vec<u8> {
        frame(message).to_vec()
    }

    #[test]
    fn the_request_names_the_service_or_nothing() {
        assert_eq!(request_message(""), b"");
        assert_eq!(request_message("a.B"), b"\x0a\x03a.B");
        let long = "s".repeat(200);
        assert_eq!(&request_message(&long)[..3], b"\x0a\xc8\x01");
        assert_eq!(framed(b"\x0a\x03a.B"), b"\x00\x00\x00\x00\x05\x0a\x03a.B");
    }

    #[test]
    fn the_status_is_read_from_one_frame() {
        assert_eq!(serving_status(&framed(b"\x08\x01")), Some(SERVING));
        assert_eq!(serving_status(&framed(b"\x08\x02")), Some(2), "NOT_SERVING");
        assert_eq!(serving_status(&framed(b"")), Some(0), "UNKNOWN is the default, left out");
        // Unknown fields of every wire type are skipped.
        let fields = b"\x10\x05\x1a\x02hi\x21\x01\x02\x03\x04\x05\x06\x07\x08\x2d\x01\x02\x03\x04\x08\x01";
        assert_eq!(serving_status(&framed(fields)), Some(SERVING));
    }

    #[test]
    fn malformed_answers_are_refused_without_panicking() {
        for body in [
            &b""[..],
            b"\x00\x00\x00",
            b"\x01\x00\x00\x00\x02\x08\x01",
            b"\x00\x00\x00\x00\x03\x08\x01",
            b"\x00\x00\x00\x00\x01\x08",
            b"\x00\x00\x00\x00\x02\x1a\x09",
            b"\x00\x00\x00\x00\x01\x0b",
            b"\x00\x00\x00\x00\x0b\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
        ] {
            assert_eq!(serving_status(body), None, "{body:?}");
        }
    }
}
