//! TLS termination units: certificate choice by server name and the rustls
//! configuration built from `tls` settings, checked with in-memory handshakes.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    PKCS_ECDSA_P256_SHA256,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, Connection, HandshakeKind, ProtocolVersion, ServerConnection};
use switchyard_config::{CertKey, ClientAuth, PemFile, ServerTls, TlsVersion};

use super::config::{self, alpn, keeps_resumption, server_config, Resumption};
use super::resolve::SniResolver;

/// A test CA issuing server and client certificates.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new() -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, "switchyard test CA");
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("key");
        Ca { issuer: CertifiedIssuer::self_signed(params, key).expect("CA") }
    }

    fn der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    fn pem(&self) -> PemFile {
        PemFile { path: "ca.pem".into(), pem: self.issuer.pem().into_bytes() }
    }

    /// A leaf for `names` (server) or with common name `cn` (client).
    fn leaf(&self, names: &[&str], client_cn: Option<&str>) -> (CertKey, CertificateDer<'static>, KeyPair) {
        let mut params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).expect("p");
        if let Some(cn) = client_cn {
            params.distinguished_name.push(DnType::CommonName, cn);
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        }
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        let ck = CertKey {
            certificate: PemFile { path: format!("{names:?}.crt").into(), pem: cert.pem().into_bytes() },
            key: PemFile { path: format!("{names:?}.key").into(), pem: key.serialize_pem().into_bytes() },
            names: names.iter().map(|n| n.to_string()).collect(),
        };
        (ck, cert.der().clone(), key)
    }
}

fn settings(certificates: Vec<CertKey>) -> ServerTls {
    ServerTls {
        certificates,
        acme: None,
        min_version: TlsVersion::V1_2,
        ciphers: Vec::new(),
        groups: Vec::new(),
        tickets: true,
        session_cache: 0,
        client_auth: None,
    }
}

fn build(tls: &ServerTls) -> Arc<rustls::ServerConfig> {
    let resumption = Resumption::new(tls).expect("resumption");
    Arc::new(server_config(tls, false, &resumption).expect("server config"))
}

fn client(ca: &Ca, versions: &[&'static rustls::SupportedProtocolVersion]) -> ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der()).expect("root");
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

const BOTH: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13, &rustls::version::TLS12];

/// Runs a handshake in memory, then delivers the server's post-handshake
/// messages (TLS 1.3 tickets) to the client.
fn handshake(
    server: Arc<rustls::ServerConfig>,
    client: Arc<ClientConfig>,
    name: &str,
) -> Result<(ServerConnection, ClientConnection), rustls::Error> {
    let name = ServerName::try_from(name.to_string()).expect("name");
    let mut s = Connection::Server(ServerConnection::new(server)?);
    let mut c = Connection::Client(ClientConnection::new(client, name)?);
    for _ in 0..8 {
        pass(&mut c, &mut s)?;
        pass(&mut s, &mut c)?;
        if !s.is_handshaking() && !c.is_handshaking() {
            pass(&mut s, &mut c)?;
            match (s, c) {
                (Connection::Server(s), Connection::Client(c)) => return Ok((s, c)),
                _ => unreachable!(),
            }
        }
    }
    Err(rustls::Error::General("handshake did not finish".into()))
}

fn pass(from: &mut Connection, to: &mut Connection) -> Result<(), rustls::Error> {
    let mut bytes = Vec::new();
    while from.wants_write() {
        from.write_tls(&mut bytes).expect("write to memory");
    }
    let mut rest = &bytes[..];
    while !rest.is_empty() {
        to.read_tls(&mut rest).expect("read from memory");
    }
    to.process_new_packets().map(|_| ())
}

fn leaf_names(conn: &ClientConnection) -> Vec<u8> {
    conn.peer_certificates().and_then(|c| c.first()).map(|c| c.to_vec()).unwrap_or_default()
}

#[test]
fn certificates_are_chosen_by_exact_name_then_wildcard_then_default() {
    let ca = Ca::new();
    let (default, default_der, _) = ca.leaf(&["default.example"], None);
    let (exact, exact_der, _) = ca.leaf(&["api.example.com"], None);
    let (wild, wild_der, _) = ca.leaf(&["*.example.com"], None);
    let tls = settings(vec![default, wild, exact]);
    let server = build(&tls);
    let cfg = Arc::new(client(&ca, BOTH));
    let served = |name: &str| leaf_names(&handshake(server.clone(), cfg.clone(), name).expect("handshake").1);
    assert_eq!(served("api.example.com"), exact_der.to_vec(), "an exact name wins over a wildcard listed before it");
    assert_eq!(served("www.example.com"), wild_der.to_vec(), "one label under the wildcard");
    assert_eq!(served("default.example"), default_der.to_vec());

    // Without a certificate for the name (or no name at all) the first one is served.
    let resolver =
        SniResolver::new(tls.certificates.iter().map(|ck| (Arc::new(ck_of(ck)), ck.names.clone())).collect::<Vec<_>>())
            .expect("resolver");
    assert_eq!(resolver.choose(None), 0);
    assert_eq!(resolver.choose(Some("a.b.example.com")), 0, "a wildcard covers one label only");
    assert_eq!(resolver.choose(Some("example.com")), 0, "nor the bare suffix");
    assert_eq!(resolver.choose(Some("WWW.Example.COM.")), 1, "names compare without case or final dot");
    assert_eq!(resolver.choose(Some("api.example.com")), 2);
    assert!(SniResolver::new(Vec::new()).is_none());
}

fn ck_of(ck: &CertKey) -> rustls::sign::CertifiedKey {
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    let chain = vec![CertificateDer::from_pem_slice(&ck.certificate.pem).expect("certificate")];
    let key = PrivateKeyDer::from_pem_slice(&ck.key.pem).expect("key");
    rustls::sign::CertifiedKey::from_der(chain, key, &provider).expect("certified key")
}

#[test]
fn min_version_and_suites_and_groups_are_applied() {
    let ca = Ca::new();
    let (leaf, _, _) = ca.leaf(&["a.example"], None);
    let tls12_only = Arc::new(client(&ca, &[&rustls::version::TLS12]));

    let mut tls = settings(vec![leaf]);
    let (s, _) = handshake(build(&tls), tls12_only.clone(), "a.example").expect("TLS 1.2 accepted by default");
    assert_eq!(s.protocol_version(), Some(ProtocolVersion::TLSv1_2));
    let (s, _) = handshake(build(&tls), Arc::new(client(&ca, BOTH)), "a.example").expect("TLS 1.3");
    assert_eq!(s.protocol_version(), Some(ProtocolVersion::TLSv1_3));

    tls.min_version = TlsVersion::V1_3;
    assert!(handshake(build(&tls), tls12_only, "a.example").is_err(), "min_version 1.3 refuses a 1.2-only client");

    tls.ciphers = vec!["TLS13_CHACHA20_POLY1305_SHA256".into()];
    tls.groups = vec!["secp384r1".into()];
    let (s, _) = handshake(build(&tls), Arc::new(client(&ca, BOTH)), "a.example").expect("handshake");
    assert_eq!(
        s.negotiated_cipher_suite().map(|c| c.suite()),
        Some(rustls::CipherSuite::TLS13_CHACHA20_POLY1305_SHA256)
    );
    assert_eq!(s.negotiated_key_exchange_group().map(|g| g.name()), Some(rustls::NamedGroup::secp384r1));

    // Refusals are errors, never panics.
    let resumption = Resumption::new(&tls).expect("resumption");
    tls.ciphers = vec!["TLS_NO_SUCH_SUITE".into()];
    assert!(server_config(&tls, false, &resumption).expect_err("refused").contains("TLS_NO_SUCH_SUITE"));
    tls.ciphers = vec!["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into()];
    assert!(server_config(&tls, false, &resumption).is_err(), "only TLS 1.2 suites with min_version 1.3");
    tls.ciphers.clear();
    tls.groups = vec!["ffdhe2048".into()];
    assert!(server_config(&tls, false, &resumption).expect_err("refused").contains("ffdhe2048"));
    assert!(config::group("X25519MLKEM768").is_some());
    assert!(config::suite("tls13_aes_128_gcm_sha256").is_some());
}

#[test]
fn a_key_that_does_not_match_its_certificate_is_an_error() {
    let ca = Ca::new();
    let (mut a, _, _) = ca.leaf(&["a.example"], None);
    let (b, _, _) = ca.leaf(&["b.example"], None);
    a.key = b.key.clone();
    let tls = settings(vec![a]);
    let err = server_config(&tls, false, &Resumption::new(&tls).expect("r")).expect_err("refused");
    assert!(err.contains("a.example"), "{err}");
    let mut garbage = settings(vec![b]);
    garbage.certificates[0].certificate.pem = b"not a certificate".to_vec();
    assert!(server_config(&garbage, false, &Resumption::new(&garbage).expect("r")).is_err());
}

#[test]
fn resumption_follows_tickets_and_session_cache() {
    let ca = Ca::new();
    let (leaf, _, _) = ca.leaf(&["a.example"], None);
    for (tickets, cache, resumes) in [(true, 0, true), (false, 64, true), (false, 0, false)] {
        for versions in [&[&rustls::version::TLS13][..], &[&rustls::version::TLS12][..]] {
            let mut tls = settings(vec![leaf.clone()]);
            (tls.tickets, tls.session_cache) = (tickets, cache);
            let server = build(&tls);
            let cfg = Arc::new(client(&ca, versions));
            let (_, first) = handshake(server.clone(), cfg.clone(), "a.example").expect("first");
            assert_eq!(first.handshake_kind(), Some(HandshakeKind::Full));
            let (s, c) = handshake(server, cfg, "a.example").expect("second");
            let kind = if resumes { HandshakeKind::Resumed } else { HandshakeKind::Full };
            let what = format!("tickets {tickets}, cache {cache}, {versions:?}");
            assert_eq!(c.handshake_kind(), Some(kind), "{what}");
            assert_eq!(s.handshake_kind(), Some(kind), "{what}");
        }
    }
}

#[test]
fn reloads_keep_resumption_state_only_when_settings_allow() {
    let ca = Ca::new();
    let (a, _, _) = ca.leaf(&["a.example"], None);
    let (b, _, _) = ca.leaf(&["a.example"], None);
    let old = settings(vec![a]);
    let mut new = settings(vec![b]);
    assert!(keeps_resumption(&old, &new), "a certificate change keeps tickets and cache");
    new.min_version = TlsVersion::V1_3;
    assert!(!keeps_resumption(&old, &new));
    let mut auth = old.clone();
    auth.client_auth = Some(ClientAuth { ca: ca.pem(), required: true });
    assert!(!keeps_resumption(&old, &auth));
}

#[test]
fn alpn_offers_h2_only_when_asked() {
    assert_eq!(alpn(true), vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
    assert_eq!(alpn(false), vec![b"http/1.1".to_vec()]);
}

#[test]
fn client_certificates_are_verified_and_their_subject_read() {
    let ca = Ca::new();
    let (leaf, _, _) = ca.leaf(&["a.example"], None);
    let (_, alice, alice_key) = ca.leaf(&[], Some("alice"));
    let mut tls = settings(vec![leaf]);
    tls.client_auth = Some(ClientAuth { ca: ca.pem(), required: true });
    let with_cert = {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.der()).expect("root");
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(alice_key.serialize_der()));
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .with_protocol_versions(BOTH)
            .expect("versions")
            .with_root_certificates(roots)
            .with_client_auth_cert(vec![alice], key)
            .expect("client cert")
    };
    let (s, _) = handshake(build(&tls), Arc::new(with_cert), "a.example").expect("accepted with a certificate");
    let facts = super::transport(&s);
    assert!(facts.client_cert_verified && facts.secure);
    assert!(facts.client_cert_subject.contains("CN=alice"), "{}", facts.client_cert_subject);
    assert!(handshake(build(&tls), Arc::new(client(&ca, BOTH)), "a.example").is_err(), "required: refused without");

    tls.client_auth = Some(ClientAuth { ca: ca.pem(), required: false });
    let (s, _) = handshake(build(&tls), Arc::new(client(&ca, BOTH)), "a.example").expect("optional: accepted");
    let facts = super::transport(&s);
    assert!(!facts.client_cert_verified && facts.client_cert_subject.is_empty());
}
