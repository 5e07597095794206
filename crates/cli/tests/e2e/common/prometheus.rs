//! A real Prometheus server (Debian's `prometheus` package) as a child
//! process on loopback, scraping the admin listeners a test names, and
//! queried over its HTTP API with curl.
//!
//! The server gets its own temporary directory (configuration and TSDB), a
//! fresh port and a one-second scrape interval; the guard kills it by PID.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use super::{free_port, temp_dir, wait_for};

/// One scrape job: its name, the admin listener, and the `format` query
/// parameter forced on `/metrics` (`None`: Prometheus's own `Accept` decides).
pub struct Job<'a> {
    pub name: &'a str,
    pub target: SocketAddr,
    pub format: Option<&'a str>,
}

/// A running Prometheus server; killed on drop.
pub struct Prometheus {
    child: Child,
    /// Its HTTP API address.
    pub addr: SocketAddr,
    dir: PathBuf,
}

/// The `prometheus` binary, or a panic saying how to install it.
fn binary(name: &str) -> &str {
    let found = Command::new(name).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    if found.is_err() {
        panic!("no `{name}` found; install it: apt-get install -y prometheus (scripts/test.sh does)");
    }
    name
}

impl Prometheus {
    /// Starts a server scraping `jobs` every second; returns once its API answers.
    pub fn start(jobs: &[Job<'_>]) -> Prometheus {
        let dir = temp_dir("prometheus");
        let mut config = String::from("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n");
        for job in jobs {
            config +=
                &format!("  - job_name: {}\n    static_configs:\n      - targets: ['{}']\n", job.name, job.target);
            if let Some(format) = job.format {
                config += &format!("    params:\n      format: ['{format}']\n");
            }
        }
        std::fs::write(dir.join("prometheus.yml"), config).expect("write prometheus.yml");
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("create prometheus.log");
        let child = Command::new(binary("prometheus"))
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn prometheus");
        let prometheus = Prometheus { child, addr, dir };
        wait_for("Prometheus to be ready", || prometheus.get("/-/ready", &[]).filter(|b| b.contains("Ready")));
        prometheus
    }

    /// The body of a GET on the API (`args`: url-encoded as `--data-urlencode`), if it answered 200.
    pub fn get(&self, path: &str, args: &[&str]) -> Option<String> {
        let mut curl = Command::new("curl");
        curl.args(["-sf", "--max-time", "5", "--get"]);
        for a in args {
            curl.args(["--data-urlencode", a]);
        }
        let out = curl.arg(format!("http://{}{path}", self.addr)).output().expect("run curl");
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The `data` of an API answer, as JSON.
    pub fn api(&self, path: &str, args: &[&str]) -> Option<serde_json::Value> {
        let body = self.get(path, args)?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        (v["status"] == "success").then(|| v["data"].clone())
    }

    /// The result vector of an instant query (empty when nothing matched).
    pub fn query(&self, promql: &str) -> Vec<serde_json::Value> {
        let data = wait_for("a query answer", || self.api("/api/v1/query", &[&format!("query={promql}")]));
        data["result"].as_array().cloned().unwrap_or_default()
    }

    /// The single value of an instant query returning one series, if it returns exactly one.
    pub fn value(&self, promql: &str) -> Option<f64> {
        match self.query(promql).as_slice() {
            [one] => one["value"][1].as_str()?.parse().ok(),
            _ => None,
        }
    }

    /// Prometheus's own log (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `promtool check metrics` on `text`: its exit status and output.
pub fn promtool_check(text: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new(binary("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn promtool");
    child.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("feed promtool");
    let out = child.wait_with_output().expect("wait for promtool");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), said)
}
