//! The dashboard of the real `switchyard up`, in headless Chromium (driven
//! over the DevTools protocol by `headless_chrome`).
//!
//! The demo runs on fixed ports (balancer 127.0.0.1:8080, admin and
//! dashboard 127.0.0.1:9090, origins 9101/9102), so this is one test. Load
//! comes from a bounded loop of plain HTTP/1.1 requests. After the dashboard
//! plots a non-zero request rate, the test clicks Drain on `web/origin-a`,
//! waits for the row to say `draining`, and checks with the origin's own
//! counters (`/__origin/stats`) that origin-a receives no new request while
//! origin-b answers everything.
//!
//! A second test runs a pair of nodes with `[cluster]` and reads the peers
//! panel: per-peer connection state and update counts as the API gives them,
//! and the peer shown down once it stops.
//!
//! Needs Chromium (scripts/test.sh installs it when missing).

use crate::common;

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{binary, free_port, wait_for, Client, Origin, Proxy, PATIENCE};
use headless_chrome::protocol::cdp::Page::CaptureScreenshotFormatOption;
use headless_chrome::{Browser, LaunchOptions, Tab};

const BALANCER: &str = "127.0.0.1:8080";
const ADMIN: &str = "127.0.0.1:9090";
const ORIGIN_A: &str = "127.0.0.1:9101";
/// Upper bound on the background load, whatever happens.
const MAX_LOAD_REQUESTS: u32 = 100_000;

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("address")
}

/// `switchyard up`, stopped (SIGTERM, then SIGKILL) on drop.
struct Up(Child);

impl Drop for Up {
    fn drop(&mut self) {
        common::sigterm(self.0.id());
        if common::wait_exit(&mut self.0, Duration::from_secs(5)).is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// One request on a fresh connection (so no keep-alive pins a server).
fn get(at: &str, path: &str) -> common::Response {
    // The admin API answers only loopback Host names when it has no tokens.
    Client::connect(addr(at)).request("GET", path, &[("host", at), ("connection", "close")])
}

fn origin_a_requests() -> u64 {
    get(ORIGIN_A, "/__origin/stats").json()["requests"].as_u64().expect("requests count")
}

fn launch() -> Browser {
    let path = headless_chrome::browser::default_executable()
        .unwrap_or_else(|e| panic!("no Chromium found ({e}); install it: apt-get install -y chromium"));
    let options = LaunchOptions::default_builder()
        .path(Some(path))
        .headless(false) // `--headless=new` below instead of the crate's old-mode flag.
        .sandbox(false)
        .window_size(Some((1400, 1100)))
        .idle_browser_timeout(PATIENCE * 4)
        .args(vec![
            OsStr::new("--headless=new"),
            OsStr::new("--disable-dev-shm-usage"),
            OsStr::new("--hide-scrollbars"),
        ])
        .build()
        .expect("launch options");
    Browser::new(options).expect("start Chromium")
}

fn eval(tab: &Tab, js: &str) -> serde_json::Value {
    tab.evaluate(js, false).ok().and_then(|r| r.value).unwrap_or(serde_json::Value::Null)
}

#[test]
fn dashboard_drains_a_demo_origin() {
    let up = Up(Command::new(binary())
        .arg("up")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn switchyard up"));
    wait_for("the admin API of switchyard up", || {
        std::net::TcpStream::connect(ADMIN).ok()?;
        (get(ADMIN, "/api/v1/health").status == 200).then_some(())
    });

    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            for _ in 0..MAX_LOAD_REQUESTS {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let _ = get(BALANCER, "/");
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };

    let browser = launch();
    let tab = browser.new_tab().expect("tab");
    tab.set_default_timeout(PATIENCE);
    tab.navigate_to(&format!("http://{ADMIN}/")).expect("navigate").wait_until_navigated().expect("loaded");
    wait_for("the requests chart to plot a non-zero rate", || {
        let latest = eval(&tab, "document.getElementById('chart-requests').dataset.latest");
        let latest: serde_json::Value = serde_json::from_str(latest.as_str()?).ok()?;
        latest["requests"].as_f64().filter(|r| *r > 0.0)
    });

    let state = r#"document.querySelector('tr[data-pool="web"][data-server="origin-a"]').dataset.state"#;
    tab.wait_for_element(r#"button[data-action="drain"][data-pool="web"][data-server="origin-a"]"#)
        .expect("drain button")
        .click()
        .expect("click drain");
    wait_for("origin-a to show draining", || (eval(&tab, state) == "draining").then_some(()));
    let png = tab.capture_screenshot(CaptureScreenshotFormatOption::Png, None, None, true).expect("screenshot");
    let _ = std::fs::write(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-up.png"), png);

    stop.store(true, Ordering::Relaxed);
    load.join().expect("load thread");
    let before = origin_a_requests();
    for i in 0..40 {
        let r = get(BALANCER, "/");
        assert_eq!(r.status, 200, "request {i} after the drain");
        assert_eq!(r.origin(), "origin-b", "request {i} after the drain");
    }
    assert_eq!(origin_a_requests(), before, "the drained origin received new requests");
    let stats = get(ADMIN, "/api/v1/stats").json();
    let pools = stats["pools"].as_array().expect("pools");
    let web = pools.iter().find(|p| p["name"] == "web").expect("pool web");
    let a = web["servers"].as_array().expect("servers").iter().find(|s| s["name"] == "origin-a").expect("origin-a");
    assert_eq!(a["state"], "draining");
    drop(up);
}

/// A node of a pair: `[cluster]` on loopback, header persistence on `x-user`.
fn node(name: &str, peer: &str, ports: (u16, u16, u16), peer_cluster: u16, server: SocketAddr) -> String {
    let (listen, admin, cluster) = ports;
    format!(
        "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [cluster]\nname = \"{name}\"\nlisten = \"127.0.0.1:{cluster}\"\nkey = \"dashboard-cluster-key-0123\"\n\
         sync_timeout = \"1s\"\n\n[[cluster.peers]]\nname = \"{peer}\"\naddress = \"127.0.0.1:{peer_cluster}\"\n\n\
         [[service]]\nname = \"web\"\nlisten = \"127.0.0.1:{listen}\"\npool = \"main\"\n\n\
         [[pool]]\nname = \"main\"\npersistence = {{ header = \"x-user\" }}\nservers = [{{ address = \"{server}\" }}]\n"
    )
}

#[test]
fn dashboard_shows_the_cluster_peers() {
    let origin = Origin::start("server-a");
    let (a, b) = ((free_port(), free_port(), free_port()), (free_port(), free_port(), free_port()));
    let lb1 = Proxy::start(&node("lb1", "lb2", a, b.2, origin.addr), addr(&format!("127.0.0.1:{}", a.0)));
    let lb2 = Proxy::start(&node("lb2", "lb1", b, a.2, origin.addr), addr(&format!("127.0.0.1:{}", b.0)));
    let admin = format!("127.0.0.1:{}", a.1);
    for i in 0..50 {
        let user = format!("user-{i}");
        let r = Client::connect(addr(&format!("127.0.0.1:{}", a.0))).request(
            "GET",
            "/",
            &[("x-user", user.as_str()), ("connection", "close")],
        );
        assert_eq!(r.status, 200);
    }
    wait_for("lb2 to acknowledge the 50 updates", || {
        let view = get(&admin, "/api/v1/cluster").json();
        (view["peers"][0]["sent"].as_u64() >= Some(50) && view["peers"][0]["inbound"] == true).then_some(())
    });

    let browser = launch();
    let tab = browser.new_tab().expect("tab");
    tab.set_default_timeout(PATIENCE);
    tab.navigate_to(&format!("http://{admin}/")).expect("navigate").wait_until_navigated().expect("loaded");
    let row = r#"document.querySelector('tr.peer[data-peer="lb2"]')"#;
    let cell = |field: &str| format!(r#"{row}.querySelector('[data-field="{field}"]').textContent"#);
    wait_for("the peers panel to show lb2 connected both ways", || {
        let shown = eval(&tab, &format!("{row} && !document.getElementById('cluster').hidden && {row}.dataset.state"));
        (shown == "up").then_some(())
    });
    let sent: u64 = eval(&tab, &cell("sent")).as_str().and_then(|t| t.parse().ok()).unwrap_or(0);
    assert!(sent >= 50, "the panel shows the updates sent: {sent}");
    assert_eq!(eval(&tab, &cell("dropped")), "0");
    assert!(eval(&tab, "document.getElementById('cluster-node').textContent")
        .as_str()
        .is_some_and(|t| t.starts_with("lb1") && t.contains("synced")));
    eval(&tab, "document.getElementById('cluster').scrollIntoView()");
    let png = tab.capture_screenshot(CaptureScreenshotFormatOption::Png, None, None, true).expect("screenshot");
    let _ = std::fs::write(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-cluster.png"), png);

    drop(lb2);
    wait_for("the panel to show lb2 gone", || {
        let connected = eval(&tab, &format!("{row}.dataset.connected"));
        let inbound = eval(&tab, &format!("{row}.dataset.inbound"));
        (connected == "false" && inbound == "false").then_some(())
    });
    drop(lb1);
}
