//! Python grpcio, a gRPC implementation we did not write, as test server and client:
//! `tests/grpc/harness.py` run by the project's venv (`.tools/venv`, which
//! scripts/test.sh makes when missing). Without it, tests that need it skip.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::pki::Pki;
use super::{free_port, temp_dir, wait_exit, workspace_root, PATIENCE};

/// The name the gRPC server's TLS certificate carries (besides 127.0.0.1).
pub const SERVER_NAME: &str = "grpc.test";

/// The Python interpreter with grpcio, and the harness script.
#[derive(Debug, Clone)]
pub struct Python {
    python: PathBuf,
    harness: PathBuf,
}

impl Python {
    /// The project's venv when grpcio and the health servicer import there; `None`
    /// (after saying why on stderr) otherwise.
    pub fn find() -> Option<Python> {
        let python = workspace_root().join(".tools/venv/bin/python");
        let harness = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/grpc/harness.py");
        let ok = Command::new(&python)
            .args(["-c", "import grpc, grpc_health.v1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("Python grpcio is not installed in .tools/venv: skipped (scripts/test.sh installs it)");
            return None;
        }
        Some(Python { python, harness })
    }

    fn command(&self, sub: &str) -> Command {
        let mut cmd = Command::new(&self.python);
        cmd.arg(&self.harness).arg(sub).stdin(Stdio::null());
        cmd
    }

    /// Runs the harness client against `target` (through TLS when `tls` gives the CA
    /// file and the name to verify); returns whether every case passed and its output
    /// (one "ok CASE" or "FAIL CASE: why" line per case).
    pub fn client(&self, target: SocketAddr, tls: Option<(&Path, &str)>, cases: &[&str]) -> (bool, String) {
        let mut cmd = self.command("client");
        cmd.arg("--target").arg(target.to_string());
        if let Some((ca, name)) = tls {
            cmd.arg("--ca").arg(ca).arg("--authority").arg(name);
        }
        let dir = temp_dir("grpc-client");
        let out_path = dir.join("client.out");
        let out = std::fs::File::create(&out_path).expect("client output file");
        let mut child =
            cmd.args(cases).stdout(out.try_clone().expect("clone")).stderr(out).spawn().expect("spawn grpc client");
        // Every call of the client has its own deadline (30 s at most); this bounds the whole.
        let status = wait_exit(&mut child, Duration::from_secs(180));
        if status.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let text = std::fs::read_to_string(&out_path).unwrap_or_default();
        (status.is_some_and(|s| s.success()), text)
    }

    /// Sets the health servicer's status of `service` ("" is the whole server).
    pub fn set_health(&self, target: SocketAddr, service: &str, status: &str) {
        let out = self
            .command("set-health")
            .arg("--target")
            .arg(target.to_string())
            .arg("--service")
            .arg(service)
            .arg(status)
            .output()
            .expect("run set-health");
        assert!(out.status.success(), "set-health failed: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// A grpcio server (the harness's `Probe` service and the standard health servicer)
/// listening in clear text and over TLS; killed on drop.
pub struct GrpcServer {
    child: Child,
    /// The h2c listener.
    pub h2c: SocketAddr,
    /// The TLS listener (certificate for [`SERVER_NAME`] and 127.0.0.1, signed by the
    /// `pki` given to [`GrpcServer::start`]).
    pub tls: SocketAddr,
}

impl GrpcServer {
    /// Starts the server; returns once it says it is ready.
    pub fn start(python: &Python, pki: &Pki) -> GrpcServer {
        let (cert, key) = pki.leaf(&[SERVER_NAME, "127.0.0.1"]);
        let dir = temp_dir("grpc-server");
        let (cert_path, key_path) = (dir.join("server.crt"), dir.join("server.key"));
        std::fs::write(&cert_path, cert).expect("write certificate");
        std::fs::write(&key_path, key).expect("write key");
        let h2c = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let tls = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let mut child = python
            .command("serve")
            .arg("--h2c")
            .arg(h2c.to_string())
            .arg("--tls")
            .arg(tls.to_string())
            .arg("--cert")
            .arg(&cert_path)
            .arg("--key")
            .arg(&key_path)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the grpcio server");
        let stdout = child.stdout.take().expect("server stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let server = GrpcServer { child, h2c, tls };
        match rx.recv_timeout(PATIENCE) {
            Ok(line) if line.trim() == "ready" => server,
            other => panic!("the grpcio server did not start: {other:?}"),
        }
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
