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
//! An accepted connection's handshake is run by [`crate::front`], with
//! [`feed`] for the ClientHello bytes read before it; the codec then serves
//! the TLS stream ([`stream`]) with the connection's [`Transport`] facts
//! ([`transport`]: client certificate, ALPN).
//!
//! Invariants: nothing a client sends can panic this code; a build failure
//! refuses the start or reload with a [`TlsError`], it never panics.

pub mod config;
pub mod hello;
pub mod resolve;
mod stream;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use quinn::crypto::rustls::QuicServerConfig;
use rustls::server::ServerConnection;
use switchyard_config::{Config, Service};
use tokio_rustls::TlsAcceptor;

pub use self::config::TlsError;
use self::config::{keeps_resumption, Resumption};
use crate::acme::on_demand::OnDemand;
use crate::acme::resolve::AcmeResolver;
use crate::acme::Registry;
use crate::transport::Transport;

/// One `https` service's TLS termination in one generation.
pub struct Terminator {
    pub(crate) acceptor: TlsAcceptor,
    resumption: Resumption,
    /// The same settings for QUIC (ALPN `h3`), when the service has `http3`.
    quic: Option<Arc<QuicServerConfig>>,
    /// Certificates issued at the first handshake for a name (`acme.on_demand`).
    pub(crate) on_demand: Option<Arc<OnDemand>>,
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
    /// `acme`: the process's ACME certificates, of which a service whose
    /// `tls` has `acme` takes (or starts) its own.
    pub fn build(
        service: &Service,
        previous: Option<(&Service, &Terminator)>,
        acme: &Arc<Registry>,
    ) -> Result<Self, TlsError> {
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
        let managed = tls.acme.as_ref().map(|settings| acme.managed(&service.name, settings));
        let on_demand = managed.as_ref().and_then(|m| m.on_demand.clone());
        let managed = managed.map(|m| AcmeResolver::new(m, acme.challenges.clone()));
        let server = config::server_config_with(tls, h2, &resumption, managed).map_err(error)?;
        let quic = match service.http3.enabled {
            true => Some(Arc::new(config::quic_config(&server, service.http3.early_data).map_err(error)?)),
            false => None,
        };
        Ok(Terminator { acceptor: TlsAcceptor::from(Arc::new(server)), resumption, quic, on_demand })
    }

    /// The QUIC TLS configuration, when the service has `http3`.
    pub fn quic(&self) -> Option<Arc<QuicServerConfig>> {
        self.quic.clone()
    }

    /// The rustls configuration handshakes use.
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        self.acceptor.config().clone()
    }
}

/// The previous generation's configuration and terminators (by service
/// index), whose session state a rebuilt terminator may carry over.
pub type Previous<'a> = (&'a Config, &'a [Option<Arc<Terminator>>]);

/// The terminations of every `https` service of `config`, indexed like its
/// services (`None` for other modes).
pub fn terminators(
    config: &Config,
    previous: Option<Previous<'_>>,
    acme: &Arc<Registry>,
) -> Result<Vec<Option<Arc<Terminator>>>, TlsError> {
    config
        .services
        .iter()
        .map(|s| {
            if s.tls.is_none() {
                return Ok(None);
            }
            let before = previous.and_then(|(old, terms)| {
                let i = old.services.iter().position(|o| o.name == s.name)?;
                Some((&old.services[i], terms.get(i)?.as_deref()?))
            });
            Terminator::build(s, before, acme).map(|t| Some(Arc::new(t)))
        })
        .collect()
}

/// Hands rustls the ClientHello bytes read before the handshake started.
pub fn feed(conn: &mut ServerConnection, pre: &[u8]) {
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
pub fn transport(conn: &ServerConnection) -> Transport {
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
        http3: false,
        refused: None,
        cache_refresh: false,
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
