//! The store side of a miss: a [`Tee`] copies what the pipeline writes to
//! the client (head and body, exactly as sent) into a bounded [`Capture`];
//! [`parse_captured`] turns a complete capture into the parts of an entry.
//!
//! The copy is made as the bytes are written, so the client never waits for
//! the cache; a response larger than the limit stops the copy (it is
//! streamed, not stored), so memory per request stays bounded.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;

use super::Headers;
use crate::transport::Sink;
use switchyard_http::chunked::ChunkedScanner;
use switchyard_http::head_writer::FieldList;
use switchyard_http::parse::{self, Field, Framing};

/// Bytes written to the client for one response, up to a limit.
#[derive(Debug, Default)]
pub struct Capture {
    buf: Vec<u8>,
    limit: usize,
    overflowed: bool,
    /// Keep the first `limit` bytes instead of nothing when the response is larger.
    prefix: bool,
}

impl Capture {
    /// A capture of at most `limit` bytes (head and body together).
    pub fn new(limit: usize) -> Capture {
        Capture { buf: Vec::new(), limit, overflowed: false, prefix: false }
    }

    /// A capture of the first `limit` bytes only, for a response whose head
    /// alone matters ([`parse_head`]): what is beyond is not copied.
    pub fn head(limit: usize) -> Capture {
        Capture { buf: Vec::new(), limit, overflowed: false, prefix: true }
    }

    fn push(&mut self, data: &[u8]) {
        if self.overflowed {
            return;
        }
        if self.prefix && self.buf.len() + data.len() > self.limit {
            let room = self.limit - self.buf.len();
            self.buf.extend_from_slice(&data[..room.min(data.len())]);
            self.overflowed = true;
            return;
        }
        if self.buf.len() + data.len() > self.limit {
            // Too large to store: stop copying and free what was copied.
            self.overflowed = true;
            self.buf = Vec::new();
            return;
        }
        self.buf.extend_from_slice(data);
    }

    /// What was captured, unless the response outgrew the limit (a
    /// [`head`](Self::head) capture: its first `limit` bytes in any case).
    pub fn bytes(&self) -> Option<&[u8]> {
        (!self.overflowed || self.prefix).then_some(self.buf.as_slice())
    }
}

/// A sink that writes to `inner` and copies every byte written into `capture`.
pub struct Tee<'a, W> {
    /// The client.
    pub inner: W,
    /// Where the copy goes.
    pub capture: &'a mut Capture,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Tee<'_, W> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = polled {
            this.capture.push(&data[..n]);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<W: Sink> Sink for Tee<'_, W> {
    fn try_write_now(&self, _data: &[u8]) -> io::Result<usize> {
        // `&self` cannot record the copy: take the polled path instead.
        Err(io::ErrorKind::WouldBlock.into())
    }

    fn try_write_two_now(&self, _a: &[u8], _b: &[u8]) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }

    fn takes_fields(&self) -> bool {
        self.inner.takes_fields()
    }

    /// The client gets the header list; the copy gets the same head as
    /// HTTP/1.1 text, which is what the cache stores and parses.
    fn send_fields(&mut self, head: &FieldList) -> io::Result<()> {
        self.inner.send_fields(head)?;
        let mut text = Vec::with_capacity(head.text_len() + 32);
        head.write_text(&mut text);
        self.capture.push(&text);
        Ok(())
    }
}

/// The parts of a captured response: status, headers to store (framing and
/// connection headers left out, names lower case; `Age` kept for the age
/// calculation, [`super::Entry::new`] drops it) and the decoded body. `None`
/// when the capture is not one complete response.
pub fn parse_captured(captured: &[u8]) -> Option<(u16, Headers, Bytes)> {
    let captured = final_response(captured)?;
    let (head, headers) = head_of(captured)?;
    let rest = &captured[head.len..];
    let body = match head.framing {
        Framing::Empty => Bytes::new(),
        Framing::Length(n) => {
            let n = usize::try_from(n).ok()?;
            (rest.len() == n).then(|| Bytes::copy_from_slice(rest))?
        }
        Framing::UntilClose => Bytes::copy_from_slice(rest),
        Framing::Chunked => {
            let mut scanner = ChunkedScanner::new();
            let mut body = Vec::with_capacity(rest.len());
            scanner.scan_with(rest, |run| body.extend_from_slice(&rest[run])).ok()?;
            if !scanner.is_done() {
                return None;
            }
            Bytes::from(body)
        }
    };
    Some((head.status, headers, body))
}

/// The status and storable headers of a response head (a 304's, to refresh an entry).
pub fn parse_head(captured: &[u8]) -> Option<(u16, Headers)> {
    head_of(final_response(captured)?).map(|(head, headers)| (head.status, headers))
}

/// The capture from its final response on: interim (1xx) responses the client
/// got before it are never stored or reused (RFC 9111 3).
fn final_response(mut captured: &[u8]) -> Option<&[u8]> {
    let mut fields: Vec<Field> = Vec::new();
    loop {
        let head = parse::parse_response(captured, captured.len(), &mut fields).ok()??;
        if !(100..200).contains(&head.status) || head.status == 101 {
            return Some(captured);
        }
        captured = &captured[head.len..];
    }
}

fn head_of(captured: &[u8]) -> Option<(parse::ResponseHead, Headers)> {
    let mut fields: Vec<Field> = Vec::new();
    let head = parse::parse_response(captured, captured.len(), &mut fields).ok()??;
    let mut headers = Vec::with_capacity(fields.len());
    for f in &fields {
        let name = String::from_utf8_lossy(&captured[f.name.clone()]).to_ascii_lowercase();
        let skip = matches!(
            name.as_str(),
            "connection"
                | "keep-alive"
                | "transfer-encoding"
                | "content-length"
                | "proxy-connection"
                | "te"
                | "trailer"
                | "upgrade"
        );
        if !skip {
            headers.push((name, captured[f.value.clone()].to_vec()));
        }
    }
    Some((head, headers))
}
