//! The certificate resolver of an `https` service whose certificate comes
//! from ACME.
//!
//! A ClientHello that offers ALPN `acme-tls/1` alone is an ACME server validating
//! a tls-alpn-01 challenge (RFC 8737): it gets the challenge certificate of
//! the name it asks for, or no certificate. Every other handshake gets the
//! current certificate, read from the [`Managed`] at each handshake, so a
//! renewal takes effect at the next handshake without a reload; before the
//! first certificate is issued, there is none and the handshake is refused
//! (rustls answers with a `handshake_failure` alert). With `on_demand`, a
//! name issued on demand gets its own certificate; any other name gets the
//! service's (that of `domains`), or none when it has no `domains`.

use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::{Challenges, Managed};

/// ALPN protocol of tls-alpn-01 validation (RFC 8737 6.2).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// Resolves a managed certificate, or a tls-alpn-01 challenge certificate.
#[derive(Debug)]
pub struct AcmeResolver {
    managed: Arc<Managed>,
    challenges: Arc<Challenges>,
}

impl AcmeResolver {
    /// The resolver of `managed`, answering challenges from `challenges`.
    pub fn new(managed: Arc<Managed>, challenges: Arc<Challenges>) -> Self {
        AcmeResolver { managed, challenges }
    }
}

impl ResolvesServerCert for AcmeResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        // RFC 8737 3: a validation offers `acme-tls/1` and nothing else.
        let validation = hello.alpn().is_some_and(|protocols| {
            let mut offered = protocols.peekable();
            offered.peek().is_some() && offered.all(|p| p == ACME_TLS_ALPN)
        });
        if validation {
            return self.challenges.alpn01(hello.server_name()?);
        }
        let on_demand = self.managed.on_demand.as_ref().zip(hello.server_name());
        if let Some(cert) = on_demand.and_then(|(od, name)| od.certificate(name)) {
            return Some(cert);
        }
        self.managed.cert.load_full()
    }
}
