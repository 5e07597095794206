//! The dashboard in a real browser: headless Chromium driven over the
//! DevTools protocol (`headless_chrome`, which talks to the browser directly,
//! so no separate driver process is needed as WebDriver would).
//!
//! A fake backend whose counters move is served on 127.0.0.1:0 with tokens;
//! the test signs in through the login field, waits until the requests chart
//! plots a non-zero rate (read from the canvas's `data-latest`), clicks the
//! Drain button of `web/origin-a`, and checks that the fake received the
//! drain and that the row's `data-state` turned `draining`, then reads the
//! cache panel (hit ratio and bytes served from cache). A screenshot is
//! left in `$CARGO_TARGET_TMPDIR/dashboard.png` (and `dashboard-dark.png`).
//!
//! Needs Chromium (`apt-get install chromium`; scripts/test.sh installs it
//! when missing). `CHROME=/path/to/chrome` picks another binary.

mod common;

use std::ffi::OsStr;
use std::time::Duration;

use common::{serve_in_background, wait_for, Call, Fake, ADMIN};
use headless_chrome::protocol::cdp::Emulation::{self, MediaFeature};
use headless_chrome::protocol::cdp::Page::CaptureScreenshotFormatOption;
use headless_chrome::{Browser, LaunchOptions, Tab};
use switchyard_admin::{AdminState, Options, ServerOp};

fn launch() -> Browser {
    let path = headless_chrome::browser::default_executable()
        .unwrap_or_else(|e| panic!("no Chromium found ({e}); install it: apt-get install -y chromium"));
    let options = LaunchOptions::default_builder()
        .path(Some(path))
        // `--headless=new` below; the crate's own flag would add the old mode.
        .headless(false)
        .sandbox(false)
        .window_size(Some((1400, 1300)))
        .idle_browser_timeout(common::PATIENCE * 4)
        .args(vec![
            OsStr::new("--headless=new"),
            OsStr::new("--disable-dev-shm-usage"),
            OsStr::new("--hide-scrollbars"),
        ])
        .build()
        .expect("launch options");
    Browser::new(options).expect("start Chromium")
}

/// Evaluates `js` in the page and returns its value as JSON.
fn eval(tab: &Tab, js: &str) -> serde_json::Value {
    tab.evaluate(js, false).ok().and_then(|r| r.value).unwrap_or(serde_json::Value::Null)
}

#[test]
fn dashboard_plots_live_rates_and_drains_a_server() {
    let fake = Fake::new();
    let options = Options { sample_interval: Duration::from_millis(250), history: 300 };
    let (addr, _server) = serve_in_background(AdminState::with_options(fake.clone(), common::tokens(), options));

    let browser = launch();
    let tab = browser.new_tab().expect("tab");
    tab.set_default_timeout(common::PATIENCE);
    tab.navigate_to(&format!("http://{addr}/")).expect("navigate").wait_until_navigated().expect("page loaded");

    // The API wants a token: the page shows its login field.
    tab.wait_for_element("#login:not([hidden]) #token").expect("login field").click().expect("focus");
    tab.type_str(ADMIN).expect("type token").press_key("Enter").expect("submit");

    let rps = wait_for("the requests chart to plot a non-zero rate", || {
        let latest = eval(&tab, "document.getElementById('chart-requests').dataset.latest");
        let latest: serde_json::Value = serde_json::from_str(latest.as_str()?).ok()?;
        latest["requests"].as_f64().filter(|r| *r > 0.0)
    });
    assert!(rps > 0.0);
    assert_eq!(eval(&tab, "document.getElementById('feed').dataset.feed"), "live");

    let row = r#"tr[data-pool="web"][data-server="origin-a"]"#;
    let state = format!("document.querySelector('{row}').dataset.state");
    assert_eq!(eval(&tab, &state), "up");
    tab.wait_for_element(r#"button[data-action="drain"][data-pool="web"][data-server="origin-a"]"#)
        .expect("drain button")
        .click()
        .expect("click drain");
    wait_for("the row to show draining", || (eval(&tab, &state) == "draining").then_some(()));
    let drained = Call::Server("web".into(), "origin-a".into(), ServerOp::Drain);
    assert!(fake.calls().contains(&drained), "calls: {:?}", fake.calls());
    // Live samples keep it draining (the backend's state, not just the click's answer).
    let points = eval(&tab, "Number(document.getElementById('chart-requests').dataset.points)").as_u64().unwrap_or(0);
    wait_for("another sample", || {
        let now = eval(&tab, "Number(document.getElementById('chart-requests').dataset.points)").as_u64()?;
        (now > points).then_some(())
    });
    assert_eq!(eval(&tab, &state), "draining");
    // Drain is now the current state, so its button is disabled and Enable is not.
    let disabled = |action: &str| {
        eval(&tab, &format!("document.querySelector('{row} button[data-action=\"{action}\"]').disabled"))
    };
    assert_eq!(disabled("drain"), true);
    assert_eq!(disabled("enable"), false);

    // The cache panel: the fake's cache answers 8 of every 10 lookups, 8 KiB per sample.
    let cache = r#"tr.cache[data-service="demo"]"#;
    let ratio = wait_for("the cache panel to show a hit ratio", || {
        let ratio = eval(&tab, &format!("document.querySelector('{cache}')?.dataset.hitRatio"));
        ratio.as_str()?.parse::<f64>().ok()
    });
    assert!((ratio - 0.8).abs() < 1e-9, "hit ratio {ratio}");
    assert_eq!(eval(&tab, "document.getElementById('caches').hidden"), false);
    let cell =
        |field: &str| eval(&tab, &format!("document.querySelector('{cache} [data-field=\"{field}\"]').textContent"));
    assert_eq!(cell("hit-ratio"), "80.0 %");
    assert_eq!(cell("stored"), "4.0 KiB / 1.0 MiB");
    let served = eval(&tab, &format!("Number(document.querySelector('{cache}').dataset.served)")).as_f64();
    assert!(served.is_some_and(|b| b > 0.0), "bytes served from cache per second: {served:?}");

    screenshot(&tab, "dashboard.png");
    // The same page in the dark theme, for whoever reviews the artifacts.
    let dark = MediaFeature { name: "prefers-color-scheme".into(), value: "dark".into() };
    tab.call_method(Emulation::SetEmulatedMedia { media: None, features: Some(vec![dark]) }).expect("dark theme");
    screenshot(&tab, "dashboard-dark.png");
}

/// Saves the page, scrolled to the top, as a PNG in `$CARGO_TARGET_TMPDIR`.
fn screenshot(tab: &Tab, name: &str) {
    eval(tab, "window.scrollTo(0, 0)");
    // Let the next sample redraw the charts in the current theme.
    let points = eval(tab, "document.getElementById('chart-requests').dataset.points").as_str().map(str::to_owned);
    wait_for("a redraw", || {
        (eval(tab, "document.getElementById('chart-requests').dataset.points").as_str() != points.as_deref())
            .then_some(())
    });
    let png = tab.capture_screenshot(CaptureScreenshotFormatOption::Png, None, None, true).expect("screenshot");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&path, png).expect("write screenshot");
    eprintln!("screenshot: {}", path.display());
}
