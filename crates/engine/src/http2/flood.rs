//! The control-frame flood defence: [`Inspect`] reads a client's HTTP/2 byte
//! stream on behalf of the `h2` crate and looks at each frame header as it
//! passes, counting PING and SETTINGS frames (not their acknowledgements).
//!
//! Each of those frames obliges the server to answer. A client that sends
//! them by the thousand and never reads the answers only meets the `h2`
//! crate's backpressure: its connection stalls and stays open. Beyond
//! `http2.max_control_frames` of them within [`WINDOW`], the next read fails,
//! which ends the connection at once: no GOAWAY, since a flooding client may
//! not read one and writing it could wait forever.
//!
//! Invariants: the inspector never changes, holds back or reorders a byte;
//! it keeps nine bytes of state at most, whatever the client sends.

use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};
use tokio::time::Instant;

use super::{Tally, PREFACE};

/// The window within which control frames are counted.
pub const WINDOW: Duration = Duration::from_secs(10);

/// Frame types that oblige the server to answer.
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
/// The ACK flag of SETTINGS and PING.
const ACK: u8 = 0x1;

/// Follows the frame boundaries of an HTTP/2 client byte stream from its
/// connection preface on.
#[derive(Debug)]
pub struct Frames {
    /// Bytes still to pass before the next frame header: the preface, then
    /// each frame's payload.
    skip: u64,
    head: [u8; 9],
    have: usize,
}

impl Default for Frames {
    fn default() -> Self {
        Frames { skip: PREFACE.len() as u64, head: [0; 9], have: 0 }
    }
}

impl Frames {
    /// Feeds the next bytes of the stream; `frame(type, flags)` is called for
    /// each frame header completed in them.
    pub fn feed(&mut self, mut bytes: &[u8], mut frame: impl FnMut(u8, u8)) {
        while !bytes.is_empty() {
            if self.skip > 0 {
                let n = bytes.len().min(usize::try_from(self.skip).unwrap_or(usize::MAX));
                self.skip -= n as u64;
                bytes = &bytes[n..];
                continue;
            }
            let n = bytes.len().min(self.head.len() - self.have);
            self.head[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            self.have += n;
            bytes = &bytes[n..];
            if self.have == self.head.len() {
                let [l0, l1, l2, kind, flags, ..] = self.head;
                frame(kind, flags);
                self.skip = u64::from(u32::from_be_bytes([0, l0, l1, l2]));
                self.have = 0;
            }
        }
    }
}

/// Whether a frame is one the client may not send without limit.
pub fn is_control(kind: u8, flags: u8) -> bool {
    matches!(kind, SETTINGS | PING) && flags & ACK == 0
}

/// A client connection whose reads are inspected for control-frame floods.
/// Writes go straight through.
pub struct Inspect<IO> {
    io: IO,
    frames: Frames,
    tally: Tally,
    /// Set once the limit was exceeded; shared with the connection loop,
    /// which logs the reason.
    flooded: Rc<Cell<bool>>,
}

impl<IO> Inspect<IO> {
    /// Inspects `io`, tolerating `max` control frames per [`WINDOW`]; the
    /// returned flag turns true when the connection was cut for a flood.
    pub fn new(io: IO, max: u32) -> (Self, Rc<Cell<bool>>) {
        let flooded = Rc::new(Cell::new(false));
        let inspect = Inspect { io, frames: Frames::default(), tally: Tally::new(max, Instant::now()), flooded };
        let flag = inspect.flooded.clone();
        (inspect, flag)
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Inspect<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if self.flooded.get() {
            return Poll::Ready(Err(flood()));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let this = &mut *self;
            let mut control = 0u32;
            this.frames.feed(&buf.filled()[before..], |kind, flags| control += u32::from(is_control(kind, flags)));
            if control > 0 {
                let now = Instant::now();
                if (0..control).any(|_| this.tally.record(now, WINDOW)) {
                    this.flooded.set(true);
                    return Poll::Ready(Err(flood()));
                }
            }
        }
        polled
    }
}

fn flood() -> io::Error {
    io::Error::other("HTTP/2 control frame flood")
}

super::io::write_through!(Inspect, io);

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let len = u32::try_from(payload.len()).expect("small").to_be_bytes();
        let mut f = vec![len[1], len[2], len[3], kind, flags, 0, 0, 0, 0];
        f.extend_from_slice(payload);
        f
    }

    fn stream(frames: &[Vec<u8>]) -> Vec<u8> {
        let mut s = PREFACE.to_vec();
        for f in frames {
            s.extend_from_slice(f);
        }
        s
    }

    fn kinds(bytes: &[u8], piece: usize) -> Vec<(u8, u8)> {
        let mut frames = Frames::default();
        let mut seen = Vec::new();
        for chunk in bytes.chunks(piece) {
            frames.feed(chunk, |k, f| seen.push((k, f)));
        }
        seen
    }

    #[test]
    fn frame_headers_are_found_however_the_bytes_are_split() {
        let bytes = stream(&[frame(4, 0, &[0; 6]), frame(1, 5, &[0x82; 20]), frame(6, 1, &[0; 8]), frame(0, 0, &[])]);
        let want = vec![(4, 0), (1, 5), (6, 1), (0, 0)];
        for piece in [1, 2, 7, 9, 10, 24, 25, 1000] {
            assert_eq!(kinds(&bytes, piece), want, "pieces of {piece}");
        }
    }

    #[test]
    fn only_unacknowledged_ping_and_settings_count() {
        assert!(is_control(PING, 0) && is_control(SETTINGS, 0));
        assert!(!is_control(PING, ACK) && !is_control(SETTINGS, ACK));
        assert!(!is_control(0x1, 0) && !is_control(0x8, 0) && !is_control(0x3, 0));
    }

    #[tokio::test]
    async fn a_flood_fails_the_read_and_stays_failed() {
        let pings: Vec<Vec<u8>> = (0..50).map(|_| frame(PING, 0, &[0; 8])).collect();
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        client.write_all(&stream(&pings)).await.expect("write");
        let (mut inspect, flooded) = Inspect::new(server, 20);
        let mut buf = vec![0u8; 64 * 1024];
        let mut failed = false;
        for _ in 0..10 {
            match inspect.read(&mut buf).await {
                Ok(0) => break,
                Ok(_) => {}
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        assert!(failed && flooded.get());
        assert!(inspect.read(&mut buf).await.is_err(), "once cut, always cut");
    }

    #[tokio::test]
    async fn acknowledgements_and_requests_pass() {
        let mut frames: Vec<Vec<u8>> = (0..50).map(|_| frame(PING, ACK, &[0; 8])).collect();
        frames.extend((0..50).map(|_| frame(1, 5, &[0x82])));
        frames.push(frame(SETTINGS, 0, &[]));
        let bytes = stream(&frames);
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        client.write_all(&bytes).await.expect("write");
        drop(client);
        let (mut inspect, flooded) = Inspect::new(server, 20);
        let mut out = Vec::new();
        inspect.read_to_end(&mut out).await.expect("read");
        assert_eq!(out, bytes);
        assert!(!flooded.get());
    }
}
