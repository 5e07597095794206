//! Bodies across codecs that frame them: a body crosses the pipeline as
//! parts — payload, trailers, end ([`Part`]) — wherever one of its two sides
//! frames bodies (an HTTP/2 or HTTP/3 client stream, an HTTP/2 server
//! stream), and as bytes, verbatim, only between two HTTP/1.1 sides
//! ([`super::body`]).
//!
//! Four crossings, chosen once per body by [`pump_any`] (and by [`send_head`]
//! for the bytes that came with the head):
//!
//! - **parts to parts** ([`pump_parts`]): each part as it came, no framing
//!   written or scanned;
//! - **bytes to parts** ([`pump_decoding`]): an HTTP/1.1 body taken apart as
//!   it is read — a chunked body's framing removed, its trailer section
//!   becoming trailers — once, by the relay;
//! - **parts to bytes** ([`pump_encoding`]): a framed body written in the
//!   HTTP/1.1 side's framing (chunks and a trailer section when the head says
//!   chunked, the payload as it is otherwise), with nothing to scan;
//! - **bytes to bytes** ([`super::body::pump`]): the verbatim relay.
//!
//! Every part is counted against the head's length and the service's limit
//! ([`Body::take_part`]), each read and each write within the idle timeout.

use std::io;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::AsyncReadExt;
use tokio::time::timeout;

use super::body::{make_room, pump, write_all, write_all_last, write_all_two, Body, RelayError, Sink};
use crate::transport::{Part, Source};

/// Writes `head` followed by the whole `body` read from `src`, where `buf`
/// already holds bytes read from `src` (possibly more than this body), in
/// the crossing its two sides call for (see the module docs). On success,
/// `buf` keeps exactly the bytes that follow the body. Returns the number of
/// body bytes relayed.
pub async fn relay<R: Source, W: Sink>(
    head: &[u8],
    src: &mut R,
    buf: &mut BytesMut,
    dst: &mut W,
    body: &mut Body,
    idle: Duration,
) -> Result<u64, RelayError> {
    send_head(head, buf, dst, body, idle).await?;
    pump_any(src, buf, dst, body, idle).await?;
    Ok(body.total())
}

/// Writes `head` and the part of `body` already in `buf`: as parts to a
/// sink that takes them (its head went apart, as a header list or HEADERS),
/// else as bytes in one write with the head. `buf` then starts with
/// whatever follows those bytes.
pub async fn send_head<W: Sink>(
    head: &[u8],
    buf: &mut BytesMut,
    dst: &mut W,
    body: &mut Body,
    idle: Duration,
) -> Result<(), RelayError> {
    if head.is_empty() && !body.is_finished() && dst.takes_parts() {
        body.start_decoding();
        return send_taken(buf, dst, body, idle).await;
    }
    super::body::send_head(head, buf, dst, body, idle).await
}

/// Relays the rest of `body` from `src` to `dst` in the crossing their
/// codecs call for (see the module docs); bytes of it already in `buf` are
/// read as bytes.
pub async fn pump_any<R: Source, W: Sink>(
    src: &mut R,
    buf: &mut BytesMut,
    dst: &mut W,
    body: &mut Body,
    idle: Duration,
) -> Result<(), RelayError> {
    if body.is_finished() {
        return Ok(());
    }
    let gives = buf.is_empty() && src.gives_parts();
    match (gives, dst.takes_parts()) {
        (true, true) => pump_parts(src, dst, body, idle).await,
        (false, true) => pump_decoding(src, buf, dst, body, idle).await,
        (true, false) => pump_encoding(src, dst, body, idle).await,
        (false, false) => pump(src, buf, dst, body, idle).await,
    }
}

/// Relays the rest of `body` part by part, where both sides frame bodies.
pub async fn pump_parts<R: Source, W: Sink>(
    src: &mut R,
    dst: &mut W,
    body: &mut Body,
    idle: Duration,
) -> Result<(), RelayError> {
    // Until a part ends the body: its payload may reach a length before the
    // stream's end (or its trailers) comes.
    loop {
        let mut part = next_part(src, idle).await?;
        let last = body.take_part(&part)?;
        send_part(dst, &mut part, idle).await?;
        if last {
            return Ok(());
        }
    }
}

/// Relays the rest of an HTTP/1.1 `body` read as bytes from `src` to a sink
/// that takes parts: each read's payload as one part, a chunked body's
/// trailer section as trailers, the end with the last payload.
async fn pump_decoding<R: Source, W: Sink>(
    src: &mut R,
    buf: &mut BytesMut,
    dst: &mut W,
    body: &mut Body,
    idle: Duration,
) -> Result<(), RelayError> {
    body.start_decoding();
    if !buf.is_empty() {
        send_taken(buf, dst, body, idle).await?;
    }
    while !body.is_finished() {
        make_room(buf, body.room());
        match timeout(idle, src.read_buf(buf)).await {
            Err(_) => return Err(RelayError::ReadTimeout),
            Ok(Err(e)) => return Err(RelayError::Read(e)),
            Ok(Ok(0)) => {
                if body.end_at_close() {
                    return send_part(dst, &mut Part::End, idle).await;
                }
                return Err(RelayError::Read(io::ErrorKind::UnexpectedEof.into()));
            }
            Ok(Ok(_)) => {}
        }
        send_taken(buf, dst, body, idle).await?;
    }
    Ok(())
}

/// Takes what of `body` is at the front of `buf` (framing removed) and
/// sends it as a payload part, ended when the body is, with the trailers
/// after it when a chunked body ended with some.
async fn send_taken<W: Sink>(
    buf: &mut BytesMut,
    dst: &mut W,
    body: &mut Body,
    idle: Duration,
) -> Result<(), RelayError> {
    let (consumed, payload) = body.take_payload(buf)?;
    let ended = body.is_finished();
    let trailers = if ended { body.scanned_trailers() } else { None };
    // The payload leaves the buffer without a copy; the buffer gets its room
    // back at the next read once the sink let the payload go.
    let data = buf.split_to(payload).freeze();
    buf.advance(consumed - payload);
    if payload > 0 || ended {
        send_part(dst, &mut Part::Data(data, ended && trailers.is_none()), idle).await?;
    }
    match trailers {
        Some(trailers) => send_part(dst, &mut Part::Trailers(trailers), idle).await,
        None => Ok(()),
    }
}

/// Relays the rest of a framed `body` read as parts from `src` to a sink of
/// HTTP/1.1 bytes, in the framing its head gave: chunks and a trailer
/// section (the trailers, or none) for a chunked body, the payload as it is
/// otherwise (trailers are dropped: HTTP/1.1 framing cannot carry them).
async fn pump_encoding<R: Source, W: Sink>(
    src: &mut R,
    dst: &mut W,
    body: &mut Body,
    idle: Duration,
) -> Result<(), RelayError> {
    let chunks = body.writes_chunks();
    let mut out = Vec::new();
    loop {
        let part = next_part(src, idle).await?;
        let last = body.take_part(&part)?;
        match part {
            Part::Data(data, end) if chunks => {
                if !data.is_empty() {
                    chunk(&mut out, &data);
                }
                if end {
                    out.extend_from_slice(b"0\r\n\r\n");
                }
                write(dst, &out, &[], last && body.is_last_on_connection(), idle).await?;
                out.clear();
            }
            Part::Data(data, _) => write(dst, &data, &[], last && body.is_last_on_connection(), idle).await?,
            Part::Trailers(trailers) if chunks => {
                trailers.last_chunk(&mut out);
                write(dst, &out, &[], body.is_last_on_connection(), idle).await?;
            }
            Part::End if chunks => write(dst, b"0\r\n\r\n", &[], body.is_last_on_connection(), idle).await?,
            Part::Trailers(_) | Part::End => {}
        }
        if last {
            return Ok(());
        }
    }
}

/// One chunk of `data`: its size line, the payload, the CRLF that ends it.
fn chunk(out: &mut Vec<u8>, data: &[u8]) {
    use std::io::Write as _;
    out.reserve(data.len() + 20);
    let _ = write!(out, "{:x}\r\n", data.len());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Writes `a` then `b`; the last write before the connection closes may
/// leave with its FIN ([`Sink::try_write_two_last`]).
async fn write<W: Sink>(dst: &mut W, a: &[u8], b: &[u8], last: bool, idle: Duration) -> Result<(), RelayError> {
    if last {
        write_all_last(dst, a, b, idle).await
    } else if b.is_empty() {
        write_all(dst, a, idle).await
    } else {
        write_all_two(dst, a, b, idle).await
    }
}

/// The next part of `src`'s body, within `idle` (no timer armed when one is ready).
async fn next_part<R: Source>(src: &mut R, idle: Duration) -> Result<Part, RelayError> {
    match crate::transport::now(|cx| src.poll_part(cx)) {
        Ok(part) => Ok(part),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            match timeout(idle, std::future::poll_fn(|cx| src.poll_part(cx))).await {
                Err(_) => Err(RelayError::ReadTimeout),
                Ok(result) => result.map_err(RelayError::Read),
            }
        }
        Err(e) => Err(RelayError::Read(e)),
    }
}

/// Has `dst` take `part` whole, within `idle` (no timer armed when it takes
/// it at once).
pub(crate) async fn send_part<W: Sink>(dst: &mut W, part: &mut Part, idle: Duration) -> Result<(), RelayError> {
    match crate::transport::now(|cx| dst.poll_send_part(cx, part)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            match timeout(idle, std::future::poll_fn(|cx| dst.poll_send_part(cx, part))).await {
                Err(_) => Err(RelayError::WriteTimeout),
                Ok(result) => result.map_err(RelayError::Write),
            }
        }
        Err(e) => Err(RelayError::Write(e)),
    }
}

#[cfg(test)]
#[path = "parts_tests.rs"]
mod tests;
