//! TLS termination for `https` services.
//!
//! Per generation, each `https` service gets a [`Terminator`]: a rustls
//! server configuration built from its `tls` settings ([`config`]), with
//! certificates chosen by server name ([`resolve`]). A reload builds a new
//! generation and so reads the certificates again (certificate hot reload);
//! connections already established keep their session, and the session
//! ticket keys and session cache are carried over while the settings they
//! depend on are unchanged, so clients resume across a reload.
//!
//! On an accepted connection ([`serve`], after any PROXY protocol header),
//! the handshake runs within the service's `client_header` timeout; a
//! failed or late handshake closes only that connection and is counted.
//! Then the HTTP pipeline runs over the TLS stream ([`stream`]) with the
//! connection's [`Transport`] facts (client certificate, ALPN).
//!
//! Invariants: nothing a client sends can panic this code; a build failure
//! refuses the start or reload with a [`TlsError`], it never panics.

pub mod config;
pub mod resolve;
mod stream;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use bytes::BytesMut;
use rustls::server::ServerConnection;
use rustls::HandshakeKind;
use switchyard_config::{Config, Service};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

pub use self::config::TlsError;
use self::config::{keeps_resumption, Resumption};
use crate::http::Transport;
use crate::live::Generation;
use crate::metrics::Handshake;
use crate::worker::{Local, Worker};

/// One `https` service's TLS termination in one generation.
pub struct Terminator {
    acceptor: TlsAcceptor,
    resumption: Resumption,
}

impl std::fmt::Debug for Terminator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminator").field("resumption", &self.resumption).finish_non_exhaustive()
    }
}

impl Terminator {
    /// Builds the termination of `service` (which must have `tls`). `previous`
    /// is the same service's termination in the generation being replaced,
    /// with its settings: its resumption state is kept when they allow.
    pub fn build(service: &Service, previous: Option<(&Service, &Terminator)>) -> Result<Self, TlsError> {
        let error = |why: String| TlsError { service: service.name.clone(), why };
        let tls = service.tls.as_ref().ok_or_else(|| error("the service has no `tls` settings".into()))?;
        let kept = previous.and_then(|(old, term)| {
            old.tls.as_ref().filter(|old| keeps_resumption(old, tls)).map(|_| term.resumption.clone())
        });
        let resumption = match kept {
            Some(r) => r,
            None => Resumption::new(tls).map_err(error)?,
        };
        let h2 = service.http2.enabled;
        let server = config::server_config(tls, h2, &resumption).map_err(error)?;
        Ok(Terminator { acceptor: TlsAcceptor::from(Arc::new(server)), resumption })
    }

    /// The rustls configuration handshakes use.
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        self.acceptor.config().clone()
    }
}

/// The terminations of every `https` service of `config`, indexed like its
/// services (`None` for other modes).
pub fn terminators(config: &Config, previous: Option<&Generation>) -> Result<Vec<Option<Arc<Terminator>>>, TlsError> {
    config
        .services
        .iter()
        .map(|s| {
            if s.tls.is_none() {
                return Ok(None);
            }
            let before = previous.and_then(|g| {
                let i = g.service_index(&s.name)?;
                Some((&g.config.services[i], g.tls.get(i)?.as_deref()?))
            });
            Terminator::build(s, before).map(|t| Some(Arc::new(t)))
        })
        .collect()
}

/// Serves an accepted connection of an `https` service: the TLS handshake
/// (`pre`: bytes already read after a PROXY protocol header, the start of
/// the ClientHello), then the HTTP pipeline over the TLS stream.
pub async fn serve(
    stream: TcpStream,
    client: SocketAddr,
    pre: BytesMut,
    local: Rc<Local>,
    service: usize,
    worker: Rc<Worker>,
    refused: Option<crate::protection::Refusal>,
) {
    let (Some(svc), Some(Some(term))) = (local.gen.config.services.get(service), local.gen.tls.get(service)) else {
        return;
    };
    let (term, counters, wait) = (term.clone(), local.gen.tls_handshakes.clone(), svc.timeouts.client_header);
    let local_addr = stream.local_addr().ok();
    let accept = term.acceptor.accept_with(stream, |conn| feed(conn, &pre));
    let failed = |reason: &'static str, error: &dyn std::fmt::Display| {
        counters.handshake(worker.id, Handshake::Failed);
        let name = &local.gen.config.services[service].name;
        tracing::debug!(service = %name, %client, reason, %error, "TLS handshake failed: connection closed");
    };
    let tls = match tokio::time::timeout(wait, accept).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => return failed("tls-handshake-failed", &e),
        Err(_) => return failed("tls-handshake-timeout", &"no handshake within client_header"),
    };
    let conn = tls.get_ref().1;
    let resumed = conn.handshake_kind() == Some(HandshakeKind::Resumed);
    counters.handshake(worker.id, if resumed { Handshake::Resumed } else { Handshake::Full });
    let transport = Transport { refused, ..transport(conn) };
    if transport.alpn == Some("h2") {
        let conn = crate::http2::Conn { peer: client, local_addr, counted: false };
        crate::http2::serve(tls, conn, local, service, worker, transport, BytesMut::new()).await;
        return;
    }
    crate::http::serve(tls, client, BytesMut::new(), local, service, worker, transport).await;
}

/// Hands rustls the ClientHello bytes read before the handshake started.
fn feed(conn: &mut ServerConnection, pre: &[u8]) {
    if pre.is_empty() {
        return;
    }
    let mut rest = pre;
    while !rest.is_empty() {
        match conn.read_tls(&mut rest) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    // An error is kept by rustls and ends the handshake that follows.
    let _ = conn.process_new_packets();
}

/// The pipeline's facts about a finished handshake.
fn transport(conn: &ServerConnection) -> Transport {
    // rustls keeps a client's certificates only once its verifier accepted them.
    let leaf = conn.peer_certificates().and_then(|chain| chain.first());
    Transport {
        secure: true,
        client_cert_verified: leaf.is_some(),
        client_cert_subject: leaf.map(|der| subject(der)).unwrap_or_default(),
        alpn: match conn.alpn_protocol() {
            Some(b"h2") => Some("h2"),
            Some(b"http/1.1") => Some("http/1.1"),
            _ => None,
        },
        http2: false,
        refused: None,
    }
}

/// A certificate's subject as RFC 4514-style text, made safe for a header
/// value (characters outside printable ASCII become `?`).
pub fn subject(der: &[u8]) -> String {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let Ok((_, cert)) = X509Certificate::from_der(der) else {
        return String::new();
    };
    cert.subject().to_string().chars().map(|c| if (' '..='~').contains(&c) { c } else { '?' }).collect()
}
