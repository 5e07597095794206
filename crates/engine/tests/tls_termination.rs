//! TLS termination in process: the engine started on a configuration built in
//! code (an `http` service turned `https`), a thread origin that answers with
//! the request head it received, and a rustls client.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, HandshakeKind, StreamOwned};
use switchyard_config::{CertKey, ClientAuth, Config, Mode, PemFile, ServerTls, TlsVersion};
use switchyard_engine::Change;

struct Ca(CertifiedIssuer<'static, KeyPair>);

impl Ca {
    fn new() -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, "test CA");
        Ca(CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("CA"))
    }

    fn server(&self, name: &str) -> (CertKey, CertificateDer<'static>) {
        let params = CertificateParams::new(vec![name.to_string()]).expect("params");
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.0).expect("sign");
        let ck = CertKey {
            certificate: PemFile { path: "s.crt".into(), pem: cert.pem().into_bytes() },
            key: PemFile { path: "s.key".into(), pem: key.serialize_pem().into_bytes() },
            names: vec![name.to_string()],
        };
        (ck, cert.der().clone())
    }

    fn client(&self, cn: &str) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.0).expect("sign");
        (vec![cert.der().clone()], PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())))
    }

    fn client_config(&self, cert: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>) -> Arc<ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.0.der().clone()).expect("root");
        let builder = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots);
        Arc::new(match cert {
            Some((chain, key)) => builder.with_client_auth_cert(chain, key).expect("client cert"),
            None => builder.with_no_client_auth(),
        })
    }
}

/// An origin answering every request with its head as the body.
fn origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut stream = stream;
                loop {
                    let mut head = String::new();
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        head.push_str(&line);
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let lower = head.to_ascii_lowercase();
                    let length = lower.lines().find_map(|l| l.strip_prefix("content-length:")?.trim().parse().ok());
                    let mut body = vec![0; length.unwrap_or(0)];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    // `GET /big` gets a megabyte after the head, so the response spans many TLS records.
                    let padding = if head.starts_with("GET /big ") { 1 << 20 } else { 0 };
                    let text = format!("{head}received {}\n", body.len());
                    let reply = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{text}", text.len() + padding);
                    if stream.write_all(reply.as_bytes()).is_err() || stream.write_all(&vec![b'x'; padding]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port")
}

fn config(listen: SocketAddr, server: SocketAddr, tls: ServerTls) -> Config {
    let text = format!(
        "[[service]]\nname = \"web\"\nlisten = \"{listen}\"\npool = \"p\"\n[[pool]]\nname = \"p\"\nservers = [{{ address = \"{server}\" }}]\n"
    );
    let mut config = switchyard_config::parse(&text, "t.toml").unwrap_or_else(|d| panic!("{d}"));
    config.services[0].mode = Mode::Https;
    config.services[0].tls = Some(tls);
    config
}

fn tls(certificates: Vec<CertKey>) -> ServerTls {
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

type Tls = StreamOwned<ClientConnection, TcpStream>;

fn connect(addr: SocketAddr, config: &Arc<ClientConfig>, name: &str) -> std::io::Result<Tls> {
    let name = ServerName::try_from(name.to_string()).expect("name");
    let conn = ClientConnection::new(config.clone(), name).expect("client");
    let stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut tls = StreamOwned::new(conn, stream);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock)?;
    }
    Ok(tls)
}

/// Sends one request and reads the response body (content-length framed).
fn get(tls: &mut Tls, extra: &str) -> std::io::Result<String> {
    write!(tls, "GET / HTTP/1.1\r\nhost: a.example\r\n{extra}\r\n")?;
    tls.flush()?;
    read_response(tls)
}

fn read_head(tls: &mut Tls) -> std::io::Result<String> {
    let mut head = Vec::new();
    let mut byte = [0u8];
    while !head.ends_with(b"\r\n\r\n") {
        tls.read_exact(&mut byte)?;
        head.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&head).to_ascii_lowercase())
}

fn read_response(tls: &mut Tls) -> std::io::Result<String> {
    let head = read_head(tls)?;
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("content-length");
    let mut body = vec![0; len];
    tls.read_exact(&mut body)?;
    Ok(String::from_utf8_lossy(&body).to_ascii_lowercase())
}

fn leaf(tls: &Tls) -> Vec<u8> {
    tls.conn.peer_certificates().and_then(|c| c.first()).map(|c| c.to_vec()).unwrap_or_default()
}

#[test]
fn https_requests_reach_the_server_and_a_reload_serves_the_new_certificate_with_resumption() {
    let ca = Ca::new();
    let (first, first_der) = ca.server("a.example");
    let (listen, server) = (free_addr(), origin());
    let engine = switchyard_engine::start(config(listen, server, tls(vec![first])), Some(1)).expect("start");
    let client = ca.client_config(None);

    let mut c = connect(listen, &client, "a.example").expect("handshake");
    assert_eq!(leaf(&c), first_der.to_vec());
    let seen = get(&mut c, "x-forwarded-proto: http\r\n").expect("first request");
    assert!(seen.contains("x-forwarded-proto: https"), "{seen}");
    assert!(!seen.contains("x-client-verify"), "no client auth: no client-certificate header");
    // Keep-alive over TLS, then a polite close: close_notify, so a read ends cleanly.
    get(&mut c, "").expect("second request on the same connection");
    get(&mut c, "connection: close\r\n").expect("third request");
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).expect("close_notify before the connection closes");

    let (second, second_der) = ca.server("a.example");
    let applied = engine.apply(Change::Reload(Box::new(config(listen, server, tls(vec![second])))));
    assert!(applied.is_ok(), "{applied:?}");
    let mut c = connect(listen, &client, "a.example").expect("handshake after reload");
    assert_eq!(c.conn.handshake_kind(), Some(HandshakeKind::Resumed), "ticket keys survive the reload");
    get(&mut c, "").expect("request after reload");
    // A client without a session to resume sees the new certificate.
    let mut c = connect(listen, &ca.client_config(None), "a.example").expect("full handshake after reload");
    assert_eq!(leaf(&c), second_der.to_vec(), "the reload read the new certificate");
    // A client's handshake can end before the server has counted its own:
    // an answered request means the server is past it.
    get(&mut c, "").expect("request on the new certificate");

    let counted = engine.control().generation().tls_handshakes.snapshot();
    assert_eq!((counted.full, counted.resumed, counted.failed), (2, 1, 0));

    // A build failure refuses the reload and keeps the running generation.
    let mut broken = tls(vec![ca.server("a.example").0]);
    broken.certificates[0].key.pem = b"garbage".to_vec();
    assert!(engine.apply(Change::Reload(Box::new(config(listen, server, broken)))).is_err());
    assert!(get(&mut connect(listen, &client, "a.example").expect("handshake"), "").is_ok());
    engine.shutdown();
    engine.join();
}

#[test]
fn bodies_and_interim_answers_cross_tls_whole() {
    let ca = Ca::new();
    let (listen, server) = (free_addr(), origin());
    let engine =
        switchyard_engine::start(config(listen, server, tls(vec![ca.server("a.example").0])), Some(1)).expect("start");
    let mut c = connect(listen, &ca.client_config(None), "a.example").expect("handshake");
    // 100-continue is answered by the proxy before the body is sent; the
    // body then goes up while the response may already come down.
    let body = vec![b'b'; 300_000];
    write!(c, "POST / HTTP/1.1\r\nhost: a\r\ncontent-length: {}\r\nexpect: 100-continue\r\n\r\n", body.len())
        .expect("head");
    c.flush().expect("flush");
    assert!(read_head(&mut c).expect("interim").starts_with("http/1.1 100"));
    c.write_all(&body).expect("body");
    c.flush().expect("flush");
    assert!(read_response(&mut c).expect("response").contains("received 300000"));
    write!(c, "GET /big HTTP/1.1\r\nhost: a\r\n\r\n").expect("request");
    c.flush().expect("flush");
    assert!(read_response(&mut c).expect("a megabyte").len() > 1 << 20);
    assert!(get(&mut c, "").is_ok(), "the connection is still in step");
    engine.shutdown();
    engine.join();
}

#[test]
fn a_garbage_client_hello_closes_only_its_connection() {
    let ca = Ca::new();
    let (listen, server) = (free_addr(), origin());
    let engine =
        switchyard_engine::start(config(listen, server, tls(vec![ca.server("a.example").0])), Some(1)).expect("start");
    let client = ca.client_config(None);
    let mut good = connect(listen, &client, "a.example").expect("handshake");
    get(&mut good, "").expect("before");
    let mut bad = TcpStream::connect(listen).expect("connect");
    bad.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    bad.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").expect("send garbage");
    let mut answer = Vec::new();
    let _ = bad.read_to_end(&mut answer);
    assert!(!answer.starts_with(b"HTTP/"), "plain HTTP is not answered on an https listener");
    get(&mut good, "").expect("the good connection keeps working");
    assert!(engine.control().generation().tls_handshakes.snapshot().failed >= 1);
    engine.shutdown();
    engine.join();
}

#[test]
fn client_certificates_are_required_and_forwarded() {
    let ca = Ca::new();
    let (listen, server) = (free_addr(), origin());
    let mut settings = tls(vec![ca.server("a.example").0]);
    let ca_pem = PemFile { path: "ca.pem".into(), pem: ca.0.pem().into_bytes() };
    settings.client_auth = Some(ClientAuth { ca: ca_pem.clone(), required: true });
    let engine = switchyard_engine::start(config(listen, server, settings.clone()), Some(1)).expect("start");

    let alice = ca.client_config(Some(ca.client("alice")));
    let mut c = connect(listen, &alice, "a.example").expect("accepted with a certificate");
    let seen = get(&mut c, "x-client-verify: FORGED\r\n").expect("request");
    assert!(seen.contains("x-client-verify: success"), "{seen}");
    assert!(seen.contains("x-client-cert-subject: cn=alice"), "{seen}");
    assert!(!seen.contains("forged"), "{seen}");

    let anonymous = ca.client_config(None);
    let refused = connect(listen, &anonymous, "a.example").and_then(|mut c| get(&mut c, ""));
    assert!(refused.is_err(), "required: no certificate, no request");

    settings.client_auth = Some(ClientAuth { ca: ca_pem, required: false });
    assert!(engine.apply(Change::Reload(Box::new(config(listen, server, settings)))).is_ok());
    let seen = get(&mut connect(listen, &anonymous, "a.example").expect("optional"), "").expect("request");
    assert!(seen.contains("x-client-verify: none"), "{seen}");
    engine.shutdown();
    engine.join();
}
