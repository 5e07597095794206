//! TLS towards servers (re-encryption): one `rustls` client configuration per
//! pool, built with each generation, and the handshake after connect.
//!
//! A pool's [`PoolTls`] is built from the validated configuration, whose
//! [`PemFile`]s hold the file contents read at validation: a reload that reads
//! changed CA or certificate files builds a new one. A reload that leaves a
//! pool's `tls` equal keeps its client configuration, and with it the session
//! cache, so resumed sessions survive reloads.
//!
//! Verification is on unless `verify = false`, which accepts any certificate
//! but still checks the handshake signatures (the peer must hold the key of
//! the certificate it sent); that choice is logged as a warning when the pool's
//! configuration is built. The name verified (and sent as SNI) is
//! `server_name`, else the server's IP address, which is matched against the
//! certificate's IP names and never sent as SNI.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
#[cfg(test)]
use switchyard_config::CertKey;
use switchyard_config::{PemFile, Pool, UpstreamProtocol, UpstreamTls};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// Where the system trust store is looked for when a pool names no `ca`
/// (Debian/Ubuntu, Fedora/RHEL, Alpine and others); `SSL_CERT_FILE` first.
const SYSTEM_BUNDLES: [&str; 3] =
    ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"];

/// Resumable sessions kept per pool, at least; more for large pools.
const MIN_SESSIONS: usize = 256;

/// Why a pool's TLS client configuration could not be built.
#[derive(Debug, thiserror::Error)]
#[error("pool `{pool}`: TLS towards servers: {why}")]
pub struct TlsSetupError {
    /// The pool.
    pub pool: String,
    /// What is wrong.
    pub why: String,
}

/// A pool's TLS client side: the shared `rustls` configuration (with its
/// session cache) and, per server, the name sent and verified.
#[derive(Clone)]
pub struct PoolTls {
    connector: TlsConnector,
    config: Arc<ClientConfig>,
    /// Indexed like the pool's servers.
    names: Vec<ServerName<'static>>,
}

impl fmt::Debug for PoolTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolTls").field("names", &self.names).finish_non_exhaustive()
    }
}

impl PoolTls {
    /// The TLS side of `pool`, or `None` for a clear-text pool. `previous` is
    /// the pool's TLS side in the generation before, with the `tls` settings
    /// it was built from: equal settings keep its configuration and sessions.
    pub fn for_pool(pool: &Pool, previous: Option<(&UpstreamTls, &PoolTls)>) -> Result<Option<Self>, TlsSetupError> {
        let Some(tls) = &pool.tls else {
            return Ok(None);
        };
        let fail = |why: String| TlsSetupError { pool: pool.name.clone(), why };
        let alpn = alpn(pool.protocol);
        let config = match previous {
            Some((before, kept)) if before == tls && kept.config.alpn_protocols == alpn => kept.config.clone(),
            _ => Arc::new(client_config(tls, pool.servers.len(), alpn).map_err(fail)?),
        };
        if !tls.verify && previous.is_none_or(|(before, _)| before.verify) {
            tracing::warn!(pool = %pool.name, "TLS towards servers does not verify their certificates (verify = false)");
        }
        let names = pool
            .servers
            .iter()
            .map(|server| server_name(tls.server_name.as_deref(), server.addr))
            .collect::<Result<_, _>>()
            .map_err(fail)?;
        Ok(Some(PoolTls { connector: TlsConnector::from(config.clone()), config, names }))
    }

    /// Runs the handshake with server `server` of the pool over `tcp`.
    pub async fn handshake(&self, server: usize, tcp: TcpStream) -> std::io::Result<TlsStream<TcpStream>> {
        let Some(name) = self.names.get(server) else {
            return Err(std::io::Error::other("no such server in the pool"));
        };
        self.connector.connect(name.clone(), tcp).await
    }
}

/// The name verified for a server: `server_name` (a DNS name, or an IP
/// literal), else the server's IP address.
fn server_name(configured: Option<&str>, addr: SocketAddr) -> Result<ServerName<'static>, String> {
    match configured {
        Some(name) => {
            ServerName::try_from(name.to_string()).map_err(|_| format!("`{name}` is not a valid server name"))
        }
        None => Ok(ServerName::from(addr.ip())),
    }
}

/// The ALPN protocol offered for a pool's `protocol`: only the one the
/// pool speaks, so a server that cannot speak it fails the handshake or
/// selects nothing (checked after the handshake for `h2`).
fn alpn(protocol: UpstreamProtocol) -> Vec<Vec<u8>> {
    match protocol {
        UpstreamProtocol::Http1 => vec![b"http/1.1".to_vec()],
        UpstreamProtocol::Http2 => vec![b"h2".to_vec()],
    }
}

/// The `rustls` client configuration of one pool's `tls` settings.
fn client_config(tls: &UpstreamTls, servers: usize, alpn: Vec<Vec<u8>>) -> Result<ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if tls.verify {
        builder.with_root_certificates(roots(tls.ca.as_ref())?)
    } else {
        builder.dangerous().with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
    };
    let mut config = match &tls.client_cert {
        Some(pair) => {
            let chain = certificates(&pair.certificate)?;
            let key = PrivateKeyDer::from_pem_slice(&pair.key.pem)
                .map_err(|e| format!("{}: no usable private key ({e})", pair.key.path.display()))?;
            builder.with_client_auth_cert(chain, key).map_err(|e| format!("client certificate: {e}"))?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn;
    config.resumption = Resumption::in_memory_sessions(MIN_SESSIONS.max(servers * 4));
    Ok(config)
}

/// Every certificate of a PEM file, in order.
fn certificates(file: &PemFile) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(&file.pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", file.path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate found", file.path.display()));
    }
    Ok(certs)
}

/// The trust anchors: the pool's `ca` file, else the system trust store.
fn roots(ca: Option<&PemFile>) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    match ca {
        Some(file) => {
            for cert in certificates(file)? {
                roots.add(cert).map_err(|e| format!("{}: {e}", file.path.display()))?;
            }
        }
        None => {
            let (path, pem) = system_bundle()?;
            let certs = CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok);
            let (added, _ignored) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(format!("the system trust store {path} holds no usable certificate; set `ca`"));
            }
        }
    }
    Ok(roots)
}

/// The first system CA bundle found, with its path.
fn system_bundle() -> Result<(String, Vec<u8>), String> {
    let from_env = std::env::var("SSL_CERT_FILE").ok();
    for path in from_env.iter().map(String::as_str).chain(SYSTEM_BUNDLES) {
        if let Ok(pem) = std::fs::read(path) {
            return Ok((path.to_string(), pem));
        }
    }
    Err(format!("no system trust store found (looked at {}); set `ca`", SYSTEM_BUNDLES.join(", ")))
}

/// `verify = false`: any certificate is accepted, but the handshake's
/// signatures are still checked against it, so the peer must hold its key.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(tls: UpstreamTls) -> Pool {
        let text = "[[service]]\nname = \"s\"\nlisten = \"127.0.0.1:1\"\npool = \"p\"\n[[pool]]\nname = \"p\"\n\
                    servers = [{ address = \"127.0.0.1:9001\" }, { address = \"[::1]:9002\" }]\n";
        let mut config = switchyard_config::parse(text, "t.toml").expect("valid");
        let mut pool = config.pools.remove(0);
        pool.tls = Some(tls);
        pool
    }

    fn pem(text: &str) -> PemFile {
        PemFile { path: "test.pem".into(), pem: text.as_bytes().to_vec() }
    }

    fn ca_pem() -> String {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).expect("CA").pem()
    }

    fn tls(ca: Option<PemFile>, server_name: Option<&str>) -> UpstreamTls {
        UpstreamTls { verify: true, ca, server_name: server_name.map(String::from), client_cert: None }
    }

    #[test]
    fn names_are_the_server_name_or_each_servers_ip() {
        let by_ip = PoolTls::for_pool(&pool(tls(Some(pem(&ca_pem())), None)), None).expect("builds").expect("tls");
        assert_eq!(by_ip.names[0], ServerName::from(std::net::IpAddr::from([127, 0, 0, 1])));
        assert_eq!(by_ip.names[1], ServerName::from(std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST)));
        let named =
            PoolTls::for_pool(&pool(tls(Some(pem(&ca_pem())), Some("api.test"))), None).expect("builds").expect("tls");
        assert!(named.names.iter().all(|n| n.to_str() == "api.test"));
        assert_eq!(named.config.alpn_protocols, vec![b"http/1.1".to_vec()]);
        let mut h2 = pool(tls(Some(pem(&ca_pem())), None));
        h2.protocol = UpstreamProtocol::Http2;
        let h2 = PoolTls::for_pool(&h2, None).expect("builds").expect("tls");
        assert_eq!(h2.config.alpn_protocols, vec![b"h2".to_vec()]);
    }

    #[test]
    fn unchanged_settings_keep_the_client_configuration_and_its_sessions() {
        let settings = tls(Some(pem(&ca_pem())), None);
        let first = PoolTls::for_pool(&pool(settings.clone()), None).expect("builds").expect("tls");
        let kept = PoolTls::for_pool(&pool(settings.clone()), Some((&settings, &first))).expect("builds").expect("tls");
        assert!(Arc::ptr_eq(&first.config, &kept.config));
        // New CA contents under the same path: a new configuration.
        let changed = tls(Some(pem(&ca_pem())), None);
        let rebuilt = PoolTls::for_pool(&pool(changed), Some((&settings, &first))).expect("builds").expect("tls");
        assert!(!Arc::ptr_eq(&first.config, &rebuilt.config));
    }

    #[test]
    fn unusable_key_material_is_refused_with_the_pool_and_file() {
        let bad_ca = tls(Some(pem("not a certificate")), None);
        let e = PoolTls::for_pool(&pool(bad_ca), None).expect_err("no certificate");
        assert!(e.to_string().contains("pool `p`") && e.to_string().contains("test.pem"), "{e}");
        let cert = rcgen::generate_simple_self_signed(vec!["proxy.test".to_string()]).expect("cert");
        let other_key = rcgen::KeyPair::generate().expect("key");
        let mismatched = CertKey {
            certificate: pem(&cert.cert.pem()),
            key: pem(&other_key.serialize_pem()),
            names: vec!["proxy.test".into()],
        };
        let with_cert = UpstreamTls { client_cert: Some(mismatched), ..tls(Some(pem(&ca_pem())), None) };
        assert!(PoolTls::for_pool(&pool(with_cert), None).is_err(), "key does not match the certificate");
        let bad_name = tls(Some(pem(&ca_pem())), Some("not a name!"));
        assert!(PoolTls::for_pool(&pool(bad_name), None).is_err());
    }

    #[test]
    fn verify_false_needs_no_trust_store() {
        let off = UpstreamTls { verify: false, ca: None, server_name: None, client_cert: None };
        assert!(PoolTls::for_pool(&pool(off), None).expect("builds").is_some());
    }
}
