//! Choosing a certificate by the server name a client asked for (SNI).
//!
//! Order: an exact name, then a one-label wildcard (`*.example.com` matches
//! `a.example.com`, not `example.com` nor `a.b.example.com`), then the
//! default (the service's first certificate). A client that sends no name
//! gets the default. Among certificates claiming the same name, the first in
//! the configuration wins.

use std::collections::HashMap;
use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// Certificates of one `https` service, indexed by the names they are valid for.
#[derive(Debug)]
pub struct SniResolver {
    /// In configuration order; the first is the default.
    certs: Vec<Arc<CertifiedKey>>,
    /// Exact name (lower case) → index in `certs`.
    exact: HashMap<String, usize>,
    /// Wildcard suffix (`example.com` for `*.example.com`) → index in `certs`.
    wildcard: HashMap<String, usize>,
}

impl SniResolver {
    /// A resolver over `certs`, each with the DNS names it is valid for.
    /// `None` when `certs` is empty (there would be no default).
    pub fn new(certs: Vec<(Arc<CertifiedKey>, Vec<String>)>) -> Option<Self> {
        if certs.is_empty() {
            return None;
        }
        let mut exact = HashMap::new();
        let mut wildcard = HashMap::new();
        for (i, (_, names)) in certs.iter().enumerate() {
            for name in names {
                let name = name.to_ascii_lowercase();
                match name.strip_prefix("*.") {
                    Some(suffix) => wildcard.entry(suffix.to_string()).or_insert(i),
                    None => exact.entry(name).or_insert(i),
                };
            }
        }
        Some(SniResolver { certs: certs.into_iter().map(|(c, _)| c).collect(), exact, wildcard })
    }

    /// The index of the certificate served for `server_name` (`None`: no SNI).
    pub fn choose(&self, server_name: Option<&str>) -> usize {
        let Some(name) = server_name else { return 0 };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(&i) = self.exact.get(&name) {
            return i;
        }
        let suffix = name.split_once('.').map(|(_, rest)| rest).filter(|rest| !rest.is_empty());
        suffix.and_then(|s| self.wildcard.get(s).copied()).unwrap_or(0)
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.certs.get(self.choose(hello.server_name())).cloned()
    }
}
