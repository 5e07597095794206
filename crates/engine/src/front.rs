//! The one place that decides which HTTP codec serves an accepted connection.
//!
//! - `http` services: HTTP/1.1, unless the service allows HTTP/2 and the
//!   connection opens with the HTTP/2 preface (h2c with prior knowledge,
//!   RFC 9113 3.3). The first bytes are read into the scratch set the
//!   HTTP/1.1 codec continues with, so telling the two apart costs no system
//!   call, and a silent connection holds no buffer.
//! - `https` services: the TLS handshake (within `client_header`), then the
//!   codec ALPN chose: `h2`, or HTTP/1.1 for `http/1.1` or no ALPN; a
//!   handshake that chose `acme-tls/1` (an ACME tls-alpn-01 validation) is
//!   closed at once. With on-demand certificates (`acme.on_demand`), the
//!   ClientHello is read first and the handshake held while its name's
//!   certificate is issued ([`on_demand`]).
//!
//! Nothing else in the engine chooses a protocol: the codecs never hand a
//! connection to each other.
//!
//! Invariants: no peer input can panic this code; a failed handshake or a
//! connection that closes before it can be told apart costs only itself.

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use bytes::BytesMut;
use futures_util::FutureExt;
use rustls::HandshakeKind;
use switchyard_http::error::Refusal;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::acme::on_demand::{Admission, OnDemand, Phase};
use crate::http2::PREFACE;
use crate::lazy_tcp::LazyTcp;
use crate::metrics::Handshake;
use crate::transport::{ClientStream as _, Transport};
use crate::worker::{Local, Scratch, Worker};

/// Room made for the first read of a connection without a scratch set: what
/// the HTTP/1.1 codec starts a request buffer with.
const FIRST_READ: usize = 4 * 1024;

/// The codec an accepted connection is served by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Codec {
    Http1,
    Http2,
}

/// Whether `buf` starts the HTTP/2 preface: `Some(true)` when it holds the
/// whole preface, `Some(false)` while it is a strict prefix of it, `None`
/// when it is something else (HTTP/1.x).
pub fn preface(buf: &[u8]) -> Option<bool> {
    if buf.len() >= PREFACE.len() {
        buf.starts_with(PREFACE).then_some(true)
    } else {
        PREFACE.starts_with(buf).then_some(false)
    }
}

/// An accepted connection the HTTP/1.1 codec serves, with what it was told
/// about it on the way ([`crate::l4::serve_stream`], [`serve_http`]). Handed
/// back to the connection's task, which awaits [`Http1::serve`] itself:
/// nothing of the steps before (PROXY header, protection, the h2c sniff)
/// stays in an idle keep-alive connection's future.
pub struct Http1 {
    /// The client's connection slot (`max_connections_per_client`), held
    /// until the connection closes.
    pub(crate) slot: Option<crate::protection::Slot>,
    stream: LazyTcp,
    client: SocketAddr,
    scratch: Scratch,
    local: Rc<Local>,
    service: usize,
    worker: Rc<Worker>,
    transport: Transport,
}

impl Http1 {
    /// Serves the connection until it closes ([`crate::http::serve`]).
    pub fn serve(self) -> impl std::future::Future<Output = ()> + 'static {
        let Http1 { slot, stream, client, scratch, local, service, worker, transport } = self;
        crate::http::serve(stream, client, scratch, local, service, worker, transport).map(move |()| drop(slot))
    }
}

/// Picks the codec of an accepted connection of an `http` service. `pre`
/// holds bytes already read after a PROXY protocol header. An h2c
/// connection is served here; an HTTP/1.1 one is handed back.
pub async fn serve_http(
    mut stream: LazyTcp,
    client: SocketAddr,
    pre: BytesMut,
    local: Rc<Local>,
    service: usize,
    worker: Rc<Worker>,
    refused: Option<Refusal>,
) -> Option<Http1> {
    let svc = local.gen.config.services.get(service)?;
    let transport = Transport { refused, ..Transport::default() };
    let mut scratch = Scratch { buf: pre, ..Scratch::default() };
    let codec = sniff(&mut stream, &mut scratch, &worker, svc.timeouts.client_header, svc.http2.enabled).await?;
    match codec {
        Codec::Http1 => Some(Http1 { slot: None, stream, client, scratch, local, service, worker, transport }),
        Codec::Http2 => {
            let conn = crate::http2::Conn { peer: client, local_addr: stream.local().ok() };
            let pre = scratch.buf;
            Box::pin(crate::http2::serve(stream, conn, local, service, worker, transport, pre)).await;
            None
        }
    }
}

/// Reads the first bytes of a connection into the scratch set the HTTP/1.1
/// codec then continues with, and tells h2c prior knowledge from HTTP/1.1 by
/// them when the service allows HTTP/2 (`http2`): the read is the one
/// HTTP/1.1 would make anyway (no extra system call). It is tried at once,
/// before the connection joins the event loop: a request usually arrives
/// with the connection, and one that is not there yet is waited for with
/// the scratch set back in the pool, so a silent connection holds no
/// buffer. Usually the first byte decides; a strict prefix of the preface
/// waits for more. `None`: the connection closed, stayed silent for
/// `wait`, or the worker is draining.
async fn sniff(
    stream: &mut LazyTcp,
    scratch: &mut Scratch,
    worker: &Worker,
    wait: Duration,
    http2: bool,
) -> Option<Codec> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        if !scratch.buf.is_empty() {
            if !http2 {
                return Some(Codec::Http1);
            }
            match preface(&scratch.buf) {
                Some(true) => return Some(Codec::Http2),
                None => return Some(Codec::Http1),
                Some(false) => {}
            }
        }
        let lent = make_room(scratch, worker);
        match stream.try_read_buf(&mut scratch.buf) {
            Ok(0) => return None,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return None,
        }
        if lent && scratch.buf.is_empty() {
            worker.scratch.give(std::mem::take(scratch), crate::http::SCRATCH_POOL);
        }
        tokio::select! {
            r = tokio::time::timeout_at(deadline, stream.ready()) => if !matches!(r, Ok(Ok(()))) {
                return None;
            },
            () = worker.drain.notified() => return None,
        }
        make_room(scratch, worker);
        // The awaited read, not a try: on a short read it clears the
        // socket's readiness, so the codec's next wait for readability waits
        // for new bytes instead of returning at once.
        match tokio::time::timeout_at(deadline, stream.read_buf(&mut scratch.buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return None,
        }
    }
}

/// Room for a read in `scratch`: a set lent from the worker's pool when the
/// connection has none (`true`), and at least a preface's length free.
fn make_room(scratch: &mut Scratch, worker: &Worker) -> bool {
    let lent = scratch.buf.capacity() == 0;
    if lent {
        *scratch = worker.scratch.take();
    }
    if scratch.buf.capacity() - scratch.buf.len() < PREFACE.len() {
        scratch.buf.reserve(FIRST_READ);
    }
    lent
}

/// Serves an accepted connection of an `https` service: the TLS handshake
/// (`pre`: bytes already read after a PROXY protocol header, the start of
/// the ClientHello), then the codec ALPN chose.
pub async fn serve_https(
    mut stream: TcpStream,
    client: SocketAddr,
    mut pre: BytesMut,
    local: Rc<Local>,
    service: usize,
    worker: Rc<Worker>,
    refused: Option<Refusal>,
) {
    let (Some(svc), Some(Some(term))) = (local.gen.config.services.get(service), local.gen.tls.get(service)) else {
        return;
    };
    let (term, counters, wait) = (term.clone(), local.gen.tls_handshakes.clone(), svc.timeouts.client_header);
    let failed = |reason: &'static str, error: &dyn std::fmt::Display| {
        counters.handshake(worker.id, Handshake::Failed);
        let name = &local.gen.config.services[service].name;
        tracing::debug!(service = %name, %client, reason, %error, "TLS handshake failed: connection closed");
    };
    if let Some(od) = &term.on_demand {
        // The ClientHello first: its name may need a certificate issued.
        let hello = tokio::time::timeout(wait, crate::tls::hello::read_hello(&mut stream, &mut pre)).await;
        match hello {
            Ok(Ok(Some(hello))) if !hello.validation => on_demand(od, hello.server_name.as_deref()).await,
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return failed("tls-handshake-failed", &e),
            Err(_) => return failed("tls-handshake-timeout", &"no ClientHello within client_header"),
        }
    }
    let local_addr = stream.local_addr().ok();
    let accept = term.acceptor.accept_with(stream, |conn| crate::tls::feed(conn, &pre));
    let tls = match tokio::time::timeout(wait, accept).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => return failed("tls-handshake-failed", &e),
        Err(_) => return failed("tls-handshake-timeout", &"no handshake within client_header"),
    };
    let conn = tls.get_ref().1;
    if conn.alpn_protocol() == Some(crate::acme::resolve::ACME_TLS_ALPN) {
        // A tls-alpn-01 validation: the handshake was the answer (RFC 8737 3).
        counters.handshake(worker.id, Handshake::Full);
        let mut tls = tls;
        let _ = tokio::time::timeout(wait, tokio::io::AsyncWriteExt::shutdown(&mut tls)).await;
        return;
    }
    let resumed = conn.handshake_kind() == Some(HandshakeKind::Resumed);
    counters.handshake(worker.id, if resumed { Handshake::Resumed } else { Handshake::Full });
    let transport = Transport { refused, ..crate::tls::transport(conn) };
    if transport.alpn == Some("h2") {
        let conn = crate::http2::Conn { peer: client, local_addr };
        crate::http2::serve(tls, conn, local, service, worker, transport, BytesMut::new()).await;
        return;
    }
    crate::http::serve(tls, client, Scratch::default(), local, service, worker, transport).await;
}

/// Holds a handshake for `server_name` while its certificate is issued on
/// demand, up to `on_demand.wait`; returns at once when there is nothing to
/// wait for (the handshake then gets the service's certificate, or none).
async fn on_demand(od: &OnDemand, server_name: Option<&str>) {
    let Some(name) = server_name else { return };
    let Admission::Wait(mut phase) = od.admit(name) else { return };
    let waited = tokio::time::timeout(od.wait(), phase.wait_for(|p| *p != Phase::Pending)).await;
    if waited.is_err() {
        od.counters.count("timeout");
        tracing::debug!(service = %od.service, name, "on-demand certificate not ready within `wait`: handshake goes on without it");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preface_is_recognised_whole_partial_or_not() {
        assert_eq!(preface(PREFACE), Some(true));
        assert_eq!(preface(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00"), Some(true));
        assert_eq!(preface(b"PRI * HTTP/2"), Some(false));
        assert_eq!(preface(b"P"), Some(false));
        assert_eq!(preface(b"GET / HTTP/1.1\r\n"), None);
        assert_eq!(preface(b"PRI * HTTP/1.1\r\n\r\nSM\r\n\r\n"), None);
        assert_eq!(preface(b"POST"), None);
    }
}
