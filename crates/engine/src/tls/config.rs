//! Building one `https` service's rustls server configuration from its
//! validated `tls` settings.
//!
//! Everything here is checked again even though validation already read the
//! files: a rustls refusal becomes a [`TlsError`] that refuses the start or
//! the reload, never a panic.

use std::sync::Arc;

use quinn::crypto::rustls::QuicServerConfig;
use rustls::crypto::aws_lc_rs::{self, kx_group, Ticketer};
use rustls::crypto::{CryptoProvider, SupportedKxGroup};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{
    NoServerSessionStorage, ProducesTickets, ResolvesServerCert, ServerSessionMemoryCache, StoresServerSessions,
    WebPkiClientVerifier,
};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig, SupportedCipherSuite, SupportedProtocolVersion};
use switchyard_config::{AcmeChallenge, CertKey, PemFile, ServerTls, TlsVersion};

use super::resolve::SniResolver;
use crate::acme::resolve::{AcmeResolver, ACME_TLS_ALPN};

/// Why a service's TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
#[error("service `{service}`: TLS: {why}")]
pub struct TlsError {
    /// Service name.
    pub service: String,
    /// What was wrong, with the file concerned.
    pub why: String,
}

/// Session resumption state, kept across reloads while the settings it
/// depends on do not change, so clients resume across a certificate reload.
#[derive(Debug, Clone)]
pub struct Resumption {
    /// Issues and decrypts session tickets (keys rotate); `None`: tickets off.
    pub ticketer: Option<Arc<dyn ProducesTickets>>,
    /// Server-side session cache; `None`: off.
    pub cache: Option<Arc<dyn StoresServerSessions>>,
}

impl Resumption {
    /// Fresh state for `tls`.
    pub fn new(tls: &ServerTls) -> Result<Self, String> {
        let ticketer = match tls.tickets {
            true => Some(Ticketer::new().map_err(|e| format!("cannot create the session ticketer: {e}"))?),
            false => None,
        };
        let cache = match tls.session_cache {
            0 => None,
            n => Some(ServerSessionMemoryCache::new(n) as Arc<dyn StoresServerSessions>),
        };
        Ok(Resumption { ticketer, cache })
    }
}

/// Whether a reload from `old` to `new` may keep the resumption state: every
/// setting but the certificates is the same (a session negotiated under other
/// versions, suites or client-certificate rules must not be resumed).
pub fn keeps_resumption(old: &ServerTls, new: &ServerTls) -> bool {
    old.min_version == new.min_version
        && old.ciphers == new.ciphers
        && old.groups == new.groups
        && old.tickets == new.tickets
        && old.session_cache == new.session_cache
        && old.client_auth == new.client_auth
}

/// The ALPN protocols offered, most preferred first.
pub fn alpn(http2: bool) -> Vec<Vec<u8>> {
    if http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    }
}

/// The rustls configuration of a service: certificates chosen by SNI,
/// versions, suites and groups, resumption and client authentication.
pub fn server_config(tls: &ServerTls, http2: bool, resumption: &Resumption) -> Result<ServerConfig, String> {
    server_config_with(tls, http2, resumption, None)
}

/// [`server_config`], with the certificates of an ACME account (`acme`:
/// its resolver) instead of files when the service's `tls` has `acme`.
pub fn server_config_with(
    tls: &ServerTls,
    http2: bool,
    resumption: &Resumption,
    acme: Option<AcmeResolver>,
) -> Result<ServerConfig, String> {
    let provider = Arc::new(provider(tls)?);
    let resolver: Arc<dyn ResolvesServerCert> = match acme {
        Some(acme) => Arc::new(acme),
        None => {
            let certs = tls
                .certificates
                .iter()
                .map(|ck| Ok((Arc::new(certified_key(ck, &provider)?), ck.names.clone())))
                .collect::<Result<Vec<_>, String>>()?;
            Arc::new(SniResolver::new(certs).ok_or("no certificate")?)
        }
    };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions(tls.min_version))
        .map_err(|e| format!("no usable cipher suite or group for the versions allowed: {e}"))?;
    let builder = match &tls.client_auth {
        None => builder.with_no_client_auth(),
        Some(auth) => {
            let roots = Arc::new(roots(&auth.ca)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider);
            let verifier = if auth.required { verifier } else { verifier.allow_unauthenticated() };
            let verifier = verifier.build().map_err(|e| format!("client CA {}: {e}", auth.ca.path.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = alpn(http2);
    if tls.acme.as_ref().is_some_and(|a| a.challenge == AcmeChallenge::TlsAlpn01) {
        // Last: never chosen over HTTP; only a validation offers it (alone).
        config.alpn_protocols.push(ACME_TLS_ALPN.to_vec());
    }
    config.session_storage = match &resumption.cache {
        Some(cache) => cache.clone(),
        None => Arc::new(NoServerSessionStorage {}),
    };
    match &resumption.ticketer {
        Some(ticketer) => config.ticketer = ticketer.clone(),
        // TLS 1.3 tickets are then stateful (the cache's ids); none at all
        // when there is no cache either.
        None if resumption.cache.is_none() => config.send_tls13_tickets = 0,
        None => {}
    }
    Ok(config)
}

/// The QUIC form of a service's TLS configuration: the same certificates,
/// suites, groups, resumption and client authentication, with ALPN `h3`,
/// TLS 1.3 (QUIC has no other), and early data (0-RTT) only with
/// `early_data` (`http3.early_data`: a replayed request could act twice, so
/// the HTTP/3 front end serves only safe requests from it).
///
/// With early data, QUIC resumption is stateful: rustls accepts 0-RTT only
/// for sessions from its session cache (`tls.session_cache`, which the
/// configuration requires then), each taken out when used, so a first
/// flight replayed to this process is not resumed. Its size is unbounded as
/// QUIC requires (RFC 9001 4.6.1); quinn's flow control bounds it.
pub fn quic_config(tcp: &ServerConfig, early_data: bool) -> Result<QuicServerConfig, String> {
    let mut config = tcp.clone();
    config.alpn_protocols = vec![b"h3".to_vec()];
    config.max_early_data_size = 0;
    if early_data {
        config.max_early_data_size = u32::MAX;
        config.ticketer = Arc::new(NoTickets);
        config.send_tls13_tickets = config.send_tls13_tickets.max(1);
    }
    QuicServerConfig::try_from(config)
        .map_err(|e| format!("HTTP/3: {e} (QUIC needs the TLS 1.3 suite TLS13_AES_128_GCM_SHA256 in `ciphers`)"))
}

/// No stateless tickets: TLS 1.3 tickets are the session cache's ids.
#[derive(Debug)]
struct NoTickets;

impl ProducesTickets for NoTickets {
    fn enabled(&self) -> bool {
        false
    }

    fn lifetime(&self) -> u32 {
        0
    }

    fn encrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
        None
    }

    fn decrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
        None
    }
}

fn versions(min: TlsVersion) -> &'static [&'static SupportedProtocolVersion] {
    static BOTH: [&SupportedProtocolVersion; 2] = [&rustls::version::TLS13, &rustls::version::TLS12];
    static TLS13_ONLY: [&SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
    match min {
        TlsVersion::V1_2 => &BOTH,
        TlsVersion::V1_3 => &TLS13_ONLY,
    }
}

/// The aws-lc-rs provider with the configured suites and groups (empty
/// lists keep its modern defaults), in the order configured.
fn provider(tls: &ServerTls) -> Result<CryptoProvider, String> {
    let mut provider = aws_lc_rs::default_provider();
    if !tls.ciphers.is_empty() {
        provider.cipher_suites = tls
            .ciphers
            .iter()
            .map(|name| suite(name).ok_or(format!("unknown cipher suite `{name}`")))
            .collect::<Result<_, _>>()?;
    }
    if !tls.groups.is_empty() {
        provider.kx_groups = tls
            .groups
            .iter()
            .map(|name| group(name).ok_or(format!("unknown key-exchange group `{name}`")))
            .collect::<Result<_, _>>()?;
    }
    Ok(provider)
}

/// A cipher suite of the provider by its rustls name.
pub fn suite(name: &str) -> Option<SupportedCipherSuite> {
    aws_lc_rs::ALL_CIPHER_SUITES
        .iter()
        .copied()
        .find(|s| s.suite().as_str().is_some_and(|n| n.eq_ignore_ascii_case(name)))
}

/// A key-exchange group by its configuration name.
pub fn group(name: &str) -> Option<&'static dyn SupportedKxGroup> {
    match name.to_ascii_lowercase().as_str() {
        "x25519" => Some(kx_group::X25519),
        "secp256r1" => Some(kx_group::SECP256R1),
        "secp384r1" => Some(kx_group::SECP384R1),
        "x25519mlkem768" => Some(kx_group::X25519MLKEM768),
        _ => None,
    }
}

fn certified_key(ck: &CertKey, provider: &CryptoProvider) -> Result<CertifiedKey, String> {
    let chain = certificates(&ck.certificate)?;
    let key = PrivateKeyDer::from_pem_slice(&ck.key.pem)
        .map_err(|e| format!("key {}: no private key ({e})", ck.key.path.display()))?;
    CertifiedKey::from_der(chain, key, provider)
        .map_err(|e| format!("certificate {} with key {}: {e}", ck.certificate.path.display(), ck.key.path.display()))
}

fn certificates(file: &PemFile) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain = CertificateDer::pem_slice_iter(&file.pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("certificate {}: {e}", file.path.display()))?;
    if chain.is_empty() {
        return Err(format!("certificate {}: no certificate in the file", file.path.display()));
    }
    Ok(chain)
}

fn roots(ca: &PemFile) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(ca)? {
        roots.add(cert).map_err(|e| format!("client CA {}: {e}", ca.path.display()))?;
    }
    Ok(roots)
}
