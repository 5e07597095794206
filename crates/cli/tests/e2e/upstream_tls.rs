//! TLS towards servers (re-encryption): the proxy speaks HTTPS to an origin simulator
//! serving TLS, verifying its certificate against a CA generated here, by IP address or by
//! server name; refuses untrusted certificates and wrong names with a 502
//! (`server-tls-failed`); accepts any certificate with `verify = false`; presents a client
//! certificate when the origin requires one; and reuses server connections and sessions.
//!
//! The engine runs in-process with a configuration whose pool `tls` is set in code (the
//! file syntax is the configuration reader's, tested with it).

use crate::common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;

use common::pki::Pki;
use common::{free_port, proxy_addr, simple_config, temp_dir, Client, Origin, OriginProcess, Response};
use switchyard_config::{CertKey, Config, PemFile, UpstreamTls};
use switchyard_engine::{Change, Handle};

fn pem(text: &str) -> PemFile {
    PemFile { path: PathBuf::from("generated.pem"), pem: text.as_bytes().to_vec() }
}

/// An HTTPS origin with a certificate for `origin.test` and 127.0.0.1 signed by `pki`,
/// requiring client certificates from `client_ca` when given.
fn tls_origin(pki: &Pki, client_ca: Option<&Pki>) -> Origin {
    let (cert, key) = pki.leaf(&["origin.test", "127.0.0.1"]);
    let ca = client_ca.map(|c| c.ca.as_bytes());
    let config = switchyard_bench::origin::tls_config(cert.as_bytes(), key.as_bytes(), ca).expect("origin TLS");
    Origin::start_tls("secure", config)
}

/// Verification against `ca`, by the server's IP address unless `server_name` is given.
fn verified_by(ca: &Pki, server_name: Option<&str>) -> UpstreamTls {
    UpstreamTls { verify: true, ca: Some(pem(&ca.ca)), server_name: server_name.map(String::from), client_cert: None }
}

/// A running in-process engine, stopped on drop.
struct Engine {
    handle: Option<Handle>,
    addr: SocketAddr,
}

impl Engine {
    /// Serves one service on a fresh address with pool `main` over `servers`, with `tls`.
    fn start(servers: &[SocketAddr], tls: UpstreamTls) -> Engine {
        let addr = proxy_addr();
        let handle = switchyard_engine::start(config(addr, servers, tls), Some(1)).expect("engine starts");
        Engine { handle: Some(handle), addr }
    }

    fn get(&self, path: &str) -> Response {
        Client::connect(self.addr).get(path)
    }

    /// Failures counted as `server-tls-failed` by server `i`'s metrics: failed handshakes
    /// plus requests that ended with one.
    fn server_tls_failures(&self, i: usize) -> u64 {
        let gen = self.handle.as_ref().expect("running").control().generation();
        gen.pools[0].servers[i].metrics.snapshot().failures.get("server-tls-failed")
    }

    /// Waits until the service logged `n` requests failed with reason `server-tls-failed`
    /// (the log phase runs just after the error response is written).
    fn wait_tls_failed_requests(&self, n: u64) {
        let control = self.handle.as_ref().expect("running").control();
        common::wait_for(&format!("{n} requests failed with server-tls-failed"), || {
            let errors = control.generation().services[0].snapshot().errors;
            (errors.get("server-tls-failed") == n).then_some(())
        });
    }

    fn reload(&self, config: Config) {
        self.handle.as_ref().expect("running").apply(Change::Reload(Box::new(config))).expect("reload applies");
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            handle.shutdown();
            handle.join();
        }
    }
}

fn config(addr: SocketAddr, servers: &[SocketAddr], tls: UpstreamTls) -> Config {
    let text = simple_config(addr, servers, "").replace("drain_timeout = \"5s\"", "drain_timeout = \"1s\"");
    let mut config = switchyard_config::parse(&text, "upstream_tls.toml").expect("valid config");
    config.pools[0].tls = Some(tls);
    config
}

/// Asserts the proxy's own 502 (no origin involved).
fn assert_bad_gateway(r: &Response) {
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(r.header("x-origin"), None);
}

#[test]
fn reencrypts_to_an_origin_verified_by_ip_address_or_server_name() {
    let pki = Pki::new("test CA");
    let origin = tls_origin(&pki, None);
    for server_name in [None, Some("origin.test")] {
        let engine = Engine::start(&[origin.addr], verified_by(&pki, server_name));
        let r = engine.get("/__origin/request");
        assert_eq!(r.status, 200, "{server_name:?}: {}", r.text());
        assert_eq!(r.origin(), "secure");
        assert_eq!(r.json()["path"], "/__origin/request");
        // Forwarding headers still describe the client's side (clear HTTP here).
        let headers = r.json()["headers"].to_string();
        assert!(headers.contains("x-forwarded-proto") && headers.contains("\"http\""), "{headers}");
    }
    assert_eq!(origin.requests(), 2);
    assert_eq!(origin.tls_handshakes().0, 2, "one TLS connection per engine");
}

#[test]
fn untrusted_certificate_or_wrong_name_is_a_502_server_tls_failed() {
    let pki = Pki::new("test CA");
    let stranger = Pki::new("another CA");
    let origin = tls_origin(&pki, None);
    for tls in [verified_by(&stranger, None), verified_by(&pki, Some("elsewhere.test"))] {
        let engine = Engine::start(&[origin.addr], tls);
        assert_bad_gateway(&engine.get("/"));
        engine.wait_tls_failed_requests(1);
    }
    // A clear-text server behind a TLS pool fails the same way.
    let plain = Origin::start("plain");
    let engine = Engine::start(&[plain.addr], verified_by(&pki, None));
    assert_bad_gateway(&engine.get("/"));
    engine.wait_tls_failed_requests(1);
    assert_eq!(origin.requests() + plain.requests(), 0);
}

#[test]
fn a_failed_handshake_moves_on_to_another_server() {
    let pki = Pki::new("test CA");
    let good = tls_origin(&pki, None);
    let plain = Origin::start("plain");
    // Round robin starts at the first server: the clear one fails its handshake.
    let engine = Engine::start(&[plain.addr, good.addr], verified_by(&pki, None));
    let r = engine.get("/");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.origin(), "secure");
    assert_eq!(engine.server_tls_failures(0), 1, "the handshake that failed, counted once");
    assert_eq!(engine.server_tls_failures(1), 0);
}

#[test]
fn verify_false_accepts_any_certificate() {
    let unknown = Pki::new("unknown CA");
    let origin = tls_origin(&unknown, None);
    let tls = UpstreamTls { verify: false, ca: None, server_name: Some("whatever.test".into()), client_cert: None };
    let engine = Engine::start(&[origin.addr], tls);
    let r = engine.get("/");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(origin.requests(), 1);
}

#[test]
fn client_certificate_is_presented_when_the_origin_requires_one() {
    let pki = Pki::new("test CA");
    let clients = Pki::new("client CA");
    let origin = tls_origin(&pki, Some(&clients));
    // Without a client certificate, the origin refuses the handshake.
    let engine = Engine::start(&[origin.addr], verified_by(&pki, None));
    assert_bad_gateway(&engine.get("/"));
    drop(engine);
    let (cert, key) = clients.leaf(&["proxy.test"]);
    let client_cert = CertKey { certificate: pem(&cert), key: pem(&key), names: vec!["proxy.test".into()] };
    let engine =
        Engine::start(&[origin.addr], UpstreamTls { client_cert: Some(client_cert), ..verified_by(&pki, None) });
    let r = engine.get("/");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(origin.requests(), 1);
}

#[test]
fn server_connections_are_reused_and_sessions_resumed() {
    let pki = Pki::new("test CA");
    let origin = tls_origin(&pki, None);
    let engine = Engine::start(&[origin.addr], verified_by(&pki, None));
    for _ in 0..5 {
        assert_eq!(engine.get("/?size=2000").status, 200);
    }
    assert_eq!(origin.requests(), 5);
    assert_eq!(origin.connections(), 1, "five requests over one server connection");
    // The origin closes after this answer; the next request opens a new connection,
    // which resumes the TLS session of the first.
    assert_eq!(engine.get("/?close=1").status, 200);
    assert_eq!(engine.get("/").status, 200);
    assert_eq!(origin.connections(), 2);
    assert_eq!(origin.tls_handshakes(), (2, 1), "the second handshake resumed the session");
}

#[test]
fn bodies_stream_both_ways_over_tls() {
    let pki = Pki::new("test CA");
    let origin = tls_origin(&pki, None);
    let engine = Engine::start(&[origin.addr], verified_by(&pki, None));
    // A body larger than any socket buffer, echoed while it is still being sent: the
    // full-duplex path over the TLS halves.
    let body: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let mut client = Client::connect(engine.addr);
    let head = format!("POST /?echo=1 HTTP/1.1\r\nhost: t\r\ncontent-length: {}\r\n\r\n", body.len());
    client.send(head.as_bytes()).expect("send head");
    let mut writer = client.stream.try_clone().expect("clone");
    let sent = body.clone();
    let upload = std::thread::spawn(move || writer.write_all(&sent));
    let r = client.read_response().expect("echo");
    upload.join().expect("upload thread").expect("upload");
    assert_eq!(r.status, 200);
    assert!(r.body == body, "echoed body differs ({} bytes back)", r.body.len());
    // The connection stays usable.
    assert_eq!(client.get("/?size=100000").body.len(), 100_000);
    let mut rest = Vec::new();
    client.stream.set_read_timeout(Some(std::time::Duration::from_millis(50))).expect("timeout");
    let _ = client.stream.read_to_end(&mut rest);
    assert!(rest.is_empty(), "no stray bytes");
}

#[test]
fn a_reload_reads_new_certificate_contents() {
    let pki = Pki::new("test CA");
    let stranger = Pki::new("another CA");
    let origin = tls_origin(&pki, None);
    let engine = Engine::start(&[origin.addr], verified_by(&stranger, None));
    assert_bad_gateway(&engine.get("/"));
    // Same path, new contents: the reload builds a new client configuration.
    engine.reload(config(engine.addr, &[origin.addr], verified_by(&pki, None)));
    assert_eq!(engine.get("/").status, 200);
}

#[test]
fn the_origin_command_serves_tls_from_pem_files() {
    let pki = Pki::new("test CA");
    let (cert, key) = pki.leaf(&["127.0.0.1"]);
    let dir = temp_dir("origin-tls");
    let (cert_file, key_file) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_file, cert).expect("write cert");
    std::fs::write(&key_file, key).expect("write key");
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let args = ["--tls-cert".as_ref(), cert_file.as_os_str(), "--tls-key".as_ref(), key_file.as_os_str()];
    let _origin = OriginProcess::start_with(addr, "files", &args);
    let engine = Engine::start(&[addr], verified_by(&pki, None));
    let r = engine.get("/__origin/stats");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["tls_handshakes"], 1);
}

#[test]
fn the_configuration_file_sets_up_tls_towards_servers() {
    let pki = Pki::new("test CA");
    let clients = Pki::new("client CA");
    let origin = tls_origin(&pki, Some(&clients));
    let dir = temp_dir("upstream-tls-files");
    let (cert, key) = clients.leaf(&["proxy.test"]);
    for (name, text) in [("ca.pem", pki.ca.as_str()), ("client.pem", &cert), ("client.key", &key)] {
        std::fs::write(dir.join(name), text).expect("write PEM");
    }
    let file = |name: &str| dir.join(name).display().to_string();
    let tls = format!(
        "tls = {{ ca = \"{}\", server_name = \"origin.test\", certificate = \"{}\", key = \"{}\" }}\n",
        file("ca.pem"),
        file("client.pem"),
        file("client.key")
    );
    let listen = proxy_addr();
    let proxy = common::Proxy::start(&format!("{}{tls}", simple_config(listen, &[origin.addr], "")), listen);
    let r = proxy.get("/");
    assert_eq!(r.status, 200, "{}\n{}", r.text(), proxy.log());
    assert_eq!(origin.requests(), 1);
    drop(proxy);
    // `tls = true`: the system trust store, which does not know the test CA.
    let listen = proxy_addr();
    let proxy = common::Proxy::start(&format!("{}tls = true\n", simple_config(listen, &[origin.addr], "")), listen);
    assert_bad_gateway(&proxy.get("/"));
    common::wait_for("the failure in the log", || proxy.log().contains("server tls failed").then_some(()));
    assert_eq!(origin.requests(), 1);
}
