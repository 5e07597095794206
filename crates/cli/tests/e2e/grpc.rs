//! gRPC end to end with a real client and server we did not write (Python grpcio, see
//! `tests/grpc/harness.py`): unary, server-streaming, client-streaming and bidirectional
//! calls; a non-OK status with its message, trailing metadata and
//! `grpc-status-details-bin`; a stream that outlives `timeouts.client_body`; cancellation
//! by the client (the server must see it) and an expiring deadline — through an `http`
//! service (h2c) and an `https` service (ALPN h2), each in front of an h2c pool and a TLS
//! h2 pool. Also: `application/grpc` answers are neither compressed nor cached, even by
//! a service with compression (of `application/*`) and a cache.
//!
//! The harness is proven first without switchyard (`grpcio_harness_passes_directly`), so
//! a failure through the proxy is the proxy's. Without grpcio in `.tools/venv` (made by
//! scripts/test.sh) the tests say they skipped.

use crate::common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use common::grpc::{GrpcServer, Python, SERVER_NAME};
use common::pki::Pki;
use common::{h2_body, proxy_addr, temp_dir, Proxy};

/// Every case of the harness client.
const CASES: [&str; 8] =
    ["unary", "server-stream", "client-stream", "bidi", "error", "long-stream", "cancel", "deadline"];
/// `timeouts.client_body` of the proxy: shorter than the long-stream case (≈4.5 s).
const CLIENT_BODY: &str = "2s";
/// The name the proxy's certificate carries.
const PROXY_NAME: &str = "proxy.test";

/// Writes `text` to `name` in `dir`; the path.
fn file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write file");
    path
}

/// How the client reaches switchyard and switchyard the server.
#[derive(Debug, Clone, Copy)]
struct Route {
    /// `https` service (ALPN h2) rather than `http` (h2c).
    tls_front: bool,
    /// TLS h2 pool rather than h2c.
    tls_pool: bool,
}

/// The gRPC server, and switchyard in front of it along `route` with `service_extra`.
struct Setup {
    _server: GrpcServer,
    proxy: Proxy,
    ca: PathBuf,
    route: Route,
    /// The proxy's access log (JSON lines).
    access_log: PathBuf,
}

impl Setup {
    fn start(python: &Python, route: Route, service_extra: &str) -> Setup {
        let pki = Pki::new("grpc test CA");
        let server = GrpcServer::start(python, &pki);
        let dir = temp_dir("grpc");
        let ca = file(&dir, "ca.pem", &pki.ca);
        let mut service = format!("timeouts = {{ client_body = \"{CLIENT_BODY}\" }}\n{service_extra}\n");
        if route.tls_front {
            let (cert, key) = pki.leaf(&[PROXY_NAME, "127.0.0.1"]);
            let (cert, key) = (file(&dir, "front.crt", &cert), file(&dir, "front.key", &key));
            service += &format!(
                "mode = \"https\"\ntls = {{ certificates = [{{ certificate = \"{}\", key = \"{}\" }}] }}\n",
                cert.display(),
                key.display()
            );
        }
        let (upstream, pool_tls) = if route.tls_pool {
            (server.tls, format!("tls = {{ ca = \"{}\", server_name = \"{SERVER_NAME}\" }}\n", ca.display()))
        } else {
            (server.h2c, String::new())
        };
        let listen = proxy_addr();
        let access_log = dir.join("access.log");
        let config = format!(
            "workers = 1\ndrain_timeout = \"1s\"\n\n[access_log]\npath = \"{}\"\n\n[[service]]\nname = \"grpc\"\n\
             listen = [\"{listen}\"]\npool = \"grpc\"\n{service}\n[[pool]]\nname = \"grpc\"\nprotocol = \"h2\"\n\
             servers = [{{ address = \"{upstream}\" }}]\n{pool_tls}",
            access_log.display()
        );
        let proxy = Proxy::start(&config, listen);
        Setup { _server: server, proxy, ca, route, access_log }
    }

    /// Runs the harness client through the proxy; panics listing the failed cases.
    fn expect_all_cases_pass(&self, python: &Python) {
        let tls = self.route.tls_front.then_some((self.ca.as_path(), PROXY_NAME));
        let (ok, output) = python.client(self.proxy.addr, tls, &CASES);
        assert!(ok, "through switchyard ({:?}):\n{output}\nproxy log:\n{}", self.route, self.proxy.log());
        for case in CASES {
            assert!(output.lines().any(|l| l == format!("ok {case}")), "{case} did not pass:\n{output}");
        }
        // The access log names each answer's gRPC status: OK from the trailers of a
        // call, FAILED_PRECONDITION (9) from the head of the error case's trailers-only answer.
        for status in ["\"grpc_status\":0", "\"grpc_status\":9"] {
            common::wait_for(&format!("an access log line with {status}"), || {
                let log = std::fs::read_to_string(&self.access_log).unwrap_or_default();
                log.lines().any(|l| l.contains(status)).then_some(())
            });
        }
    }
}

#[test]
fn grpcio_harness_passes_directly() {
    let Some(python) = Python::find() else { return };
    let pki = Pki::new("grpc test CA");
    let server = GrpcServer::start(&python, &pki);
    let ca = file(&temp_dir("grpc-direct"), "ca.pem", &pki.ca);
    let (h2c, tls) = (server.h2c, server.tls);
    let clear = {
        let python = python.clone();
        std::thread::spawn(move || python.client(h2c, None, &CASES))
    };
    let (ok, output) = python.client(tls, Some((&ca, SERVER_NAME)), &CASES);
    assert!(ok, "grpcio client → grpcio server over TLS, no proxy: the harness itself is broken:\n{output}");
    let (ok, output) = clear.join().expect("h2c client thread");
    assert!(ok, "grpcio client → grpcio server over h2c, no proxy: the harness itself is broken:\n{output}");
    assert_eq!(output.lines().filter(|l| l.starts_with("ok ")).count(), CASES.len(), "{output}");
}

#[test]
fn grpc_through_an_h2c_service_to_an_h2c_pool() {
    let Some(python) = Python::find() else { return };
    Setup::start(&python, Route { tls_front: false, tls_pool: false }, "").expect_all_cases_pass(&python);
}

#[test]
fn grpc_through_an_h2c_service_to_a_tls_pool() {
    let Some(python) = Python::find() else { return };
    Setup::start(&python, Route { tls_front: false, tls_pool: true }, "").expect_all_cases_pass(&python);
}

#[test]
fn grpc_through_an_https_service_to_an_h2c_pool() {
    let Some(python) = Python::find() else { return };
    Setup::start(&python, Route { tls_front: true, tls_pool: false }, "").expect_all_cases_pass(&python);
}

#[test]
fn grpc_through_an_https_service_to_a_tls_pool() {
    let Some(python) = Python::find() else { return };
    Setup::start(&python, Route { tls_front: true, tls_pool: true }, "").expect_all_cases_pass(&python);
}

/// One answer to a raw gRPC call: the head, the body, the trailers.
struct Answer {
    head: http::response::Parts,
    body: Vec<u8>,
    trailers: Option<http::HeaderMap>,
}

/// A unary call of `method` (payload `message`) over h2c to `addr`, as a gRPC client
/// sends it, plus `accept-encoding` for every coding switchyard speaks.
async fn raw_call(addr: SocketAddr, method: &str, message: &[u8]) -> Answer {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut send, connection) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(connection);
    let request = http::Request::post(format!("http://grpc.test/switchyard.test.Probe/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("accept-encoding", "gzip, br, zstd")
        .body(())
        .expect("request");
    let (response, mut stream) = send.send_request(request, false).expect("send request");
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(message);
    stream.send_data(Bytes::from(frame), true).expect("send message");
    let (head, mut recv) = response.await.expect("response").into_parts();
    let body = h2_body(&mut recv).await.expect("body");
    let trailers = recv.trailers().await.ok().flatten();
    Answer { head, body, trailers }
}

/// The message of a one-message gRPC body.
fn message(body: &[u8]) -> &[u8] {
    assert!(body.len() >= 5 && body[0] == 0, "not one uncompressed gRPC message: {:?}", &body[..body.len().min(16)]);
    &body[5..]
}

#[test]
fn grpc_answers_are_neither_compressed_nor_cached() {
    let Some(python) = Python::find() else { return };
    let extra = "compression = { types = [\"application/*\", \"text/*\"], min_size = 1 }\ncache = true";
    let setup = Setup::start(&python, Route { tls_front: false, tls_pool: false }, extra);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let addr = setup.proxy.addr;
    for round in 1..=2u32 {
        // `Big` answers 48 KiB of repeated text with `cache-control: public, max-age=3600`.
        let answer = rt.block_on(raw_call(addr, "Big", b""));
        let log = setup.proxy.log();
        assert_eq!(answer.head.status, 200, "round {round}: {log}");
        assert_eq!(answer.head.headers.get("content-encoding"), None, "round {round}: compressed: {:?}", answer.head);
        assert_eq!(answer.head.headers.get("age"), None, "round {round}: from the cache: {:?}", answer.head);
        assert_eq!(message(&answer.body), "compress me ".repeat(4096).as_bytes(), "round {round}");
        let status = answer.trailers.as_ref().and_then(|t| t.get("grpc-status")).map(|v| v.as_bytes().to_vec());
        assert_eq!(status.as_deref(), Some(&b"0"[..]), "round {round}: trailers {:?}", answer.trailers);
        // The server served every call itself.
        let calls = rt.block_on(raw_call(addr, "Calls", b"Big"));
        assert_eq!(message(&calls.body), round.to_string().as_bytes(), "round {round}: {:?}", calls.head);
    }
}

/// Waits until the proxy's log has a line holding every one of `parts`.
fn wait_for_line(proxy: &Proxy, parts: &[&str]) {
    common::wait_for(&format!("a log line with {parts:?}"), || {
        proxy.log().lines().any(|l| parts.iter().all(|p| l.contains(p))).then_some(())
    });
}

#[test]
fn the_grpc_health_check_follows_the_standard_health_servicer() {
    let Some(python) = Python::find() else { return };
    let pki = Pki::new("grpc test CA");
    let server = GrpcServer::start(&python, &pki);
    let ca = file(&temp_dir("grpc-health"), "ca.pem", &pki.ca);
    let listen = proxy_addr();
    let check = "interval = \"1s\", timeout = \"800ms\", rise = 1, fall = 1";
    // One pool asks about the whole server over h2c, the other about one service over TLS.
    let config = format!(
        "workers = 1\ndrain_timeout = \"1s\"\n\n[[service]]\nname = \"web\"\nlisten = [\"{listen}\"]\npool = \"grpc-clear\"\n\n\
         [[pool]]\nname = \"grpc-clear\"\nprotocol = \"h2\"\nservers = [{{ address = \"{}\" }}]\n\
         health_check = {{ type = \"grpc\", {check} }}\n\n\
         [[pool]]\nname = \"grpc-tls\"\nprotocol = \"h2\"\nservers = [{{ address = \"{}\" }}]\n\
         tls = {{ ca = \"{}\", server_name = \"{SERVER_NAME}\" }}\n\
         health_check = {{ type = \"grpc\", service = \"shop.Orders\", {check} }}\n",
        server.h2c,
        server.tls,
        ca.display()
    );
    let proxy = Proxy::start(&config, listen);
    // The servicer knows nothing of `shop.Orders` yet: NOT_FOUND (grpc-status 5).
    wait_for_line(&proxy, &["server down", "grpc-tls", "grpc-status 5"]);
    python.set_health(server.h2c, "shop.Orders", "SERVING");
    wait_for_line(&proxy, &["server up", "grpc-tls"]);
    python.set_health(server.h2c, "", "NOT_SERVING");
    wait_for_line(&proxy, &["server down", "grpc-clear", "NOT_SERVING"]);
    python.set_health(server.h2c, "shop.Orders", "NOT_SERVING");
    wait_for_line(&proxy, &["server down", "grpc-tls", "NOT_SERVING"]);
    python.set_health(server.h2c, "", "SERVING");
    wait_for_line(&proxy, &["server up", "grpc-clear"]);
    let log = proxy.log();
    // The probe over TLS spoke h2 after a verified handshake all along.
    let broken = log.lines().any(|l| l.contains("server down") && (l.contains("TLS") || l.contains("HTTP/2 failed")));
    assert!(!broken, "{log}");
    // A dead server is down too, with the connection refused.
    drop(server);
    wait_for_line(&proxy, &["server down", "grpc-clear", "connection refused"]);
}
