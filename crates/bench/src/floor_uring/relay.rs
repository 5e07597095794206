//! The relays on the ring: the state of each socket, and what each completion does to it
//! (L4: copy both ways, half-closes passed on; L7: one request at a time to an origin
//! connection, the response framed by its `content-length` and sent back).
//!
//! Invariants: a socket's state lives until it is closing and none of its operations is
//! in flight (`inflight` counts each submitted operation until its last completion), so
//! no completion ever finds its socket's index taken by another; at most one send per
//! socket is in flight, and its bytes are the front of the socket's queue, so bytes go
//! out in the order they came in; a buffer of the ring is either queued on one socket or
//! back in the ring.

use std::collections::VecDeque;

use io_uring::cqueue;

use super::bufs::BufRing;
use super::Driver;
use crate::floor::{self, Mode};

/// Bytes waiting to be sent on a socket.
pub(super) enum Chunk {
    /// Part of a provided buffer, sent from where it was received.
    Ring { bid: u16, off: u32, len: u32 },
    /// Bytes of the relay's own (a rewritten or reassembled request head).
    Owned { data: Vec<u8>, off: usize },
}

impl Chunk {
    /// Address and length of the bytes not yet sent.
    pub(super) fn remaining(&self, bufs: &BufRing) -> (*const u8, u32) {
        match self {
            // SAFETY (of the pointer arithmetic): off <= len <= the buffer's size.
            Chunk::Ring { bid, off, len } => (unsafe { bufs.ptr(*bid).add(*off as usize) }, len - off),
            Chunk::Owned { data, off } => (data[*off..].as_ptr(), (data.len() - off) as u32),
        }
    }

    /// Marks `n` more bytes sent; whether the chunk is done.
    fn advance(&mut self, n: usize) -> bool {
        match self {
            Chunk::Ring { off, len, .. } => {
                *off = (*off as usize + n).min(*len as usize) as u32;
                off == len
            }
            Chunk::Owned { data, off } => {
                *off = (*off + n).min(data.len());
                *off == data.len()
            }
        }
    }
}

/// One socket: a client connection or an origin connection.
#[derive(Default)]
pub(super) struct Sock {
    /// Its direct descriptor (none until an origin socket is made).
    pub(super) slot: Option<u32>,
    pub(super) origin: bool,
    /// The other end of the relay.
    pub(super) peer: Option<u32>,
    /// Operations submitted and not yet completed for the last time.
    pub(super) inflight: u32,
    pub(super) recv_armed: bool,
    pub(super) connected: bool,
    /// The index of the origin address (origin sockets).
    pub(super) addr: usize,
    pub(super) out: VecDeque<Chunk>,
    pub(super) sending: bool,
    /// The far end will send no more (a receive returned 0).
    pub(super) eof: bool,
    pub(super) closing: bool,
    pub(super) close_when_drained: bool,
    pub(super) shut_when_drained: bool,
    pub(super) shut: bool,
    /// In the idle list (L7 origin sockets).
    pub(super) idle: bool,
    /// L7 client: request bytes not yet sent on (only when a head came in pieces or
    /// behind another).
    input: Vec<u8>,
    /// L7 client: a request is at the origin, its response not all received yet.
    awaiting: bool,
    /// L7 client: the request asked to close the connection after its response.
    last: bool,
    /// L7 origin: the response head so far, while it comes in pieces.
    head: Vec<u8>,
    /// L7 origin: bytes of the current response still to come, once its head is read.
    left: Option<u64>,
    /// L7 origin: the current response asks to close.
    closes: bool,
}

impl Sock {
    /// The provided buffers it still holds.
    pub(super) fn ring_buffers(&self) -> impl Iterator<Item = u16> + '_ {
        self.out.iter().filter_map(|c| match c {
            Chunk::Ring { bid, .. } => Some(*bid),
            Chunk::Owned { .. } => None,
        })
    }
}

/// The sockets, by index; freed indexes are reused.
#[derive(Default)]
pub(super) struct Socks {
    items: Vec<Option<Sock>>,
    free: Vec<u32>,
}

impl Socks {
    fn insert(&mut self, s: Sock) -> u32 {
        match self.free.pop() {
            Some(id) => {
                self.items[id as usize] = Some(s);
                id
            }
            None => {
                self.items.push(Some(s));
                (self.items.len() - 1) as u32
            }
        }
    }

    pub(super) fn get_mut(&mut self, id: u32) -> Option<&mut Sock> {
        self.items.get_mut(id as usize).and_then(Option::as_mut)
    }

    /// One operation of socket `id` completed for the last time.
    pub(super) fn settle(&mut self, id: u32) {
        if let Some(s) = self.get_mut(id) {
            s.inflight = s.inflight.saturating_sub(1);
        }
    }

    /// Removes socket `id` if it is closing, its descriptor is closed and nothing of it
    /// is in flight.
    pub(super) fn free_if_done(&mut self, id: u32) -> Option<Sock> {
        let s = self.get_mut(id)?;
        if !s.closing || s.inflight > 0 || s.slot.is_some() {
            return None;
        }
        self.free.push(id);
        self.items[id as usize].take()
    }
}

impl Driver {
    /// A client connection on direct descriptor `slot`.
    pub(super) fn accepted(&mut self, slot: u32) {
        let client = self.socks.insert(Sock { slot: Some(slot), connected: true, ..Sock::default() });
        if self.mode == Mode::L4 {
            let origin = self.socks.insert(Sock { origin: true, peer: Some(client), ..Sock::default() });
            self.sock(client).peer = Some(origin);
            self.open_origin(origin);
        }
        self.arm_recv(client);
    }

    /// A completion of socket `id`'s multishot receive.
    pub(super) fn received(&mut self, id: u32, res: i32, flags: u32) {
        let bid = cqueue::buffer_select(flags);
        if bid.is_some() {
            self.bufs.taken();
        }
        let more = cqueue::more(flags);
        let Some(s) = self.socks.get_mut(id) else {
            bid.into_iter().for_each(|b| self.bufs.recycle(b));
            return;
        };
        if !more {
            s.recv_armed = false;
            s.inflight = s.inflight.saturating_sub(1);
        }
        if s.closing {
            bid.into_iter().for_each(|b| self.bufs.recycle(b));
            self.maybe_free(id);
            return;
        }
        match (res, bid) {
            (n, Some(b)) if n > 0 => self.data(id, b, n as u32),
            (0, _) => self.eof(id),
            (e, _) if e == -libc::ENOBUFS => self.starved.push(id),
            (_, b) => {
                b.into_iter().for_each(|b| self.bufs.recycle(b));
                self.fail(id);
            }
        }
        if !more && res > 0 {
            self.arm_recv(id);
        }
        self.maybe_free(id);
    }

    /// A send of socket `id` completed with `res` bytes (or an error).
    pub(super) fn sent(&mut self, id: u32, res: i32) {
        let Some(s) = self.socks.get_mut(id) else { return };
        s.sending = false;
        if s.closing {
            return;
        }
        if res <= 0 {
            self.fail(id);
            return;
        }
        if let Some(front) = s.out.front_mut() {
            if front.advance(res as usize) {
                if let Some(Chunk::Ring { bid, .. }) = s.out.pop_front() {
                    self.bufs.recycle(bid);
                }
            }
        }
        self.kick_send(id);
        if self.mode == Mode::L4 {
            self.l4_finish(id);
        }
    }

    /// `n` bytes arrived on socket `id` in buffer `bid`.
    fn data(&mut self, id: u32, bid: u16, n: u32) {
        let origin = self.sock(id).origin;
        match self.mode {
            Mode::L4 => match self.sock(id).peer {
                Some(peer) => self.forward(peer, Chunk::Ring { bid, off: 0, len: n }),
                None => {
                    self.bufs.recycle(bid);
                    self.fail(id);
                }
            },
            Mode::L7 if origin => self.response_data(id, bid, n),
            Mode::L7 => self.request_data(id, bid, n),
        }
    }

    /// Queues `chunk` on socket `to` and sends it when its turn comes.
    fn forward(&mut self, to: u32, chunk: Chunk) {
        self.sock(to).out.push_back(chunk);
        self.kick_send(to);
    }

    /// The far end of socket `id` closed its side.
    fn eof(&mut self, id: u32) {
        let s = self.sock(id);
        s.eof = true;
        let (peer, origin) = (s.peer, s.origin);
        match self.mode {
            Mode::L4 => {
                if let Some(p) = peer {
                    self.sock(p).shut_when_drained = true;
                    self.kick_send(p);
                }
                self.l4_finish(id);
            }
            Mode::L7 if origin => self.origin_closed(id),
            Mode::L7 => {
                if !self.sock(id).awaiting {
                    self.next_request(id);
                }
            }
        }
    }

    /// Socket `id` failed (or its peer misbehaved): it closes, and so does the rest of
    /// its relay where that relay cannot go on.
    pub(super) fn fail(&mut self, id: u32) {
        let s = self.sock(id);
        let (peer, origin, awaiting) = (s.peer.take(), s.origin, s.awaiting);
        if let Some(p) = peer {
            let l4 = self.mode == Mode::L4;
            let other = self.sock(p);
            other.peer = None;
            // An L7 exchange in progress cannot go on; between exchanges, a failed
            // client hands its origin connection back and a failed origin's client stays.
            let mid_exchange = l4 || awaiting || (origin && other.awaiting);
            other.awaiting = false;
            if mid_exchange {
                self.close(p);
            } else if !origin {
                self.release(p);
            }
        }
        self.close(id);
    }

    /// L4: once both ends have closed their sides and every byte is sent, both close.
    fn l4_finish(&mut self, id: u32) {
        let Some(peer) = self.sock(id).peer else { return };
        let done = |s: &Sock| s.eof && s.out.is_empty() && !s.sending;
        if done(self.sock(id)) && done(self.sock(peer)) {
            self.close(id);
            self.close(peer);
        }
    }

    /// L7: request bytes from client `id`.
    fn request_data(&mut self, id: u32, bid: u16, n: u32) {
        let buf = self.bufs.slice(bid, n);
        let s = self.socks.get_mut(id).expect("a live socket");
        if !s.awaiting && s.input.is_empty() && floor::head_end(buf) == Some(buf.len()) {
            // The usual case: one whole head in one receive, sent on from its buffer.
            let (_, closes) = floor::framing_of(buf);
            s.last = closes;
            let chunk = if closes {
                Chunk::Owned { data: floor::without_connection(buf), off: 0 }
            } else {
                Chunk::Ring { bid, off: 0, len: n }
            };
            if closes {
                self.bufs.recycle(bid);
            }
            return self.dispatch(id, chunk);
        }
        s.input.extend_from_slice(buf);
        self.bufs.recycle(bid);
        self.next_request(id);
    }

    /// L7: sends client `id`'s next whole request head on, if no request is at an origin;
    /// at the client's end of stream, closes it.
    fn next_request(&mut self, id: u32) {
        let s = self.sock(id);
        if s.awaiting || s.closing {
            return;
        }
        let Some(end) = floor::head_end(&s.input) else {
            if s.input.len() > floor::MAX_HEAD || (s.eof && !s.input.is_empty()) {
                return self.fail(id);
            }
            if s.eof {
                // A client that closes hands its origin connection back, and closes once
                // its last response is sent.
                s.close_when_drained = true;
                if let Some(o) = s.peer.take() {
                    self.release(o);
                }
                self.kick_send(id);
            }
            return;
        };
        let head: Vec<u8> = s.input.drain(..end).collect();
        let (_, closes) = floor::framing_of(&head);
        s.last = closes;
        let data = if closes { floor::without_connection(&head) } else { head };
        self.dispatch(id, Chunk::Owned { data, off: 0 });
    }

    /// L7: sends a request of client `id` to its origin connection, else an idle one,
    /// else a new one.
    fn dispatch(&mut self, client: u32, request: Chunk) {
        let origin = match self.sock(client).peer.or_else(|| self.idle.pop()) {
            Some(o) => o,
            None => {
                let o = self.socks.insert(Sock { origin: true, ..Sock::default() });
                self.open_origin(o);
                o
            }
        };
        let c = self.sock(client);
        c.peer = Some(origin);
        c.awaiting = true;
        let o = self.sock(origin);
        o.idle = false;
        o.peer = Some(client);
        o.head.clear();
        o.left = None;
        o.closes = false;
        self.forward(origin, request);
    }

    /// L7: response bytes from origin `id`, sent on to its client as they are.
    fn response_data(&mut self, id: u32, bid: u16, n: u32) {
        let peer = self.sock(id).peer;
        let Some(client) = peer.filter(|&c| self.socks.get_mut(c).is_some_and(|c| c.awaiting)) else {
            // Bytes from an idle origin connection, or after its response: it is done.
            self.bufs.recycle(bid);
            return self.fail(id);
        };
        let buf = self.bufs.slice(bid, n);
        let s = self.socks.get_mut(id).expect("a live socket");
        let progress = match s.left {
            Some(l) if u64::from(n) <= l => Progress::Left(l - u64::from(n)),
            Some(_) => Progress::Bad,
            None if s.head.is_empty() => response_head(buf),
            None => {
                s.head.extend_from_slice(buf);
                response_head(&s.head)
            }
        };
        match progress {
            Progress::Bad => {
                self.bufs.recycle(bid);
                return self.fail(id);
            }
            Progress::Head => {
                if s.head.is_empty() {
                    s.head.extend_from_slice(buf);
                }
            }
            Progress::Left(l) => {
                s.head.clear();
                s.left = Some(l);
            }
            Progress::Whole { left, closes } => {
                s.head.clear();
                s.left = Some(left);
                s.closes = closes;
            }
        }
        self.forward(client, Chunk::Ring { bid, off: 0, len: n });
        if matches!(progress, Progress::Left(0) | Progress::Whole { left: 0, .. }) {
            self.response_done(client, id);
        }
    }

    /// L7: the whole response from `origin` has been received for `client`.
    fn response_done(&mut self, client: u32, origin: u32) {
        let o = self.sock(origin);
        o.left = None;
        let origin_closes = o.closes;
        let c = self.sock(client);
        c.awaiting = false;
        if origin_closes || c.last {
            c.peer = None;
            c.close_when_drained = true;
            self.sock(origin).peer = None;
            if origin_closes {
                // The client connection ends with it, as it would without a relay.
                self.close(origin);
            } else {
                self.release(origin);
            }
            return self.kick_send(client);
        }
        self.next_request(client);
    }

    /// L7: origin `id` closed its side.
    fn origin_closed(&mut self, id: u32) {
        let peer = self.sock(id).peer;
        match peer {
            // Mid-response: the client cannot get it whole.
            Some(c) if self.sock(c).awaiting => self.fail(id),
            Some(c) => {
                self.sock(c).peer = None;
                self.sock(id).peer = None;
                self.close(id);
            }
            None => self.close(id),
        }
    }

    /// L7: origin connection `id` goes to the idle list (or closes, if it cannot serve).
    fn release(&mut self, id: u32) {
        let s = self.sock(id);
        s.peer = None;
        if s.closing || s.eof || s.slot.is_none() || !s.connected || !s.out.is_empty() {
            return self.close(id);
        }
        s.idle = true;
        self.idle.push(id);
    }

    /// Socket `id`, which the caller knows is live.
    fn sock(&mut self, id: u32) -> &mut Sock {
        self.socks.get_mut(id).expect("a live socket")
    }
}

/// Where a response stands after a receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    /// Its head is not complete yet.
    Head,
    /// Its head was complete before: this many bytes are still to come.
    Left(u64),
    /// Its head is complete now: the bytes still to come, and whether it asks to close.
    Whole { left: u64, closes: bool },
    /// More than one response, no `content-length`, or a head too long.
    Bad,
}

/// Where a response stands when `seen` holds all of it received so far.
fn response_head(seen: &[u8]) -> Progress {
    match floor::head_end(seen) {
        Some(end) => match floor::framing(&seen[..end]) {
            Some((length, closes)) => match (end as u64 + length).checked_sub(seen.len() as u64) {
                Some(left) => Progress::Whole { left, closes },
                None => Progress::Bad,
            },
            None => Progress::Bad,
        },
        None if seen.len() < floor::CHUNK => Progress::Head,
        None => Progress::Bad,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_is_followed_through_its_head_and_body() {
        let head = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n";
        assert_eq!(response_head(&head[..10]), Progress::Head);
        assert_eq!(response_head(head), Progress::Whole { left: 10, closes: false });
        let mut whole = head.to_vec();
        whole.extend_from_slice(b"0123456789");
        assert_eq!(response_head(&whole), Progress::Whole { left: 0, closes: false });
        whole.push(b'x');
        assert_eq!(response_head(&whole), Progress::Bad, "more than one response");
        assert_eq!(response_head(b"HTTP/1.1 200 OK\r\n\r\n"), Progress::Bad, "no content-length");
        assert_eq!(response_head(&vec![b'a'; floor::CHUNK]), Progress::Bad, "a head too long");
    }
}
