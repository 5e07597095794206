//! What the HTTP codecs need from a connection, whatever carries it (plain
//! TCP, TLS, an HTTP/2 stream): bytes both ways, a borrowed split for
//! full-duplex relaying, a wait for readability that holds no buffer (so an
//! idle keep-alive connection costs no scratch), a non-blocking first write
//! ([`Sink`]), and the facts of the transport the pipeline routes and
//! reports on ([`Transport`]).
//!
//! A plain [`TcpStream`] implements them with zero-cost borrowed halves; TLS
//! connections implement them in [`crate::tls`], HTTP/2 streams in
//! [`crate::http2`], HTTP/3 streams in [`crate::http3`], server connections
//! in [`crate::upstream`]. [`Pipe`] is an in-memory connection: the
//! in-process tests' clients and servers, and the cache's background refresh.

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::net::SocketAddr;

use std::io::IoSlice;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};

use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::TcpStream;

use bytes::Bytes;
use switchyard_http::head_writer::FieldList;

pub use crate::translate::data::Trailers;

/// Slices of an HTTP/2 connection's output given to one vectored write: frame
/// headers and payloads queued by reference alternate, so 64 carry 32 DATA
/// frames (512 KB at the default frame size).
pub(crate) const WRITE_SLICES: usize = 64;

/// Facts about the connection's transport the pipeline reports and routes on.
#[derive(Debug, Clone, Default)]
pub struct Transport {
    /// The connection is TLS (scheme `https` in forwarding headers).
    pub secure: bool,
    /// Whether a client certificate was presented and verified (mTLS).
    pub client_cert_verified: bool,
    /// Subject of the verified client certificate (RFC 4514 text), for the
    /// `X-Client-Cert-Subject` header; empty when none.
    pub client_cert_subject: String,
    /// The request arrived on an HTTP/2 stream ([`crate::http2`]): logged as
    /// `HTTP/2`, and the stream is not counted as a connection of its own.
    pub http2: bool,
    /// The request arrived on an HTTP/3 stream ([`crate::http3`]): logged as
    /// `HTTP/3`, and the stream is not counted as a connection of its own.
    pub http3: bool,
    /// The application protocol ALPN chose (`h2` or `http/1.1`); `None`
    /// without TLS or when the client offered none.
    pub alpn: Option<&'static str>,
    /// Client protection refused the connection ([`crate::protection`]):
    /// each request on it is answered with the refusal's status, then it closes.
    pub refused: Option<switchyard_http::error::Refusal>,
    /// The request is the cache's own background revalidation of a stale
    /// entry (`stale-while-revalidate`, [`crate::http`]'s `cached` module):
    /// no client waits for it, and it is not counted as a connection.
    pub cache_refresh: bool,
}

impl Transport {
    /// Whether the request is one stream of a multiplexed connection
    /// (HTTP/2 or HTTP/3) rather than a connection of its own.
    pub fn is_stream(&self) -> bool {
        self.http2 || self.http3
    }
}

/// A client connection the HTTP/1.1 pipeline can serve.
pub trait ClientStream: AsyncRead + AsyncWrite + Sink + Unpin {
    /// The read half of [`ClientStream::halves`].
    type Rd<'a>: Source
    where
        Self: 'a;
    /// The write half of [`ClientStream::halves`].
    type Wr<'a>: Sink
    where
        Self: 'a;

    /// Borrows both directions at once (full-duplex body relay).
    /// Fails only where the stream must first join the event loop and
    /// cannot ([`crate::lazy_tcp::LazyTcp`]).
    fn halves(&mut self) -> io::Result<(Self::Rd<'_>, Self::Wr<'_>)>;

    /// Ready when a read would make progress (data, end of stream or an
    /// error), without reading; else the task is woken when it would. Keeps
    /// no waiter of its own (the socket's registration holds the waker), so
    /// an idle connection's wait costs no memory for it.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;

    /// Resolves when a read would make progress ([`ClientStream::poll_ready`]).
    fn ready(&mut self) -> impl Future<Output = io::Result<()>> {
        std::future::poll_fn(move |cx| self.poll_ready(cx))
    }

    /// The local address the client connected to.
    fn local(&self) -> io::Result<SocketAddr>;

    /// Ends the connection politely once the pipeline is done with it (TLS:
    /// `close_notify`). A plain socket just closes when dropped.
    fn close(&mut self) -> impl Future<Output = ()> {
        std::future::ready(())
    }

    /// The stream's reset codes (RST_STREAM), when it is one HTTP/2 stream:
    /// what the client reset it with, and what the pipeline asks it to be
    /// reset with. `None` for a connection of its own.
    fn resets(&self) -> Option<&Rc<Resets>> {
        None
    }
}

/// RST_STREAM codes crossing between a client's HTTP/2 stream, the pipeline
/// and a server's stream, so a reset on one side is passed on with its code to the other
/// (REFUSED_STREAM stays retry-safe for the client; a client's reset reaches
/// the server as the client sent it).
#[derive(Debug, Default)]
pub struct Resets {
    /// The code the client reset its stream with (set by the stream's codec).
    pub by_client: Cell<Option<u32>>,
    /// The code to reset the client's stream with instead of answering or
    /// finishing the response (set by the pipeline: a server's reset).
    pub to_client: Cell<Option<u32>>,
}

impl ClientStream for TcpStream {
    type Rd<'a> = ReadHalf<'a>;
    type Wr<'a> = WriteHalf<'a>;

    fn halves(&mut self) -> io::Result<(ReadHalf<'_>, WriteHalf<'_>)> {
        Ok(self.split())
    }

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_read_ready(cx)
    }

    fn local(&self) -> io::Result<SocketAddr> {
        self.local_addr()
    }
}

/// One part of a message body as a codec that frames bodies (HTTP/2,
/// HTTP/3) gives or takes it: the pipeline relays a body between two such
/// codecs part by part ([`crate::http::body`]'s `pump_parts`), with no
/// HTTP/1.1 chunked coding written on one side and scanned on the other.
#[derive(Debug)]
pub enum Part {
    /// Payload bytes; `true`: the body ends with them (no trailers follow).
    Data(Bytes, bool),
    /// The trailers, which end the body.
    Trailers(Trailers),
    /// The end of the body, with nothing more (no payload, no trailers).
    End,
}

/// A body's source as the relay reads it: bytes ([`AsyncRead`], HTTP/1.1
/// framing included), or, from a codec that frames bodies, [`Part`]s.
pub trait Source: AsyncRead + Unpin {
    /// Whether the rest of the body can be read as parts: a framed codec's
    /// body none of which was read as bytes yet.
    fn gives_parts(&self) -> bool {
        false
    }

    /// Where [`Source::gives_parts`]: the body's next part. Not called
    /// again once a part ended the body.
    fn poll_part(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<Part>> {
        Poll::Ready(Err(io::ErrorKind::Unsupported.into()))
    }
}

impl<T: Source + ?Sized> Source for &mut T {
    fn gives_parts(&self) -> bool {
        (**self).gives_parts()
    }

    fn poll_part(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Part>> {
        (**self).poll_part(cx)
    }
}

impl Source for ReadHalf<'_> {}
impl Source for DuplexStream {}

/// A socket half (or whole socket) the relay can write to, with a
/// non-blocking first attempt that spares arming a timer. Streams that
/// cannot write without waiting (TLS) answer `WouldBlock` to both attempts.
pub trait Sink: AsyncWrite + Unpin {
    /// Writes what the socket takes now without waiting.
    fn try_write_now(&self, data: &[u8]) -> io::Result<usize>;
    /// Writes what the socket takes now of two buffers, in one system call.
    fn try_write_two_now(&self, a: &[u8], b: &[u8]) -> io::Result<usize>;

    /// [`try_write_two_now`](Self::try_write_two_now) for the last bytes the
    /// connection sends before it closes, when nothing unread is left to make
    /// the close a reset. A plain socket holds them back (`MSG_MORE`) so the
    /// close sends them with its FIN in one packet: one transmission and one
    /// acknowledgement fewer per connection, which is most of a short
    /// connection's kernel time on loopback. Other sinks write as usual.
    fn try_write_two_last(&self, a: &[u8], b: &[u8]) -> io::Result<usize> {
        self.try_write_two_now(a, b)
    }

    /// Whether the client takes response heads as a header list
    /// ([`FieldList`]: an HTTP/2 stream) rather than HTTP/1.1 bytes.
    fn takes_fields(&self) -> bool {
        false
    }

    /// Sends a response head (interim or final) as a header list, where
    /// [`Sink::takes_fields`]: the body, if any, follows as written bytes in
    /// the framing the list says. Others refuse.
    fn send_fields(&mut self, _head: &FieldList) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }

    /// Whether the body that follows the head can be written as parts
    /// ([`Sink::poll_send_part`]): a codec that frames bodies, none of
    /// whose body was written as bytes yet.
    fn takes_parts(&self) -> bool {
        false
    }

    /// Where [`Sink::takes_parts`]: takes `part`, ready once it is taken
    /// whole (payload beyond the peer's window is held, at most one part's,
    /// and sent as the window opens; a later part or the stream's end waits
    /// for it). Payload taken is removed from the front of a `Data` part.
    fn poll_send_part(&mut self, _cx: &mut Context<'_>, _part: &mut Part) -> Poll<io::Result<()>> {
        Poll::Ready(Err(io::ErrorKind::Unsupported.into()))
    }
}

/// A poll answered without waiting: `Pending` becomes `WouldBlock`. For the
/// [`Sink`] of a stream whose writes are polled (HTTP/2, HTTP/3): a write that
/// can go now goes, one that would wait takes the relay's awaited path.
pub fn now<T>(poll: impl FnOnce(&mut Context<'_>) -> Poll<io::Result<T>>) -> io::Result<T> {
    match poll(&mut Context::from_waker(std::task::Waker::noop())) {
        Poll::Ready(result) => result,
        Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
    }
}

/// `fut` within `limit`: polled once first, and only when it waits is a timer
/// armed (a `tokio::time::timeout` reads the clock and writes its timer's state
/// even for a future that is ready at once).
pub async fn within<F: Future>(limit: std::time::Duration, fut: F) -> Result<F::Output, tokio::time::error::Elapsed> {
    let mut fut = std::pin::pin!(fut);
    match std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await {
        Poll::Ready(output) => Ok(output),
        Poll::Pending => tokio::time::timeout(limit, fut).await,
    }
}

/// The pipeline's client connection over one request stream of a multiplexed
/// connection (HTTP/2, HTTP/3): the request body `rd`, the response side `wr`,
/// the connection's local address and the reset codes the stream lends the
/// pipeline. The stream carries one request whose head is handed over with
/// it, so the pipeline never waits idle on it.
pub struct StreamClient<R, W> {
    /// The request body.
    pub rd: R,
    /// The response side.
    pub wr: W,
    /// The connection's local address.
    pub local: Option<SocketAddr>,
    /// Reset codes between the stream and the pipeline.
    pub resets: Rc<Resets>,
}

impl<R, W> std::fmt::Debug for StreamClient<R, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamClient").field("local", &self.local).finish_non_exhaustive()
    }
}

impl<R, W: Sink> Sink for StreamClient<R, W>
where
    R: AsyncRead + Unpin,
{
    fn try_write_now(&self, data: &[u8]) -> io::Result<usize> {
        self.wr.try_write_now(data)
    }

    fn try_write_two_now(&self, a: &[u8], b: &[u8]) -> io::Result<usize> {
        self.wr.try_write_two_now(a, b)
    }

    fn takes_fields(&self) -> bool {
        self.wr.takes_fields()
    }

    fn send_fields(&mut self, head: &FieldList) -> io::Result<()> {
        self.wr.send_fields(head)
    }

    fn takes_parts(&self) -> bool {
        self.wr.takes_parts()
    }

    fn poll_send_part(&mut self, cx: &mut Context<'_>, part: &mut Part) -> Poll<io::Result<()>> {
        self.wr.poll_send_part(cx, part)
    }
}

impl<R: AsyncRead + Unpin, W: Unpin> AsyncRead for StreamClient<R, W> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.rd).poll_read(cx, buf)
    }
}

impl<R: Unpin, W: AsyncWrite + Unpin> AsyncWrite for StreamClient<R, W> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.wr).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.wr).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.wr).poll_shutdown(cx)
    }
}

impl<R: Source, W: Sink> ClientStream for StreamClient<R, W> {
    type Rd<'a>
        = &'a mut R
    where
        Self: 'a;
    type Wr<'a>
        = &'a mut W
    where
        Self: 'a;

    fn halves(&mut self) -> io::Result<(&mut R, &mut W)> {
        Ok((&mut self.rd, &mut self.wr))
    }

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn local(&self) -> io::Result<SocketAddr> {
        self.local.ok_or_else(|| io::ErrorKind::Unsupported.into())
    }

    fn resets(&self) -> Option<&Rc<Resets>> {
        Some(&self.resets)
    }
}

impl<T: Sink + ?Sized> Sink for &mut T {
    fn try_write_now(&self, data: &[u8]) -> io::Result<usize> {
        (**self).try_write_now(data)
    }

    fn try_write_two_now(&self, a: &[u8], b: &[u8]) -> io::Result<usize> {
        (**self).try_write_two_now(a, b)
    }

    fn try_write_two_last(&self, a: &[u8], b: &[u8]) -> io::Result<usize> {
        (**self).try_write_two_last(a, b)
    }

    fn takes_fields(&self) -> bool {
        (**self).takes_fields()
    }

    fn send_fields(&mut self, head: &FieldList) -> io::Result<()> {
        (**self).send_fields(head)
    }

    fn takes_parts(&self) -> bool {
        (**self).takes_parts()
    }

    fn poll_send_part(&mut self, cx: &mut Context<'_>, part: &mut Part) -> Poll<io::Result<()>> {
        (**self).poll_send_part(cx, part)
    }
}

impl Sink for TcpStream {
    fn try_write_now(&self, data: &[u8]) -> io::Result<usize> {
        self.try_write(data)
    }

    fn try_write_two_now(&self, a: &[u8], b: &[u8]) -> io::Result<usize> {
        try_send_gathered(self, &[IoSlice::new(a), IoSlice::new(b)])
    }

    fn try_write_two_last(&self, a: &[u8], b: &[u8]) -> io::Result<usize> {
        send_last(self, a, b)
    }
}

impl Sink for WriteHalf<'_> {
    fn try_write_now(&self, data: &[u8]) -> io::Result<usize> {
        self.try_write(data)
    }

    fn try_write_two_now(&self, a: &[u8], b: &[u8]) -> io::Result<usize> {
        try_send_gathered(self.as_ref(), &[IoSlice::new(a), IoSlice::new(b)])
    }

    fn try_write_two_last(&self, a: &[u8], b: &[u8]) -> io::Result<usize> {
        send_last(self.as_ref(), a, b)
    }
}

/// One gathered send with `MSG_MORE`: the kernel keeps what it takes queued
/// (below a segment's size) until the next send or the close, and the close
/// puts its FIN on that queued segment (`tcp_send_fin`). Only for the last
/// bytes before a close that comes at once: held bytes are lost if the socket
/// is reset instead, which is why the caller checks nothing is left unread.
fn send_last(stream: &TcpStream, a: &[u8], b: &[u8]) -> io::Result<usize> {
    stream.try_io(tokio::io::Interest::WRITABLE, || send_last_with(stream, a, b))
}

/// A gathered write on a socket as `sendmsg(2)` (`send(2)` for one
/// buffer), with `MSG_NOSIGNAL`: into the socket layer straight, where the
/// `writev(2)` that `write_vectored` makes goes through the file layer first
/// (`vfs_writev`, `sock_write_iter`, the descriptor's position lock). That
/// layer was about 3 % of the kernel time of an h2c → h2 request in a
/// profile of report `2026-11-28-window-updates`.
#[cfg(target_os = "linux")]
pub(crate) fn send_gathered(socket: &impl std::os::fd::AsFd, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    let socket = socket2::SockRef::from(socket);
    match bufs {
        [one] => socket.send_with_flags(one, libc::MSG_NOSIGNAL),
        _ => socket.send_vectored_with_flags(bufs, libc::MSG_NOSIGNAL),
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn send_gathered(socket: &impl std::os::fd::AsFd, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    socket2::SockRef::from(socket).send_vectored(bufs)
}

/// [`send_gathered`] on a registered socket, without waiting.
pub(crate) fn try_send_gathered(stream: &TcpStream, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    stream.try_io(tokio::io::Interest::WRITABLE, || send_gathered(stream, bufs))
}

/// [`send_gathered`] on a registered socket, waiting for room.
pub(crate) fn poll_send_gathered(
    stream: &TcpStream,
    cx: &mut Context<'_>,
    bufs: &[IoSlice<'_>],
) -> Poll<io::Result<usize>> {
    loop {
        if let Err(e) = std::task::ready!(stream.poll_write_ready(cx)) {
            return Poll::Ready(Err(e));
        }
        match try_send_gathered(stream, bufs) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            sent => return Poll::Ready(sent),
        }
    }
}

/// [`send_last`]'s system call on any socket, registered or not.
#[cfg(target_os = "linux")]
pub(crate) fn send_last_with(socket: &impl std::os::fd::AsFd, a: &[u8], b: &[u8]) -> io::Result<usize> {
    let bufs = [IoSlice::new(a), IoSlice::new(b)];
    let bufs = if b.is_empty() { &bufs[..1] } else { &bufs[..] };
    socket2::SockRef::from(socket).send_vectored_with_flags(bufs, libc::MSG_MORE | libc::MSG_NOSIGNAL)
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn send_last_with(socket: &impl std::os::fd::AsFd, a: &[u8], b: &[u8]) -> io::Result<usize> {
    socket2::SockRef::from(socket).send_vectored(&[IoSlice::new(a), IoSlice::new(b)])
}

/// [`Sink::try_write_two_now`] for sinks without a gathered write: `a`, then
/// `b` if all of `a` was taken.
pub(crate) fn write_two_now<W: Sink + ?Sized>(dst: &W, a: &[u8], b: &[u8]) -> io::Result<usize> {
    let n = dst.try_write_now(a)?;
    if n < a.len() {
        return Ok(n);
    }
    match dst.try_write_now(b) {
        Ok(m) => Ok(n + m),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(n),
        Err(e) => Err(e),
    }
}

/// Bytes each direction of a [`Pipe`] buffers before the writer waits.
const PIPE_BUFFER: usize = 64 * 1024;

/// The pipeline's end of an in-memory connection: it reads the HTTP/1.1
/// request from `rd` and writes the HTTP/1.1 response to `wr` (an in-process
/// test's server uses it the other way round). Each in-memory stream
/// carries one direction only, so the two halves borrow independently; a
/// pipe carries one request whose head is handed over with it, as a stream
/// of a multiplexed connection does.
pub type Pipe = StreamClient<DuplexStream, DuplexStream>;

/// The other end of a [`Pipe`]: request bytes go into `to_pipeline`,
/// response bytes come out of `from_pipeline`.
pub struct PipeEnd {
    /// Where the request is written.
    pub to_pipeline: DuplexStream,
    /// Where the response is read.
    pub from_pipeline: DuplexStream,
    /// Reset codes shared with the pipeline's end.
    pub resets: Rc<Resets>,
}

impl Pipe {
    /// A connected pair; `local` is the address the client connected to.
    pub fn pair(local: Option<SocketAddr>) -> (Pipe, PipeEnd) {
        let (rd, to_pipeline) = tokio::io::duplex(PIPE_BUFFER);
        let (wr, from_pipeline) = tokio::io::duplex(PIPE_BUFFER);
        let resets = Rc::new(Resets::default());
        (Pipe { rd, wr, local, resets: resets.clone() }, PipeEnd { to_pipeline, from_pipeline, resets })
    }
}

/// In-memory streams have no non-blocking write outside a task context: the
/// relay falls back to its awaited write.
impl Sink for DuplexStream {
    fn try_write_now(&self, _: &[u8]) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }

    fn try_write_two_now(&self, _: &[u8], _: &[u8]) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }
}

/// Sets IP_FREEBIND (IPV6_FREEBIND for IPv6) on `socket`, which will bind `addr`.
pub(crate) fn set_freebind(socket: &socket2::Socket, addr: SocketAddr) -> std::io::Result<()> {
    if addr.is_ipv6() {
        socket.set_freebind_v6(true)
    } else {
        socket.set_freebind_v4(true)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// The last bytes before a close leave with the FIN in one segment, and
    /// arrive whole.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn last_bytes_leave_with_the_fin() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let (mut client, (server, _)) = (client.expect("connect"), accepted.expect("accept"));
        let before = crate::relay::segments_in(&client);
        let sent = server.try_write_two_last(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n", b"body").expect("send");
        assert_eq!(sent, 42);
        drop(server);
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.expect("read");
        assert_eq!(got, b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nbody");
        assert_eq!(crate::relay::segments_in(&client) - before, 1, "the response and the FIN in one segment");
    }

    #[tokio::test(start_paused = true)]
    async fn within_takes_a_ready_future_at_once_and_times_out_one_that_waits() {
        let t0 = tokio::time::Instant::now();
        assert_eq!(within(std::time::Duration::from_secs(5), async { 7 }).await.ok(), Some(7));
        assert_eq!(tokio::time::Instant::now(), t0, "no time passed for a ready future");
        let waits = within(std::time::Duration::from_secs(5), std::future::pending::<()>()).await;
        assert!(waits.is_err());
        assert_eq!(tokio::time::Instant::now() - t0, std::time::Duration::from_secs(5));
        // A future ready after a while, within the limit.
        let later = async {
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            "done"
        };
        assert_eq!(within(std::time::Duration::from_secs(5), later).await.ok(), Some("done"));
    }

    #[tokio::test]
    async fn pipe_directions_are_independent() {
        let (mut pipe, mut end) = Pipe::pair(None);
        end.to_pipeline.write_all(b"request").await.expect("write");
        let (rd, wr) = pipe.halves().expect("halves");
        let mut got = [0u8; 7];
        rd.read_exact(&mut got).await.expect("read");
        wr.write_all(b"response").await.expect("write");
        drop(pipe);
        let mut out = Vec::new();
        end.from_pipeline.read_to_end(&mut out).await.expect("read");
        assert_eq!((&got[..], &out[..]), (&b"request"[..], &b"response"[..]));
    }
}
