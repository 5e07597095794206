//! The four crossings of [`super`] with a framed source and sink of the
//! tests' own, and in-memory streams for the HTTP/1.1 sides.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use super::*;
use crate::transport::Trailers;
use switchyard_http::parse::Framing;

/// A framed source giving `parts` in order, one per poll, the first
/// after a wait (a part that is not there yet).
struct Parts {
    parts: VecDeque<Part>,
    waited: bool,
}

impl AsyncRead for Parts {
    fn poll_read(self: Pin<&mut Self>, _: &mut Context<'_>, _: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Err(io::ErrorKind::Unsupported.into()))
    }
}

impl Source for Parts {
    fn gives_parts(&self) -> bool {
        true
    }

    fn poll_part(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Part>> {
        if !std::mem::replace(&mut self.waited, true) {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(self.parts.pop_front().ok_or_else(|| io::ErrorKind::UnexpectedEof.into()))
    }
}

/// A framed sink noting what it took: payload, then `T` and the
/// trailers or `E` for the end. It takes at most `window` payload bytes
/// a poll and waits (woken at once) when it took none.
#[derive(Default)]
struct Taken {
    seen: Vec<u8>,
    window: usize,
}

impl AsyncWrite for Taken {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, _: &[u8]) -> Poll<io::Result<usize>> {
        Poll::Ready(Err(io::ErrorKind::Unsupported.into()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl Sink for Taken {
    fn try_write_now(&self, _: &[u8]) -> io::Result<usize> {
        Err(io::ErrorKind::Unsupported.into())
    }
    fn try_write_two_now(&self, _: &[u8], _: &[u8]) -> io::Result<usize> {
        Err(io::ErrorKind::Unsupported.into())
    }
    fn takes_parts(&self) -> bool {
        true
    }
    fn poll_send_part(&mut self, cx: &mut Context<'_>, part: &mut Part) -> Poll<io::Result<()>> {
        match part {
            Part::Data(data, end) => {
                let n = data.len().min(self.window);
                self.seen.extend_from_slice(&data.split_to(n));
                if !data.is_empty() {
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                if *end {
                    self.seen.push(b'E');
                }
            }
            Part::Trailers(trailers) => {
                self.seen.push(b'T');
                for (name, value) in trailers.pairs() {
                    self.seen.extend_from_slice(name);
                    self.seen.push(b'=');
                    self.seen.extend_from_slice(value);
                }
            }
            Part::End => self.seen.push(b'E'),
        }
        Poll::Ready(Ok(()))
    }
}

fn data(bytes: &'static [u8], end: bool) -> Part {
    Part::Data(bytes::Bytes::from_static(bytes), end)
}

fn trailers(fields: &[(&str, &str)]) -> Part {
    let mut t = Trailers::default();
    for (name, value) in fields {
        t.push(name.as_bytes(), value.as_bytes());
    }
    Part::Trailers(t)
}

/// Relays `parts` into a sink of `window` bytes a poll; what it took, and the outcome.
async fn pump_into(parts: Vec<Part>, body: &mut Body, window: usize) -> (Vec<u8>, Result<(), RelayError>) {
    let mut src = Parts { parts: parts.into(), waited: false };
    let mut dst = Taken { window, ..Taken::default() };
    let mut buf = BytesMut::new();
    let result = pump_any(&mut src, &mut buf, &mut dst, body, Duration::from_secs(5)).await;
    (dst.seen, result)
}

#[tokio::test]
async fn parts_cross_as_they_came_with_trailers_kept_for_the_pipeline() {
    // No length: payload, then trailers; fields that may not trail are dropped.
    let mut body = Body::unlimited(Framing::Chunked).keeping_trailers();
    let parts = vec![
        data(b"abc", false),
        data(b"", false),
        data(b"defgh", false),
        trailers(&[("grpc-status", "7"), ("content-length", "9")]),
    ];
    let (seen, result) = pump_into(parts, &mut body, 2).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(seen, b"abcdefghTgrpc-status=7");
    assert_eq!((body.total(), body.trailer(b"GRPC-STATUS")), (8, Some(&b"7"[..])));
    assert!(body.is_finished());

    // A length: the payload's end ends the body, and trailers may still follow it.
    let mut body = Body::unlimited(Framing::Length(4));
    let (seen, result) = pump_into(vec![data(b"ab", false), data(b"cd", true)], &mut body, 64).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(seen, b"abcdE");
    // The payload reaches the length before the stream's end comes: the end still goes on.
    let mut body = Body::unlimited(Framing::Length(4));
    let (seen, result) = pump_into(vec![data(b"abcd", false), Part::End], &mut body, 64).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(seen, b"abcdE");
    let mut body = Body::unlimited(Framing::Length(2));
    let (seen, result) = pump_into(vec![data(b"ab", false), trailers(&[("x", "1")])], &mut body, 64).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(seen, b"abTx=1");
}

#[tokio::test]
async fn parts_are_held_to_the_length_and_the_limit() {
    // More payload than the length said: refused before any of it goes on.
    let mut body = Body::unlimited(Framing::Length(3));
    let (seen, result) = pump_into(vec![data(b"abcd", true)], &mut body, 64).await;
    assert!(matches!(result, Err(RelayError::Framing(_))), "{result:?}");
    assert!(seen.is_empty());
    // Less: the end is an error, not a complete body.
    let mut body = Body::unlimited(Framing::Length(5));
    let (_, result) = pump_into(vec![data(b"ab", false), Part::End], &mut body, 64).await;
    assert!(matches!(result, Err(RelayError::Read(_))), "{result:?}");
    assert!(!body.is_finished());
    // Over the limit of a body without a length.
    let mut body = Body::new(Framing::Chunked, Some(4)).expect("body");
    let (seen, result) = pump_into(vec![data(b"abc", false), data(b"de", false)], &mut body, 64).await;
    assert!(matches!(result, Err(RelayError::TooLarge)), "{result:?}");
    assert_eq!(seen, b"abc");
}

#[tokio::test]
async fn bytes_already_read_are_taken_apart_before_the_source_is_read() {
    // Bytes of the body wait in the buffer: they go first, taken apart, and the rest is
    // then read as bytes (which this source refuses).
    let mut src = Parts { parts: VecDeque::new(), waited: true };
    let mut dst = Taken { window: 64, ..Taken::default() };
    let mut buf = BytesMut::from(&b"3\r\nabc\r\n"[..]);
    let mut body = Body::unlimited(Framing::Chunked);
    let result = pump_any(&mut src, &mut buf, &mut dst, &mut body, Duration::from_secs(5)).await;
    assert!(matches!(result, Err(RelayError::Read(_))), "{result:?}");
    assert_eq!(dst.seen, b"abc");
}

/// The bytes written to an in-memory stream by `write`, once it is done.
async fn written<F: std::future::Future<Output = Result<(), RelayError>>>(
    write: impl FnOnce(tokio::io::DuplexStream) -> F,
) -> (Vec<u8>, Result<(), RelayError>) {
    let (dst, mut peer) = tokio::io::duplex(1 << 20);
    let result = write(dst).await;
    let mut got = Vec::new();
    peer.read_to_end(&mut got).await.expect("read");
    (got, result)
}

#[tokio::test]
async fn framed_bodies_reach_http1_sinks_in_the_framing_of_their_head() {
    // No length: chunks as the parts came, the trailers as the trailer section.
    let (got, result) = written(|mut dst| async move {
        let mut src = Parts {
            parts: vec![data(b"abc", false), data(b"de", false), trailers(&[("x-t", "1")])].into(),
            waited: false,
        };
        let mut body = Body::unlimited(Framing::Chunked).keeping_trailers();
        let result = pump_any(&mut src, &mut BytesMut::new(), &mut dst, &mut body, Duration::from_secs(5)).await;
        assert_eq!(body.trailer(b"x-t"), Some(&b"1"[..]));
        result
    })
    .await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(got, b"3\r\nabc\r\n2\r\nde\r\n0\r\nx-t: 1\r\n\r\n");
    // No trailers: the last chunk ends it.
    let (got, result) = written(|mut dst| async move {
        let mut src = Parts { parts: vec![data(b"abc", true)].into(), waited: false };
        let mut body = Body::unlimited(Framing::Chunked);
        pump_any(&mut src, &mut BytesMut::new(), &mut dst, &mut body, Duration::from_secs(5)).await
    })
    .await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(got, b"3\r\nabc\r\n0\r\n\r\n");
    // A length: the payload as it is; trailers cannot follow in HTTP/1.1.
    let (got, result) = written(|mut dst| async move {
        let mut src = Parts { parts: vec![data(b"abc", false), trailers(&[("x-t", "1")])].into(), waited: false };
        let mut body = Body::unlimited(Framing::Length(3));
        pump_any(&mut src, &mut BytesMut::new(), &mut dst, &mut body, Duration::from_secs(5)).await
    })
    .await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(got, b"abc");
}

#[tokio::test]
async fn http1_bodies_reach_framed_sinks_taken_apart_once() {
    // A chunked body, part of it read with the head, its trailer section becoming trailers
    // (a field that may not trail dropped); what follows the body stays in the buffer.
    let (mut src, mut peer) = tokio::io::duplex(1 << 16);
    peer.write_all(b"6\r\n world\r\n0\r\nx-t: 1\r\ncontent-length: 9\r\n\r\nNEXT").await.expect("write");
    let mut buf = BytesMut::from(&b"5\r\nhello\r\n"[..]);
    let mut dst = Taken { window: 64, ..Taken::default() };
    let mut body = Body::new(Framing::Chunked, None).expect("body");
    let idle = Duration::from_secs(5);
    let result = send_head(b"", &mut buf, &mut dst, &mut body, idle).await;
    assert!(result.is_ok(), "{result:?}");
    let result = pump_any(&mut src, &mut buf, &mut dst, &mut body, idle).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(dst.seen, b"hello worldTx-t=1");
    assert_eq!(&buf[..], b"NEXT");
    assert_eq!(body.total(), 11);

    // A body ended by the close: the end comes as a part of its own.
    let (mut src, mut peer) = tokio::io::duplex(1 << 16);
    peer.write_all(b"until close").await.expect("write");
    drop(peer);
    let mut dst = Taken { window: 64, ..Taken::default() };
    let mut body = Body::unlimited(Framing::UntilClose);
    let result = pump_any(&mut src, &mut BytesMut::new(), &mut dst, &mut body, idle).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(dst.seen, b"until closeE");

    // Bad framing is an error, not a short body.
    let (mut src, mut peer) = tokio::io::duplex(1 << 16);
    peer.write_all(b"zz\r\n").await.expect("write");
    let mut body = Body::new(Framing::Chunked, None).expect("body");
    let result = pump_any(&mut src, &mut BytesMut::new(), &mut Taken::default(), &mut body, idle).await;
    assert!(matches!(result, Err(RelayError::Framing(_))), "{result:?}");
}
