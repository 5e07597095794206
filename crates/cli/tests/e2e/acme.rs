//! Certificates from ACME against Pebble, Let's Encrypt's test server (which we did
//! not write), with its real validation: Pebble resolves the domains through
//! pebble-challtestsrv's DNS (every name is 127.0.0.1) and validates http-01 on
//! switchyard's `http` listener, tls-alpn-01 on its `https` listener (Pebble's
//! `httpPort` and `tlsPort`). `PEBBLE_VA_ALWAYS_VALID` is never set.
//!
//! Pebble and pebble-challtestsrv come from `go install` (scripts/test.sh puts them
//! in `.tools/bin` when Go is present; `PEBBLE` and `PEBBLE_CHALLTESTSRV` may name
//! other binaries). Without them each test says it skipped.
//!
//! Clients verify what switchyard serves against Pebble's issuing root, fetched
//! from Pebble's management interface.

use crate::common;

mod on_demand;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::pki::Pki;
use common::*;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, StreamOwned};

/// How long an issuance may take on a loaded two-core machine (Pebble answers in
/// well under a second when idle).
const ISSUANCE: Duration = Duration::from_secs(90);

fn tool(env: &str, name: &str) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(env) {
        return Some(PathBuf::from(path));
    }
    let local = workspace_root().join(".tools/bin").join(name);
    local.is_file().then_some(local)
}

/// A child process killed (by its own pid) on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Pebble and its DNS server, validating against switchyard's ports.
struct Pebble {
    directory: String,
    /// The CA of Pebble's own HTTPS certificate (for `ca_roots`).
    ca_file: PathBuf,
    pki: Pki,
    management: SocketAddr,
    _dns: Running,
    _pebble: Running,
    log: PathBuf,
}

impl Pebble {
    /// Starts Pebble whose validation connects to `http_port` (http-01) and
    /// `tls_port` (tls-alpn-01) on 127.0.0.1; `None` (with a message) when the
    /// binaries are missing. Certificates of profile `shortlived` last `short_s`.
    fn start(http_port: u16, tls_port: u16, short_s: u64) -> Option<Pebble> {
        let (Some(pebble), Some(challtestsrv)) =
            (tool("PEBBLE", "pebble"), tool("PEBBLE_CHALLTESTSRV", "pebble-challtestsrv"))
        else {
            eprintln!("skipped: pebble or pebble-challtestsrv not installed (scripts/test.sh installs them with Go)");
            return None;
        };
        let dir = temp_dir("pebble");
        let pki = Pki::new("pebble test listener CA");
        let (cert, key) = pki.leaf(&["localhost", "127.0.0.1"]);
        std::fs::write(dir.join("cert.pem"), cert).expect("write");
        std::fs::write(dir.join("key.pem"), key).expect("write");
        std::fs::write(dir.join("ca.pem"), &pki.ca).expect("write");
        let (listen, management, dns) = (proxy_addr(), proxy_addr(), proxy_addr());
        let config = serde_json::json!({ "pebble": {
            "listenAddress": listen.to_string(),
            "managementListenAddress": management.to_string(),
            "certificate": dir.join("cert.pem"),
            "privateKey": dir.join("key.pem"),
            "httpPort": http_port,
            "tlsPort": tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
            "domainBlocklist": ["refused.example"],
            "retryAfter": { "authz": 1, "order": 1 },
            "keyAlgorithm": "ecdsa",
            "profiles": {
                "default": { "description": "90 days", "validityPeriod": 7_776_000 },
                "shortlived": { "description": "for renewal tests", "validityPeriod": short_s },
            },
        }});
        std::fs::write(dir.join("pebble.json"), config.to_string()).expect("write");
        let log = dir.join("pebble.log");
        let dns_child = Command::new(challtestsrv)
            .args(["-dnsserver", &dns.to_string(), "-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", ""])
            .args(["-management", &proxy_addr().to_string(), "-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start pebble-challtestsrv");
        let out = std::fs::File::create(&log).expect("log file");
        let pebble_child = Command::new(pebble)
            .arg("-config")
            .arg(dir.join("pebble.json"))
            .args(["-dnsserver", &dns.to_string()])
            // No random sleep before validating, every authorization validated
            // afresh (renewals answer challenges again), no random bad nonce.
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_AUTHZREUSE", "0")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("start pebble");
        let pebble = Pebble {
            directory: format!("https://{listen}/dir"),
            ca_file: dir.join("ca.pem"),
            pki,
            management,
            _dns: Running(dns_child),
            _pebble: Running(pebble_child),
            log,
        };
        wait_for("pebble's listener", || TcpStream::connect(listen).ok());
        wait_for("pebble's management listener", || TcpStream::connect(management).ok());
        Some(pebble)
    }

    /// `tls.acme` for `domains`, stored under `storage`.
    fn acme(&self, domains: &[&str], challenge: &str, storage: &Path, extra: &str) -> String {
        let domains: Vec<String> = domains.iter().map(|d| format!("\"{d}\"")).collect();
        format!(
            "{{ acme = {{ directory = \"{}\", contact = [\"mailto:ops@a.example\"], domains = [{}], challenge = \"{challenge}\", \
             storage = \"{}\", ca_roots = \"{}\"{extra} }} }}",
            self.directory,
            domains.join(", "),
            storage.display(),
            self.ca_file.display()
        )
    }

    /// Pebble's issuing root, from its management interface.
    fn root(&self) -> CertificateDer<'static> {
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls::pki_types::pem::PemObject::pem_slice_iter(self.pki.ca.as_bytes()) {
            roots.add(c.expect("pem")).expect("root");
        }
        let config = Arc::new(client_config(roots, vec![]));
        let mut tls = connect(self.management, &config, "localhost").expect("management interface");
        let (status, body) = get(&mut tls, "/roots/0", "localhost").expect("GET /roots/0");
        assert_eq!(status, 200, "{body}");
        use rustls::pki_types::pem::PemObject;
        CertificateDer::from_pem_slice(body.as_bytes()).expect("root PEM")
    }

    /// A client trusting Pebble's issuing root, offering `alpn`.
    fn client(&self, alpn: &[&[u8]]) -> Arc<ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.root()).expect("root");
        Arc::new(client_config(roots, alpn.iter().map(|p| p.to_vec()).collect()))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn client_config(roots: rustls::RootCertStore, alpn: Vec<Vec<u8>>) -> ClientConfig {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn;
    // Every handshake a full one: a resumed session reports the certificate
    // of the handshake that created it, not the one served now.
    config.resumption = rustls::client::Resumption::disabled();
    config
}

type Tls = StreamOwned<ClientConnection, TcpStream>;

fn connect(addr: SocketAddr, config: &Arc<ClientConfig>, name: &str) -> std::io::Result<Tls> {
    connect_within(addr, config, name, Duration::from_secs(10))
}

/// [`connect`], with each read allowed `timeout` (a handshake held while a
/// certificate is issued takes longer).
fn connect_within(addr: SocketAddr, config: &Arc<ClientConfig>, name: &str, timeout: Duration) -> std::io::Result<Tls> {
    let name = ServerName::try_from(name.to_string()).map_err(std::io::Error::other)?;
    let conn = ClientConnection::new(config.clone(), name).map_err(std::io::Error::other)?;
    let stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(timeout))?;
    let mut tls = StreamOwned::new(conn, stream);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock)?;
    }
    Ok(tls)
}

/// One keep-alive GET: (status, body).
fn get(tls: &mut Tls, path: &str, host: &str) -> std::io::Result<(u16, String)> {
    write!(tls, "GET {path} HTTP/1.1\r\nhost: {host}\r\n\r\n")?;
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
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// The serial (hex) of the leaf a finished handshake presented.
fn serial(tls: &Tls) -> String {
    let der = tls.conn.peer_certificates().and_then(|c| c.first()).expect("a certificate").to_vec();
    let (_, cert) = x509_parser::parse_x509_certificate(&der).expect("x509");
    cert.raw_serial().iter().map(|b| format!("{b:02x}")).collect()
}

/// Polls `f` every 200 ms until `Some`, for up to `limit`; on a timeout the
/// panic shows `logs()`.
fn wait_long<T>(what: &str, limit: Duration, logs: impl Fn() -> String, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}\n{}", logs());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `GET /api/v1/certificates` (the admin listener has no tokens).
fn certificates(admin: SocketAddr) -> Vec<serde_json::Value> {
    let host = admin.to_string();
    let headers = [("host", host.as_str()), ("connection", "close")];
    let r = Client::connect(admin).request("GET", "/api/v1/certificates", &headers);
    r.json()["certificates"].as_array().cloned().unwrap_or_default()
}

fn metrics(admin: SocketAddr) -> String {
    let host = admin.to_string();
    Client::connect(admin).request("GET", "/metrics", &[("host", host.as_str()), ("connection", "close")]).text()
}

/// A configuration: an `http` service on `http` (the http-01 answers and plain
/// traffic), `https` services as given, and an admin listener.
fn config(http: SocketAddr, admin: SocketAddr, origin: SocketAddr, https: &[(&str, SocketAddr, String)]) -> String {
    let mut toml = format!(
        "workers = 1\ndrain_timeout = \"2s\"\n\n[admin]\nlisten = \"{admin}\"\n\n\
         [[service]]\nname = \"plain\"\nlisten = \"{http}\"\npool = \"main\"\n"
    );
    for (name, listen, tls) in https {
        toml.push_str(&format!(
            "\n[[service]]\nname = \"{name}\"\nmode = \"https\"\nlisten = \"{listen}\"\npool = \"main\"\ntls = {tls}\n"
        ));
    }
    toml.push_str(&format!("\n[[pool]]\nname = \"main\"\nservers = [{{ address = \"{origin}\" }}]\n"));
    toml
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o777
}

/// http-01: the certificate is issued and served, stored privately, reused after a
/// restart; the API shows it valid.
#[test]
fn http01_issues_stores_and_reuses_a_certificate() {
    let (http, https, admin) = (proxy_addr(), proxy_addr(), proxy_addr());
    let Some(pebble) = Pebble::start(http.port(), https.port(), 7_776_000) else { return };
    let origin = Origin::start("o");
    let storage = temp_dir("acme-storage").join("acme");
    let tls = pebble.acme(&["a.example", "www.a.example"], "http-01", &storage, "");
    let file = write_temp("acme", "switchyard.toml", &config(http, admin, origin.addr, &[("site", https, tls)]));
    let proxy = Proxy::run_file(&file, http);
    let client = pebble.client(&[b"http/1.1"]);
    let first = wait_long(
        "a certificate issued by http-01",
        ISSUANCE,
        || format!("{}\n{}", proxy.log(), pebble.log()),
        || {
            let mut tls = connect(https, &client, "www.a.example").ok()?;
            let (status, _) = get(&mut tls, "/", "www.a.example").ok()?;
            (status == 200).then(|| serial(&tls))
        },
    );
    let log = proxy.log();
    assert!(log.contains("ACME certificate issued and installed"), "{log}");
    let view = certificates(admin);
    assert_eq!(view.len(), 1, "{view:?}");
    assert_eq!(view[0]["state"], "valid", "{view:?}");
    assert_eq!(view[0]["serial"].as_str(), Some(first.as_str()), "{view:?}");
    assert!(view[0]["warning"].is_null(), "{view:?}");
    let m = metrics(admin);
    assert!(m.contains("switchyard_acme_orders_total{service=\"site\",result=\"issued\"} 1"), "{m}");
    assert!(m.contains("switchyard_acme_certificate_present{service=\"site\"} 1"), "{m}");
    // Private files and directories.
    let server_dir = std::fs::read_dir(&storage)
        .expect("storage")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .expect("a directory per ACME server");
    for dir in [&storage, &server_dir, &server_dir.join("a.example")] {
        assert_eq!(mode(dir), 0o700, "{}", dir.display());
    }
    for file in
        [server_dir.join("account.json"), server_dir.join("a.example/key.pem"), server_dir.join("a.example/chain.pem")]
    {
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
    // A restart serves the stored certificate and creates no new account or order.
    drop(proxy);
    let proxy = Proxy::run_file(&file, http);
    let again = wait_long(
        "the stored certificate after a restart",
        ISSUANCE,
        || format!("{}\n{}", proxy.log(), pebble.log()),
        || connect(https, &client, "a.example").ok().map(|tls| serial(&tls)),
    );
    assert_eq!(again, first, "the stored certificate is reused");
    let log = proxy.log();
    assert!(log.contains("ACME certificate read from"), "{log}");
    assert!(!log.contains("ACME account created"), "{log}");
    assert!(!log.contains("ACME certificate issued"), "{log}");
}

/// tls-alpn-01: validated on the `https` listener itself; a client that offers
/// `acme-tls/1` outside a validation gets no certificate.
#[test]
fn tls_alpn01_issues_a_certificate_on_the_https_listener() {
    let (http, https, admin) = (proxy_addr(), proxy_addr(), proxy_addr());
    // Pebble's http-01 port points at a port where nothing listens: only tls-alpn-01 can pass.
    let Some(pebble) = Pebble::start(dead_addr().port(), https.port(), 7_776_000) else { return };
    let origin = Origin::start("o");
    let storage = temp_dir("acme-storage");
    let tls = pebble.acme(&["b.example"], "tls-alpn-01", &storage, "");
    let proxy = Proxy::start(&config(http, admin, origin.addr, &[("site", https, tls)]), http);
    let client = pebble.client(&[b"http/1.1"]);
    wait_long(
        "a certificate issued by tls-alpn-01",
        ISSUANCE,
        || format!("{}\n{}", proxy.log(), pebble.log()),
        || {
            let mut tls = connect(https, &client, "b.example").ok()?;
            let (status, _) = get(&mut tls, "/", "b.example").ok()?;
            (status == 200).then_some(())
        },
    );
    let view = certificates(admin);
    assert_eq!(view[0]["challenge"], "tls-alpn-01", "{view:?}");
    assert_eq!(view[0]["state"], "valid", "{view:?}");
    // `acme-tls/1` is offered by the service, yet never chosen over HTTP.
    let h2 = connect(https, &pebble.client(&[b"h2", b"http/1.1", b"acme-tls/1"]), "b.example").expect("h2");
    assert_eq!(h2.conn.alpn_protocol(), Some(&b"h2"[..]));
    // No validation in progress: `acme-tls/1` alone gets no certificate, and the process serves on.
    let validation = pebble.client(&[b"acme-tls/1"]);
    assert!(connect(https, &validation, "b.example").is_err());
    assert!(connect(https, &client, "b.example").is_ok());
    drop(proxy);
}

/// Short-lived certificates are renewed (ARI's window from Pebble), and swapped
/// under HTTP load over new and kept-alive connections with no failed request.
#[test]
fn renewal_swaps_certificates_under_load_without_a_failed_request() {
    let (http, https, admin) = (proxy_addr(), proxy_addr(), proxy_addr());
    let Some(pebble) = Pebble::start(http.port(), https.port(), 20) else { return };
    let origin = Origin::start("o");
    let storage = temp_dir("acme-storage");
    let tls = pebble.acme(&["c.example"], "http-01", &storage, ", profile = \"shortlived\"");
    let proxy = Proxy::start(&config(http, admin, origin.addr, &[("site", https, tls)]), http);
    let client = pebble.client(&[b"http/1.1"]);
    let first = wait_long(
        "the first short-lived certificate",
        ISSUANCE,
        || format!("{}\n{}", proxy.log(), pebble.log()),
        || connect(https, &client, "c.example").ok().map(|tls| serial(&tls)),
    );
    // A kept-alive connection, kept across the swaps.
    let mut kept = connect(https, &client, "c.example").expect("connection");
    let kept_serial = serial(&kept);
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(Mutex::new(Vec::<String>::new())));
    let serials = Arc::new(Mutex::new(vec![first.clone()]));
    let load: Vec<_> = (0..2)
        .map(|_| {
            let (stop, ok, failed, serials, client) =
                (stop.clone(), ok.clone(), failed.clone(), serials.clone(), client.clone());
            std::thread::spawn(move || {
                // Bounded: the test stops it, and it never runs past 200 s.
                let deadline = Instant::now() + Duration::from_secs(200);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    let outcome = connect(https, &client, "c.example").and_then(|mut tls| {
                        let s = serial(&tls);
                        for _ in 0..5 {
                            let (status, _) = get(&mut tls, "/", "c.example")?;
                            if status != 200 {
                                return Err(std::io::Error::other(format!("status {status}")));
                            }
                        }
                        Ok(s)
                    });
                    match outcome {
                        Ok(s) => {
                            ok.fetch_add(5, Ordering::Relaxed);
                            let mut seen = serials.lock().expect("lock");
                            if !seen.contains(&s) {
                                seen.push(s);
                            }
                        }
                        Err(e) => failed.lock().expect("lock").push(e.to_string()),
                    }
                }
            })
        })
        .collect();
    // Two renewals seen by clients (a 20 s certificate renews in the middle of its window).
    wait_long(
        "two renewals seen by clients",
        Duration::from_secs(150),
        || format!("{}\n{}", proxy.log(), pebble.log()),
        || {
            let (status, _) = get(&mut kept, "/", "c.example").expect("the kept-alive connection is served throughout");
            assert_eq!(status, 200);
            (serials.lock().expect("lock").len() >= 3).then_some(())
        },
    );
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.join().expect("load thread");
    }
    let failed = failed.lock().expect("lock").clone();
    assert!(failed.is_empty(), "failed requests during the swaps: {failed:?}\n{}", proxy.log());
    assert!(ok.load(Ordering::Relaxed) > 0);
    eprintln!(
        "renewal under load: {} requests on new connections, {} certificates seen, 0 failed",
        ok.load(Ordering::Relaxed),
        serials.lock().expect("lock").len()
    );
    assert_eq!(serial(&kept), kept_serial, "an established connection keeps its certificate");
    let view = certificates(admin);
    assert!(view[0]["issued"].as_u64().is_some_and(|n| n >= 3), "{view:?}");
    assert_eq!(view[0]["ari"], true, "Pebble offers renewal information: {view:?}");
    let log = proxy.log();
    assert!(log.matches("ACME certificate issued and installed").count() >= 3, "{log}");
}

/// An order the server refuses is logged, shown in the API and metrics, and
/// retried with back-off, while the other services' traffic is undisturbed; the
/// refused service refuses handshakes cleanly.
#[test]
fn a_refused_order_is_logged_and_retried_without_disturbing_traffic() {
    let (http, good, bad, admin) = (proxy_addr(), proxy_addr(), proxy_addr(), proxy_addr());
    let Some(pebble) = Pebble::start(http.port(), good.port(), 7_776_000) else { return };
    let origin = Origin::start("o");
    let storage = temp_dir("acme-storage");
    let services = [
        ("good", good, pebble.acme(&["d.example"], "http-01", &storage, "")),
        ("refused", bad, pebble.acme(&["refused.example"], "http-01", &storage, "")),
    ];
    let proxy = Proxy::start(&config(http, admin, origin.addr, &services), http);
    let client = pebble.client(&[b"http/1.1"]);
    let mut plain_ok = 0;
    let failures = wait_long(
        "two refused attempts",
        ISSUANCE,
        || format!("{}\n{}", proxy.log(), pebble.log()),
        || {
            // Traffic on the plain service is served throughout.
            let r = Client::connect(http).request("GET", "/", &[("host", "d.example"), ("connection", "close")]);
            assert_eq!(r.status, 200);
            plain_ok += 1;
            let view = certificates(admin);
            let refused = view.iter().find(|c| c["service"] == "refused")?;
            (refused["failures"].as_u64()? >= 2).then(|| refused.clone())
        },
    );
    assert!(plain_ok > 0);
    assert_eq!(failures["state"], "pending", "{failures}");
    let error = failures["last_error"].as_str().unwrap_or_default();
    assert!(error.contains("refused.example") || error.contains("rejectedIdentifier"), "{failures}");
    assert!(failures["warning"].as_str().is_some_and(|w| w.contains("retrying")), "{failures}");
    let log = proxy.log();
    assert!(log.contains("ACME certificate order failed; will retry"), "{log}");
    let m = metrics(admin);
    let line = m
        .lines()
        .find(|l| l.starts_with("switchyard_acme_orders_total{service=\"refused\",result=\"failed\"}"))
        .unwrap_or_else(|| panic!("{m}"));
    assert!(line.rsplit(' ').next().and_then(|v| v.parse::<u64>().ok()).is_some_and(|n| n >= 2), "{line}");
    // The refused service has no certificate: its handshakes fail, the process serves on.
    assert!(connect(bad, &client, "refused.example").is_err());
    // The other ACME service got its certificate meanwhile.
    wait_long(
        "the good service's certificate",
        ISSUANCE,
        || format!("{}\n{}", proxy.log(), pebble.log()),
        || connect(good, &client, "d.example").ok(),
    );
    let r = Client::connect(http).request("GET", "/", &[("host", "d.example"), ("connection", "close")]);
    assert_eq!(r.status, 200);
}
