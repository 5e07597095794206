//! An accepted TCP connection that joins the event loop only when it must
//! wait ([`LazyTcp`]), and the accept that hands one out without joining it
//! ([`accept`]).
//!
//! tokio registers every socket with epoll when it wraps it (`EPOLL_CTL_ADD`)
//! and removes it when it drops it (`EPOLL_CTL_DEL`): two system calls per
//! connection. A short HTTP connection often never waits on its client
//! socket: the request is there when the connection is accepted, the answer
//! fits the socket's send buffer, and the connection closes. Such a
//! connection is read, written and closed here with plain system calls, and
//! the registration happens at the first operation that would block, as
//! HAProxy does. Closing an fd removes it from epoll anyway, so a socket
//! never registered costs nothing more at close.
//!
//! Invariants:
//! - The socket is non-blocking from the accept on (`SOCK_NONBLOCK`): no
//!   operation here ever blocks the worker.
//! - Once registered it stays registered: readiness is then tokio's, and a
//!   `WouldBlock` from a bare operation is the only way to get there (or
//!   [`LazyTcp::registered`] / [`LazyTcp::into_tokio`] for code that needs a
//!   tokio socket).
//! - A bare read writes only into the unfilled part of the caller's buffer
//!   and marks as filled exactly the bytes the kernel wrote.

use std::io::{self, IoSlice, Write as _};
use std::net::{Shutdown, SocketAddr};
use std::os::fd::AsFd;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::TcpStream;

use crate::transport::{ClientStream, Sink};

/// An accepted connection, registered with the event loop only once an
/// operation on it would block.
#[derive(Debug)]
pub struct LazyTcp(State);

#[derive(Debug)]
enum State {
    /// Not registered: operations are plain non-blocking system calls.
    Bare(std::net::TcpStream),
    /// Registered with the worker's event loop.
    Polled(TcpStream),
    /// Registration failed; the socket is closed.
    Gone,
}

/// A listening socket registered with the worker's event loop for
/// [`accept`] (readable: a connection waits in the backlog).
#[allow(unsafe_code)]
pub fn listener(socket: std::net::TcpListener) -> io::Result<AsyncFd<std::net::TcpListener>> {
    // SAFETY: the `AsyncFd` owns the listener, so its descriptor stays open
    // and the same until the `AsyncFd` drops it; nothing else closes it.
    unsafe { AsyncFd::register_with_interest(socket, Interest::READABLE) }.map_err(|e| e.into_parts().1)
}

/// Accepts one connection without registering it: `accept4` with
/// `SOCK_NONBLOCK | SOCK_CLOEXEC`, one system call, after the listener is
/// readable.
pub async fn accept(listener: &AsyncFd<std::net::TcpListener>) -> io::Result<(LazyTcp, SocketAddr)> {
    listener.async_io(Interest::READABLE, accept_now).await
}

fn accept_now(listener: &std::net::TcpListener) -> io::Result<(LazyTcp, SocketAddr)> {
    use rustix::net::{acceptfrom_with, SocketFlags};
    let (fd, peer) = acceptfrom_with(listener.as_fd(), SocketFlags::NONBLOCK | SocketFlags::CLOEXEC)?;
    let peer = peer
        .and_then(|a| SocketAddr::try_from(a).ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "accepted a connection without an IP address"))?;
    Ok((LazyTcp(State::Bare(std::net::TcpStream::from(fd))), peer))
}

fn gone() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "the connection could not join the event loop")
}

impl LazyTcp {
    /// The connection registered with the event loop (registering it now if
    /// it is not yet).
    pub fn registered(&mut self) -> io::Result<&mut TcpStream> {
        // `Gone` while registering: a failed registration closes the socket.
        self.0 = match std::mem::replace(&mut self.0, State::Gone) {
            State::Bare(bare) => State::Polled(TcpStream::from_std(bare)?),
            other => other,
        };
        match &mut self.0 {
            State::Polled(s) => Ok(s),
            _ => Err(gone()),
        }
    }

    /// The tokio socket, registered, for code that works on one (TLS, the
    /// layer-4 relays).
    pub fn into_tokio(self) -> io::Result<TcpStream> {
        match self.0 {
            State::Bare(bare) => TcpStream::from_std(bare),
            State::Polled(s) => Ok(s),
            State::Gone => Err(gone()),
        }
    }

    /// Reads what has arrived into `buf`'s spare room without waiting and
    /// without joining the event loop: `WouldBlock` when nothing has.
    pub fn try_read_buf(&mut self, buf: &mut bytes::BytesMut) -> io::Result<usize> {
        match &self.0 {
            State::Bare(s) => {
                let mut rb = ReadBuf::uninit(buf.spare_capacity_mut());
                recv_into(s, &mut rb)?;
                let n = rb.filled().len();
                advance(buf, n);
                Ok(n)
            }
            State::Polled(s) => s.try_read_buf(buf),
            State::Gone => Err(gone()),
        }
    }

    /// Whether the connection has joined the event loop (tests).
    #[cfg(test)]
    pub(crate) fn is_registered(&self) -> bool {
        matches!(self.0, State::Polled(_))
    }
}

/// `recv(2)` into the unfilled part of `buf`, without zeroing it first.
#[allow(unsafe_code)]
fn recv_into(s: &std::net::TcpStream, buf: &mut ReadBuf<'_>) -> io::Result<()> {
    // SAFETY: `unfilled_mut` is only written to, by the kernel, never
    // read; `recv` returns how many bytes it wrote at its start, and those
    // (no more) are marked initialized and filled.
    let n = socket2::SockRef::from(s).recv(unsafe { buf.unfilled_mut() })?;
    unsafe { buf.assume_init(n) };
    buf.advance(n);
    Ok(())
}

/// `send(2)` (`MSG_NOSIGNAL`) on a bare socket.
fn bare_write(mut s: &std::net::TcpStream, data: &[u8]) -> io::Result<usize> {
    s.write(data)
}

/// `sendmsg(2)` on a bare socket ([`crate::transport::send_gathered`]).
fn bare_write_vectored(s: &std::net::TcpStream, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    crate::transport::send_gathered(s, bufs)
}

/// Marks `n` bytes of `buf`'s spare room, just written by the kernel, as
/// part of it.
#[allow(unsafe_code)]
fn advance(buf: &mut bytes::BytesMut, n: usize) {
    // SAFETY: `recv_into` initialized the first `n` bytes of the spare room.
    unsafe { buf.set_len(buf.len() + n) };
}

impl AsyncRead for LazyTcp {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if let State::Bare(s) = &self.0 {
            match recv_into(s, buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                done => return Poll::Ready(done),
            }
        }
        Pin::new(self.registered()?).poll_read(cx, buf)
    }
}

impl AsyncWrite for LazyTcp {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if let State::Bare(s) = &self.0 {
            match bare_write(s, data) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                done => return Poll::Ready(done),
            }
        }
        Pin::new(self.registered()?).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if let State::Bare(s) = &self.0 {
            match bare_write_vectored(s, bufs) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                done => return Poll::Ready(done),
            }
        }
        crate::transport::poll_send_gathered(self.registered()?, cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.0 {
            State::Bare(s) => Poll::Ready(s.shutdown(Shutdown::Write)),
            State::Polled(s) => Pin::new(s).poll_shutdown(cx),
            State::Gone => Poll::Ready(Err(gone())),
        }
    }
}

impl Sink for LazyTcp {
    fn try_write_now(&self, data: &[u8]) -> io::Result<usize> {
        match &self.0 {
            State::Bare(s) => bare_write(s, data),
            State::Polled(s) => s.try_write_now(data),
            State::Gone => Err(gone()),
        }
    }

    fn try_write_two_now(&self, a: &[u8], b: &[u8]) -> io::Result<usize> {
        match &self.0 {
            State::Bare(s) => bare_write_vectored(s, &[IoSlice::new(a), IoSlice::new(b)]),
            State::Polled(s) => s.try_write_two_now(a, b),
            State::Gone => Err(gone()),
        }
    }

    fn try_write_two_last(&self, a: &[u8], b: &[u8]) -> io::Result<usize> {
        match &self.0 {
            State::Bare(s) => crate::transport::send_last_with(s, a, b),
            State::Polled(s) => s.try_write_two_last(a, b),
            State::Gone => Err(gone()),
        }
    }
}

impl From<TcpStream> for LazyTcp {
    /// A connection already registered (the layer-4 passthrough's, after its peek).
    fn from(stream: TcpStream) -> Self {
        LazyTcp(State::Polled(stream))
    }
}

impl ClientStream for LazyTcp {
    type Rd<'a> = ReadHalf<'a>;
    type Wr<'a> = WriteHalf<'a>;

    fn halves(&mut self) -> io::Result<(ReadHalf<'_>, WriteHalf<'_>)> {
        Ok(self.registered()?.split())
    }

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.registered()?.poll_read_ready(cx)
    }

    fn local(&self) -> io::Result<SocketAddr> {
        match &self.0 {
            State::Bare(s) => s.local_addr(),
            State::Polled(s) => s.local_addr(),
            State::Gone => Err(gone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn pair() -> (LazyTcp, TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("non-blocking");
        let addr = listener.local_addr().expect("address");
        let listener = super::listener(listener).expect("register");
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), accept(&listener));
        let (lazy, peer) = accepted.expect("accept");
        let client = client.expect("connect");
        assert_eq!(peer, client.local_addr().expect("client address"));
        (lazy, client)
    }

    #[tokio::test]
    async fn an_exchange_that_never_waits_stays_out_of_the_event_loop() {
        let (mut lazy, mut client) = pair().await;
        client.write_all(b"ping").await.expect("write");
        // Let the bytes cross loopback before the bare read.
        client.flush().await.expect("flush");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let mut got = [0u8; 4];
        lazy.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"ping");
        lazy.write_all(b"pong").await.expect("write");
        assert!(!lazy.is_registered(), "nothing had to wait");
        drop(lazy);
        let mut back = Vec::new();
        client.read_to_end(&mut back).await.expect("read");
        assert_eq!(back, b"pong");
    }

    #[tokio::test]
    async fn a_read_that_would_block_registers_and_then_waits() {
        let (mut lazy, mut client) = pair().await;
        let reader = async {
            let mut got = [0u8; 5];
            lazy.read_exact(&mut got).await.expect("read");
            (got, lazy.is_registered())
        };
        let writer = async {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            client.write_all(b"later").await.expect("write");
        };
        let ((got, registered), ()) = tokio::join!(reader, writer);
        assert_eq!(&got, b"later");
        assert!(registered, "the read had to wait for the event loop");
    }

    #[tokio::test]
    async fn a_gathered_write_larger_than_the_socket_takes_waits_and_keeps_the_order() {
        let (mut lazy, mut client) = pair().await;
        let parts: Vec<Vec<u8>> = (0..3u8).map(|i| vec![b'a' + i; 3 << 20]).collect();
        let expected: Vec<u8> = parts.concat();
        let writer = async {
            let mut sent = 0;
            while sent < expected.len() {
                // The slices from where the last write stopped.
                let mut skip = sent;
                let mut slices = Vec::new();
                for part in &parts {
                    if skip >= part.len() {
                        skip -= part.len();
                        continue;
                    }
                    slices.push(IoSlice::new(&part[skip..]));
                    skip = 0;
                }
                let n = std::future::poll_fn(|cx| Pin::new(&mut lazy).poll_write_vectored(cx, &slices))
                    .await
                    .expect("write");
                assert!(n > 0, "a write took nothing");
                sent += n;
            }
            lazy.is_registered()
        };
        let reader = async {
            // The writer fills the socket before anything is read.
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            let mut got = vec![0u8; expected.len()];
            client.read_exact(&mut got).await.expect("read");
            got
        };
        let (registered, got) = tokio::join!(writer, reader);
        assert!(registered, "the write had to wait for room");
        assert!(got == expected, "bytes arrived out of order or changed");
    }

    #[tokio::test]
    async fn ready_registers_and_resolves_when_bytes_arrive() {
        let (mut lazy, mut client) = pair().await;
        let wait = async { lazy.ready().await.expect("ready") };
        let send = async {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            client.write_all(b"x").await.expect("write");
        };
        tokio::join!(wait, send);
        assert!(lazy.is_registered());
    }
}
