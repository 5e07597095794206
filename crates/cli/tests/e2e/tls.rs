//! TLS termination end to end: `https` services of the real binary in front of the
//! origin simulator, with certificates generated at test time (rcgen) and a rustls
//! client: SNI, resumption, versions, client certificates, certificate reload under
//! traffic, a garbage ClientHello, redirect to HTTPS and HSTS, and curl.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    PKCS_ECDSA_P256_SHA256, PKCS_RSA_SHA256,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, HandshakeKind, StreamOwned};

/// A test CA that writes its certificates as PEM files into one directory.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
    dir: PathBuf,
}

impl Ca {
    fn new() -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, "switchyard e2e CA");
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("CA");
        let dir = temp_dir("tls");
        std::fs::write(dir.join("ca.pem"), issuer.pem()).expect("write CA");
        Ca { issuer, dir }
    }

    fn ca_path(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A server certificate for `names` written to `FILE.crt` / `FILE.key` (atomically,
    /// so a reload never reads half a file); returns the certificate.
    fn server(&self, file: &str, names: &[&str], rsa: bool) -> CertificateDer<'static> {
        let params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).expect("p");
        let alg = if rsa { &PKCS_RSA_SHA256 } else { &PKCS_ECDSA_P256_SHA256 };
        let key = if rsa {
            KeyPair::generate_rsa_for(alg, rcgen::RsaKeySize::_2048).expect("rsa key")
        } else {
            KeyPair::generate_for(alg).expect("key")
        };
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        for (ext, text) in [("crt", cert.pem()), ("key", key.serialize_pem())] {
            let tmp = self.dir.join(format!("{file}.{ext}.tmp"));
            std::fs::write(&tmp, text).expect("write");
            std::fs::rename(&tmp, self.dir.join(format!("{file}.{ext}"))).expect("rename");
        }
        cert.der().clone()
    }

    fn path(&self, file: &str, ext: &str) -> String {
        self.dir.join(format!("{file}.{ext}")).display().to_string()
    }

    /// `{ certificate = "...", key = "..." }` for a file written by [`Ca::server`].
    fn pair(&self, file: &str) -> String {
        format!("{{ certificate = \"{}\", key = \"{}\" }}", self.path(file, "crt"), self.path(file, "key"))
    }

    /// A client configuration trusting this CA, presenting a certificate for `cn` if given,
    /// limited to `versions` (all when empty).
    fn client(&self, cn: Option<&str>, versions: &[&'static rustls::SupportedProtocolVersion]) -> Arc<ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.issuer.der().clone()).expect("root");
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = ClientConfig::builder_with_provider(provider);
        let builder = match versions {
            [] => builder.with_safe_default_protocol_versions(),
            v => builder.with_protocol_versions(v),
        }
        .expect("versions")
        .with_root_certificates(roots);
        let config = match cn {
            None => builder.with_no_client_auth(),
            Some(cn) => {
                let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
                params.distinguished_name.push(DnType::CommonName, cn);
                params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
                let key = KeyPair::generate().expect("key");
                let cert = params.signed_by(&key, &self.issuer).expect("sign");
                let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
                builder.with_client_auth_cert(vec![cert.der().clone()], key).expect("client certificate")
            }
        };
        Arc::new(config)
    }
}

type Tls = StreamOwned<ClientConnection, TcpStream>;

/// Connects and completes the handshake (`name` an IP address: no SNI is sent).
fn connect(addr: SocketAddr, config: &Arc<ClientConfig>, name: &str) -> std::io::Result<Tls> {
    let name = ServerName::try_from(name.to_string()).expect("server name");
    let conn = ClientConnection::new(config.clone(), name).map_err(std::io::Error::other)?;
    let stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(PATIENCE))?;
    let mut tls = StreamOwned::new(conn, stream);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock)?;
    }
    Ok(tls)
}

/// One GET on an open connection: (status, lower-cased head, body).
fn get(tls: &mut Tls, path: &str, headers: &str) -> std::io::Result<(u16, String, String)> {
    write!(tls, "GET {path} HTTP/1.1\r\nhost: a.example\r\n{headers}\r\n")?;
    tls.flush()?;
    let mut head = Vec::new();
    let mut byte = [0u8];
    while !head.ends_with(b"\r\n\r\n") {
        tls.read_exact(&mut byte)?;
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let status = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let len: usize =
        head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    let mut body = vec![0; len];
    tls.read_exact(&mut body)?;
    Ok((status, head, String::from_utf8_lossy(&body).into_owned()))
}

/// A fresh connection, one request; the status and body.
fn fetch(addr: SocketAddr, config: &Arc<ClientConfig>, path: &str) -> std::io::Result<(u16, String)> {
    let mut tls = connect(addr, config, "a.example")?;
    get(&mut tls, path, "").map(|(status, _, body)| (status, body))
}

/// The values of header `name` in the origin's `/__origin/request` report.
fn seen(body: &str, name: &str) -> Vec<String> {
    let json: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let headers = json["headers"].as_array().cloned().unwrap_or_default();
    headers
        .iter()
        .filter(|pair| pair[0].as_str().is_some_and(|n| n.eq_ignore_ascii_case(name)))
        .map(|pair| pair[1].as_str().unwrap_or_default().to_string())
        .collect()
}

fn leaf(tls: &Tls) -> Vec<u8> {
    tls.conn.peer_certificates().and_then(|c| c.first()).map(|c| c.to_vec()).unwrap_or_default()
}

/// An `https` service block.
fn https(name: &str, listen: SocketAddr, tls: &str, extra: &str) -> String {
    format!(
        "\n[[service]]\nname = \"{name}\"\nmode = \"https\"\nlisten = \"{listen}\"\npool = \"main\"\ntls = {tls}\n{extra}\n"
    )
}

fn proxy(services: &str, origin: &Origin, first: SocketAddr) -> Proxy {
    let config = format!(
        "workers = 1\ndrain_timeout = \"2s\"\n{services}\n[[pool]]\nname = \"main\"\nservers = [{{ address = \"{}\" }}]\n",
        origin.addr
    );
    Proxy::start(&config, first)
}

#[test]
fn sni_chooses_the_rsa_or_the_ecdsa_certificate() {
    let ca = Ca::new();
    let rsa = ca.server("rsa", &["rsa.example", "127.0.0.1"], true);
    let ecdsa = ca.server("ec", &["ec.example", "*.wild.example"], false);
    let origin = Origin::start("origin");
    let listen = proxy_addr();
    let tls = format!("{{ certificates = [{}, {}] }}", ca.pair("rsa"), ca.pair("ec"));
    let _proxy = proxy(&https("web", listen, &tls, ""), &origin, listen);
    let client = ca.client(None, &[]);
    for (name, expected) in
        [("rsa.example", &rsa), ("ec.example", &ecdsa), ("x.wild.example", &ecdsa), ("127.0.0.1", &rsa)]
    {
        let mut c = connect(listen, &client, name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(leaf(&c), expected.to_vec(), "{name}");
        let (status, head, _) = get(&mut c, "/", "").expect("request");
        assert_eq!((status, head.contains("x-origin: origin")), (200, true), "{name}");
    }
}

#[test]
fn resumption_by_tickets_or_session_cache_and_none_when_off() {
    let ca = Ca::new();
    ca.server("a", &["a.example"], false);
    let origin = Origin::start("origin");
    let (tickets, cache, off) = (proxy_addr(), proxy_addr(), proxy_addr());
    let pair = ca.pair("a");
    let services = https("tickets", tickets, &format!("{{ certificates = [{pair}], session_cache = false }}"), "")
        + &https("cache", cache, &format!("{{ certificates = [{pair}], tickets = false, session_cache = 100 }}"), "")
        + &https("off", off, &format!("{{ certificates = [{pair}], tickets = false, session_cache = false }}"), "");
    let _proxy = proxy(&services, &origin, tickets);
    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        for (listen, resumes) in [(tickets, true), (cache, true), (off, false)] {
            let client = ca.client(None, &[version]);
            let what = format!("{listen} {version:?}");
            let mut first = connect(listen, &client, "a.example").expect("first");
            // The request lets the TLS 1.3 tickets, sent after the handshake, arrive.
            assert_eq!(get(&mut first, "/", "").expect("request").0, 200);
            assert_eq!(first.conn.handshake_kind(), Some(HandshakeKind::Full), "{what}");
            let mut second = connect(listen, &client, "a.example").expect("second");
            let kind = if resumes { HandshakeKind::Resumed } else { HandshakeKind::Full };
            assert_eq!(second.conn.handshake_kind(), Some(kind), "{what}");
            assert_eq!(get(&mut second, "/", "").expect("request").0, 200);
        }
    }
}

#[test]
fn tls_12_and_13_work_and_min_version_13_refuses_a_12_only_client() {
    let ca = Ca::new();
    ca.server("a", &["a.example"], false);
    let origin = Origin::start("origin");
    let (any, modern) = (proxy_addr(), proxy_addr());
    let pair = ca.pair("a");
    let services = https("any", any, &format!("{{ certificates = [{pair}] }}"), "")
        + &https("modern", modern, &format!("{{ certificates = [{pair}], min_version = \"1.3\" }}"), "");
    let _proxy = proxy(&services, &origin, any);
    let v12 = ca.client(None, &[&rustls::version::TLS12]);
    let v13 = ca.client(None, &[&rustls::version::TLS13]);
    for (listen, client, ok) in [(any, &v12, true), (any, &v13, true), (modern, &v13, true), (modern, &v12, false)] {
        let answer = fetch(listen, client, "/");
        assert_eq!(answer.is_ok(), ok, "{listen}: {answer:?}");
    }
}

#[test]
fn client_certificates_required_optional_and_forwarded() {
    let ca = Ca::new();
    ca.server("a", &["a.example"], false);
    let origin = Origin::start("origin");
    let (required, optional) = (proxy_addr(), proxy_addr());
    let (pair, ca_pem) = (ca.pair("a"), ca.ca_path().display().to_string());
    let services = https(
        "required",
        required,
        &format!("{{ certificates = [{pair}], client_auth = {{ ca = \"{ca_pem}\", required = true }} }}"),
        "",
    ) + &https(
        "optional",
        optional,
        &format!("{{ certificates = [{pair}], client_auth = {{ ca = \"{ca_pem}\", required = false }} }}"),
        "rules = [{ path_prefix = \"/private\", client_cert = \"absent\", deny = true }]",
    );
    let _proxy = proxy(&services, &origin, required);
    let (alice, anonymous) = (ca.client(Some("alice"), &[]), ca.client(None, &[]));

    let mut c = connect(required, &alice, "a.example").expect("a good certificate is accepted");
    let (status, _, body) = get(&mut c, "/__origin/request", "x-client-verify: FORGED\r\n").expect("request");
    assert_eq!(status, 200);
    assert_eq!(seen(&body, "x-client-verify"), ["SUCCESS"], "the client's own value is replaced");
    assert!(seen(&body, "x-client-cert-subject").concat().contains("CN=alice"), "{body}");
    assert!(fetch(required, &anonymous, "/").is_err(), "required: refused without a certificate");

    assert_eq!(fetch(optional, &anonymous, "/private/x").expect("optional").0, 403, "absent → denied");
    assert_eq!(fetch(optional, &alice, "/private/x").expect("optional").0, 200, "verified → served");
    let (_, body) = fetch(optional, &anonymous, "/__origin/request").expect("request");
    assert_eq!(seen(&body, "x-client-verify"), ["NONE"]);
    assert_eq!(seen(&body, "x-forwarded-proto"), ["https"]);
}

#[test]
fn certificates_reload_under_traffic_without_a_failed_request() {
    let ca = Ca::new();
    let before = ca.server("a", &["a.example"], false);
    let origin = Origin::start("origin");
    let listen = proxy_addr();
    let proxy = proxy(&https("web", listen, &format!("{{ certificates = [{}] }}", ca.pair("a")), ""), &origin, listen);
    let client = ca.client(None, &[]);
    assert_eq!(leaf(&connect(listen, &client, "a.example").expect("before")), before.to_vec());

    let (stop, done, failed) =
        (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let traffic = {
        let (stop, done, failed, client) = (stop.clone(), done.clone(), failed.clone(), client.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // A new connection each time (full or resumed handshakes).
                match fetch(listen, &client, "/") {
                    Ok((200, _)) => done.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        })
    };
    wait_for("traffic before the reload", || (done.load(Ordering::Relaxed) > 5).then_some(()));
    let after = ca.server("a", &["a.example"], false);
    proxy.reload(1);
    let reloaded = done.load(Ordering::Relaxed);
    wait_for("traffic after the reload", || (done.load(Ordering::Relaxed) > reloaded + 5).then_some(()));
    stop.store(true, Ordering::Relaxed);
    traffic.join().expect("traffic thread");
    assert!(proxy.log().contains("configuration reloaded"), "{}", proxy.log());
    assert_eq!(failed.load(Ordering::Relaxed), 0, "requests failed during the reload:\n{}", proxy.log());
    // A client with no session to resume sees the new certificate.
    let fresh = ca.client(None, &[]);
    assert_eq!(leaf(&connect(listen, &fresh, "a.example").expect("after")), after.to_vec());
}

#[test]
fn a_garbage_client_hello_closes_only_its_connection() {
    let ca = Ca::new();
    ca.server("a", &["a.example"], false);
    let origin = Origin::start("origin");
    let listen = proxy_addr();
    let _proxy = proxy(&https("web", listen, &format!("{{ certificates = [{}] }}", ca.pair("a")), ""), &origin, listen);
    let client = ca.client(None, &[]);
    let mut good = connect(listen, &client, "a.example").expect("handshake");
    assert_eq!(get(&mut good, "/", "").expect("before").0, 200);
    for garbage in [&b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"[..], b"\x16\x03\x01\x00\x05hello", &[0xff; 4096]] {
        let mut bad = TcpStream::connect(listen).expect("connect");
        bad.set_read_timeout(Some(PATIENCE)).expect("timeout");
        let _ = bad.write_all(garbage);
        let mut answer = Vec::new();
        let _ = bad.read_to_end(&mut answer);
        assert!(!answer.starts_with(b"HTTP/"), "no HTTP answer on a TLS listener");
        assert_eq!(get(&mut good, "/", "").expect("the good connection keeps working").0, 200);
    }
}

#[test]
fn redirect_to_https_and_hsts() {
    let ca = Ca::new();
    ca.server("a", &["a.example"], false);
    let origin = Origin::start("origin");
    let (plain, secure) = (proxy_addr(), proxy_addr());
    let services = format!(
        "\n[[service]]\nname = \"plain\"\nlisten = \"{plain}\"\npool = \"main\"\n\
         rules = [{{ path_prefix = \"/\", redirect_https = {} }}]\n",
        secure.port()
    ) + &https(
        "secure",
        secure,
        &format!("{{ certificates = [{}] }}", ca.pair("a")),
        "rules = [{ path_prefix = \"/\", hsts = true }]",
    );
    let _proxy = proxy(&services, &origin, plain);
    let r = Client::connect(plain).request("GET", "/a?b=1", &[("host", "a.example")]);
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some(format!("https://a.example:{}/a?b=1", secure.port()).as_str()));
    let mut c = connect(secure, &ca.client(None, &[]), "a.example").expect("handshake");
    let (status, head, _) = get(&mut c, "/", "").expect("request");
    assert_eq!(status, 200);
    assert!(head.contains("strict-transport-security: max-age="), "{head}");
}

#[test]
fn curl_speaks_http11_over_tls() {
    let ca = Ca::new();
    ca.server("a", &["a.example", "127.0.0.1"], false);
    let origin = Origin::start("origin");
    let listen = proxy_addr();
    let _proxy = proxy(&https("web", listen, &format!("{{ certificates = [{}] }}", ca.pair("a")), ""), &origin, listen);
    let out = std::process::Command::new("curl")
        .args(["-sk", "--http1.1", "--max-time", "20", "-D", "-"])
        .arg(format!("https://{listen}/__origin/request"))
        .output();
    let Ok(out) = out else {
        eprintln!("curl is not installed: skipped");
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "curl failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let body = text.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    assert_eq!(seen(body, "x-forwarded-proto"), ["https"]);
}

#[test]
fn a_client_over_its_connection_cap_is_answered_429_over_tls() {
    let ca = Ca::new();
    ca.server("a", &["a.example"], false);
    let origin = Origin::start("origin");
    let listen = proxy_addr();
    let protection = "protection = { max_connections_per_client = 1 }";
    let _proxy =
        proxy(&https("web", listen, &format!("{{ certificates = [{}] }}", ca.pair("a")), protection), &origin, listen);
    let client = ca.client(None, &[]);
    // The start-up probe may hold the one slot for a moment.
    let mut first = wait_for("a first connection within the cap", || {
        let mut c = connect(listen, &client, "a.example").ok()?;
        (get(&mut c, "/", "").ok()?.0 == 200).then_some(c)
    });
    // A second at once: the handshake completes, its request gets 429, then it closes.
    let mut second = connect(listen, &client, "a.example").expect("handshake");
    let (status, head, _) = get(&mut second, "/", "").expect("a response");
    assert_eq!(status, 429);
    assert!(head.contains("connection: close"), "{head}");
    // The first connection is unaffected.
    assert_eq!(get(&mut first, "/again", "").expect("response").0, 200);
}
