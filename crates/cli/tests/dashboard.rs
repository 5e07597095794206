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
//! Needs Chromium (scripts/test.sh installs it when missing).

mod common;

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{binary, wait_for, Client, PATIENCE};
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
