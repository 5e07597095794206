//! The generator's TLS client configuration (rustls with the aws-lc-rs provider).
//!
//! One [`ClientConfig`] is built per run and shared by every connection of every thread,
//! so with resumption on, a session ticket obtained by one connection can be used by any
//! other. With resumption off there is no session cache at all and no tickets are
//! accepted: every handshake is a full one.

use std::io;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::crypto::{aws_lc_rs, CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::spec::{KxGroup, Protocol, TlsSpec};

/// Where the system's CA bundle is looked for when certificates are verified.
const CA_BUNDLES: &[&str] = &["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"];

/// TLS 1.3 suites in the order Chrome and Firefox offer them (the generator's own
/// preference); a suite not listed keeps rustls's order after these.
const BROWSER_ORDER: &[rustls::CipherSuite] = &[
    rustls::CipherSuite::TLS13_AES_128_GCM_SHA256,
    rustls::CipherSuite::TLS13_AES_256_GCM_SHA384,
    rustls::CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
];

/// The rustls client configuration for `tls` and `protocol` (ALPN `http/1.1`, `h2` or
/// `h3`; TLS 1.3 alone for `h3`).
pub fn client_config(tls: &TlsSpec, protocol: Protocol) -> io::Result<Arc<ClientConfig>> {
    let group = match tls.group {
        KxGroup::X25519 => aws_lc_rs::kx_group::X25519,
        KxGroup::P256 => aws_lc_rs::kx_group::SECP256R1,
        KxGroup::X25519MlKem768 => aws_lc_rs::kx_group::X25519MLKEM768,
    };
    // TLS 1.3 suites in the order browsers offer them (AES-128 first), then TLS 1.2's:
    // every target that honours the client's order negotiates the same suite.
    let mut cipher_suites = aws_lc_rs::default_provider().cipher_suites;
    cipher_suites
        .sort_by_key(|s| (s.version() != &rustls::version::TLS13, BROWSER_ORDER.iter().position(|&n| n == s.suite())));
    let provider = Arc::new(CryptoProvider { kx_groups: vec![group], cipher_suites, ..aws_lc_rs::default_provider() });
    // QUIC is TLS 1.3 only (RFC 9001).
    let versions: &[&rustls::SupportedProtocolVersion] = match protocol {
        Protocol::Http3 => &[&rustls::version::TLS13],
        _ => rustls::DEFAULT_VERSIONS,
    };
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(versions)
        .map_err(io::Error::other)?;
    let mut config = if tls.insecure {
        let verifier = AcceptAnyCertificate { algorithms: provider.signature_verification_algorithms };
        builder.dangerous().with_custom_certificate_verifier(Arc::new(verifier)).with_no_client_auth()
    } else {
        builder.with_root_certificates(system_roots()).with_no_client_auth()
    };
    config.alpn_protocols = vec![match protocol {
        Protocol::Http1 => b"http/1.1".to_vec(),
        Protocol::Http2 => b"h2".to_vec(),
        Protocol::Http3 => b"h3".to_vec(),
    }];
    if !tls.resume {
        config.resumption = Resumption::disabled();
    }
    Ok(Arc::new(config))
}

/// The server name sent in SNI (a DNS name or an IP address).
pub fn server_name(tls: &TlsSpec) -> io::Result<ServerName<'static>> {
    ServerName::try_from(tls.server_name.clone())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("TLS server name {:?}: {e}", tls.server_name)))
}

/// The system's trusted CAs; empty when no bundle is found (every handshake then fails,
/// which the run reports as errors).
fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    for path in CA_BUNDLES {
        if let Ok(certs) = CertificateDer::pem_file_iter(path) {
            roots.add_parsable_certificates(certs.flatten());
            break;
        }
    }
    roots
}

/// Accepts any certificate chain, for any name. Benchmarks run against generated
/// self-signed certificates, so the chain cannot be verified; the handshake signature
/// still is, so the client does the same cryptographic work as a real one.
#[derive(Debug)]
struct AcceptAnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AcceptAnyCertificate {
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
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
