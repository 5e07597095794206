//! The `grpc` health probe: one `grpc.health.v1.Health/Check` call over
//! HTTP/2 (the project's own client codec, [`switchyard_http::http2::client`];
//! h2c with prior knowledge, or TLS with ALPN `h2`),
//! as the standard health servicer of every gRPC implementation answers it.
//!
//! A pass is `grpc-status` 0 (from the trailers, or from the headers of a
//! trailers-only answer) with a `HealthCheckResponse` whose `status` is
//! `SERVING`. Everything read is bounded ([`MAX_MESSAGE`]); nothing the
//! server sends can panic this code.

use bytes::{Buf, Bytes, BytesMut};
use switchyard_http::http2::client::{Client, Config, Event, RequestLine};
use switchyard_http::http2::response::Response;
use switchyard_http::parse::Field;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::Failure;

/// The method every gRPC health servicer serves.
const PATH: &str = "/grpc.health.v1.Health/Check";
/// Most bytes of the response body read: a health answer is a few bytes.
const MAX_MESSAGE: usize = 64 * 1024;
/// `HealthCheckResponse.ServingStatus.SERVING`.
const SERVING: u64 = 1;
/// The codec's limits: a health answer is small.
const CODEC: Config = Config { max_header_list: 64 * 1024, stream_window: 128 * 1024, connection_window: 1 << 20 };

/// Calls `Health/Check` for `service` over `io` and judges the answer.
pub(super) async fn check<S>(mut io: S, authority: &str, service: &str) -> Result<(), Failure>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut client = Client::new(CODEC);
    let line = RequestLine { method: b"POST", scheme: b"http", authority: authority.as_bytes(), path: PATH.as_bytes() };
    let fields: [(&[u8], &[u8]); 2] =
        [(b"content-type", b"application/grpc"), (b"user-agent", b"switchyard-health-check")];
    // `te: trailers` is the codec's own.
    let id = client.open(line, fields, false).map_err(|_| Failure::Closed)?;
    client.send_data(id, &frame(&request_message(service)), true);
    let mut answer = Answer::default();
    let mut buf = vec![0u8; 32 * 1024];
    let mut filled = 0;
    while !answer.done {
        while !client.output().is_empty() {
            let n = io.write(client.output()).await.map_err(|_| Failure::Closed)?;
            if n == 0 {
                return Err(Failure::Closed);
            }
            client.written(n);
        }
        io.flush().await.map_err(|_| Failure::Closed)?;
        let n = io.read(&mut buf[filled..]).await.map_err(|_| Failure::Closed)?;
        if n == 0 {
            return Err(Failure::Closed);
        }
        filled += n;
        let mut released = 0;
        let used = client
            .recv(&buf[..filled], &mut |event| released += answer.on(id, event))
            .map_err(|e| Failure::Http2(e.reason.to_string()))?;
        client.release(id, released);
        buf.copy_within(used..filled, 0);
        filled -= used;
        if let Some(failure) = answer.failure.take() {
            return Err(failure);
        }
    }
    answer.judge()
}

/// What the server answered so far.
#[derive(Default)]
struct Answer {
    /// `grpc-status` of the head (a trailers-only answer carries it there).
    head_status: Option<u32>,
    trailer_status: Option<u32>,
    message: BytesMut,
    done: bool,
    failure: Option<Failure>,
}

impl Answer {
    /// Takes one event of stream `id`; returns the body bytes to release.
    fn on(&mut self, id: u32, event: Event<'_>) -> usize {
        match event {
            Event::Response { stream, response, end_stream } if stream == id => {
                if response.status != 200 {
                    self.failure = Some(Failure::Status(response.status));
                }
                self.head_status = head_grpc_status(response);
                self.done |= end_stream;
            }
            Event::Data { stream, data, end_stream } if stream == id => {
                if self.message.len() + data.len() > MAX_MESSAGE {
                    self.failure = Some(Failure::BadResponse);
                }
                self.message.extend_from_slice(data);
                self.done |= end_stream;
                return data.len();
            }
            Event::Trailers { stream, buf, fields } if stream == id => {
                self.trailer_status = grpc_status(buf, fields);
                self.done = true;
            }
            Event::Reset { code, .. } => {
                self.failure = Some(Failure::Http2(format!("stream reset (code {code})")));
            }
            Event::Unprocessed { .. } => self.failure = Some(Failure::Http2("GOAWAY".to_string())),
            _ => {}
        }
        0
    }

    fn judge(&self) -> Result<(), Failure> {
        // A trailers-only answer (an error at once) carries the status in its head.
        match self.head_status {
            Some(0) | None => {}
            Some(status) => return Err(Failure::GrpcStatus(status)),
        }
        match self.trailer_status.or(self.head_status) {
            Some(0) => {}
            Some(status) => return Err(Failure::GrpcStatus(status)),
            None => return Err(Failure::NoGrpcStatus),
        }
        match serving_status(&self.message) {
            Some(SERVING) => Ok(()),
            Some(status) => Err(Failure::NotServing(status)),
            None => Err(Failure::BadResponse),
        }
    }
}

/// `grpc-status` of a response head.
fn head_grpc_status(response: &Response) -> Option<u32> {
    grpc_status(&response.buf, &response.fields)
}

/// `grpc-status` as a number, when present and readable.
fn grpc_status(buf: &[u8], fields: &[Field]) -> Option<u32> {
    let f = fields.iter().find(|f| buf.get(f.name.clone()) == Some(&b"grpc-status"[..]))?;
    std::str::from_utf8(buf.get(f.value.clone())?).ok()?.trim().parse().ok()
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
