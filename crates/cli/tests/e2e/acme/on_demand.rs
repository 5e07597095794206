//! On-demand certificates (`tls.acme.on_demand`) against Pebble: a name that
//! has no certificate gets one at its first handshake when the allow check
//! passes (`allow` and the `ask` endpoint), ordered once however many
//! handshakes ask for it at the same time; a refused name causes no order,
//! is answered from the deny cache afterwards, and disturbs nothing else.
//!
//! The `ask` endpoint is a small HTTP/1.1 server of this file (a test
//! fixture: it answers 200 or 403 by name and records what it was asked).
//! Pebble, its DNS and the clients are as in the parent module.

use super::*;

use std::collections::HashSet;
use std::io::BufRead;
use std::net::TcpListener;

/// How long the configured `wait` lets a handshake be held here, and how long
/// a client waits for it (both well beyond Pebble's issuance time).
const HOLD: Duration = Duration::from_secs(60);

/// An `ask` endpoint: `GET /allowed?domain=NAME` answers 200 for the names in
/// `allowed`, 403 for the others; every name asked is recorded.
struct Ask {
    addr: SocketAddr,
    asked: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Ask {
    fn start(allowed: &[&str]) -> Ask {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the ask endpoint");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let allowed: HashSet<String> = allowed.iter().map(|s| s.to_string()).collect();
        let (asked, stop) = (Arc::new(Mutex::new(Vec::new())), Arc::new(AtomicBool::new(false)));
        let (log, stopping) = (asked.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => answer(stream, &allowed, &log),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Ask { addr, asked, stop, thread: Some(thread) }
    }

    fn url(&self) -> String {
        format!("http://{}/allowed", self.addr)
    }

    /// The names asked about, in order.
    fn asked(&self) -> Vec<String> {
        self.asked.lock().expect("lock").clone()
    }
}

impl Drop for Ask {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn answer(stream: TcpStream, allowed: &HashSet<String>, log: &Mutex<Vec<String>>) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut reader = std::io::BufReader::new(&stream);
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    // Drain the header block.
    let mut header = String::new();
    while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
        header.clear();
    }
    let name = line.split_whitespace().nth(1).and_then(|target| target.split_once("domain=")).map(|(_, n)| n);
    let name = name.unwrap_or_default().to_string();
    let status = if allowed.contains(&name) { "200 OK" } else { "403 Forbidden" };
    log.lock().expect("lock").push(name);
    let mut out = &stream;
    let _ = write!(out, "HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
}

/// `tls.acme` with `on_demand`, by http-01, stored under `storage`.
fn on_demand_tls(pebble: &Pebble, domains: &[&str], storage: &Path, on_demand: &str) -> String {
    let wait = format!("wait = \"{}s\"", HOLD.as_secs());
    pebble.acme(domains, "http-01", storage, &format!(", on_demand = {{ {on_demand}, {wait} }}"))
}

/// The value of one sample of the exposition, 0 when absent.
fn sample(metrics: &str, line_start: &str) -> u64 {
    metrics
        .lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn orders_at_pebble(pebble: &Pebble) -> usize {
    pebble.log().matches("Issued certificate serial").count()
}

/// An allowed unknown name gets its certificate at its first handshake; a
/// second connection reuses it (no second order); handshakes that arrive
/// together for another name share one order; a name outside `allow` is never
/// asked about and its handshake is refused (the service has no other
/// certificate).
#[test]
fn on_demand_issues_at_the_first_handshake_and_reuses_the_certificate() {
    let (http, https, admin) = (proxy_addr(), proxy_addr(), proxy_addr());
    let Some(pebble) = Pebble::start(http.port(), https.port(), 7_776_000) else { return };
    let origin = Origin::start("o");
    let ask = Ask::start(&["a.shops.example", "b.shops.example", "c.shops.example"]);
    let storage = temp_dir("acme-storage");
    let od = format!("ask = \"{}\", allow = [\"*.shops.example\"], max_orders = 2", ask.url());
    let tls = on_demand_tls(&pebble, &[], &storage, &od);
    let proxy = Proxy::start(&config(http, admin, origin.addr, &[("shops", https, tls)]), http);
    let client = pebble.client(&[b"http/1.1"]);
    let logs = || format!("{}\n{}", proxy.log(), pebble.log());

    // The first handshake is held while the certificate is ordered, then completes with it.
    let started = Instant::now();
    let mut first = connect_within(https, &client, "a.shops.example", HOLD + Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("first handshake: {e}\n{}", logs()));
    let held = started.elapsed();
    let serial_a = serial(&first);
    assert_eq!(get(&mut first, "/", "a.shops.example").expect("GET").0, 200);
    // A second connection gets the same certificate: no second order.
    let started = Instant::now();
    let mut second = connect(https, &client, "a.shops.example").expect("second handshake");
    // Reported, not asserted (timings are not behaviour).
    eprintln!(
        "on demand: first handshake held {held:?} (ask + order + http-01 at Pebble), second {:?}",
        started.elapsed()
    );
    assert_eq!(serial(&second), serial_a, "the second connection reuses the certificate");
    assert_eq!(get(&mut second, "/", "a.shops.example").expect("GET").0, 200);
    assert_eq!(ask.asked(), ["a.shops.example"], "asked once");
    assert_eq!(orders_at_pebble(&pebble), 1, "one order at Pebble\n{}", pebble.log());

    // Handshakes arriving together for a new name share one order.
    let together: Vec<_> = (0..4)
        .map(|_| {
            let client = client.clone();
            std::thread::spawn(move || {
                connect_within(https, &client, "b.shops.example", HOLD + Duration::from_secs(30)).map(|t| serial(&t))
            })
        })
        .collect();
    let serials: Vec<String> = together
        .into_iter()
        .map(|t| t.join().expect("thread").unwrap_or_else(|e| panic!("concurrent handshake: {e}\n{}", logs())))
        .collect();
    assert!(serials.iter().all(|s| *s == serials[0]) && serials[0] != serial_a, "{serials:?}");
    assert_eq!(ask.asked(), ["a.shops.example", "b.shops.example"]);
    assert_eq!(orders_at_pebble(&pebble), 2, "{}", pebble.log());

    // Outside `allow`: never asked, no order, the handshake refused (no certificate to fall back on).
    assert!(connect(https, &client, "other.example").is_err());
    assert!(connect(https, &client, "x.y.shops.example").is_err());
    assert_eq!(ask.asked().len(), 2);
    assert_eq!(orders_at_pebble(&pebble), 2);
    // Allowed, but `max_orders` (2 per hour) are spent: no order, the handshake refused.
    assert!(connect_within(https, &client, "c.shops.example", HOLD).is_err());
    assert_eq!(orders_at_pebble(&pebble), 2);

    // Stored privately, like the others.
    let server_dir = std::fs::read_dir(&storage)
        .expect("storage")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .expect("a directory per ACME server");
    for name in ["a.shops.example", "b.shops.example"] {
        assert_eq!(mode(&server_dir.join(name)), 0o700, "{name}");
        for file in ["key.pem", "chain.pem"] {
            assert_eq!(mode(&server_dir.join(name).join(file)), 0o600, "{name}/{file}");
        }
    }
    // Metrics, the admin API and the log.
    let m = metrics(admin);
    let results = "switchyard_acme_on_demand_total{service=\"shops\",result=";
    assert_eq!(sample(&m, &format!("{results}\"issued\"}}")), 2, "{m}");
    assert_eq!(sample(&m, &format!("{results}\"denied\"}}")), 2, "{m}");
    assert_eq!(sample(&m, &format!("{results}\"limited\"}}")), 1, "{m}");
    assert_eq!(sample(&m, "switchyard_acme_on_demand_certificates{service=\"shops\"}"), 2, "{m}");
    let view = certificates(admin);
    let parent = view.iter().find(|c| c["issued_on_demand"] == false).expect("the service's entry");
    assert_eq!(parent["state"], "on-demand", "{view:?}");
    assert_eq!(parent["on_demand"]["certificates"], 2, "{view:?}");
    let recent = parent["on_demand"]["recent"].as_array().cloned().unwrap_or_default();
    assert!(
        recent
            .iter()
            .any(|r| r["name"] == "c.shops.example" && r["reason"].as_str().is_some_and(|w| w.contains("max_orders"))),
        "{recent:?}"
    );
    let a = view.iter().find(|c| c["domains"][0] == "a.shops.example").expect("a.shops.example listed");
    assert_eq!((a["issued_on_demand"].clone(), a["state"].clone()), (true.into(), "valid".into()), "{a}");
    assert_eq!(a["serial"].as_str(), Some(serial_a.as_str()), "{a}");
    let log = proxy.log();
    assert_eq!(log.matches("ACME certificate issued on demand and installed").count(), 2, "{log}");
}

/// A name the `ask` endpoint refuses (403) causes no order, is answered from
/// the deny cache on the next handshake (not asked again), and gets the
/// service's own certificate (for `domains`); the service's other names and
/// the plain service are served throughout.
#[test]
fn on_demand_refused_names_cause_no_order_and_disturb_nothing() {
    let (http, https, admin) = (proxy_addr(), proxy_addr(), proxy_addr());
    let Some(pebble) = Pebble::start(http.port(), https.port(), 7_776_000) else { return };
    let origin = Origin::start("o");
    let ask = Ask::start(&["ok.shops.example"]);
    let storage = temp_dir("acme-storage");
    let od = format!("ask = \"{}\", deny_for = \"10m\"", ask.url());
    let tls = on_demand_tls(&pebble, &["www.shops.example"], &storage, &od);
    let proxy = Proxy::start(&config(http, admin, origin.addr, &[("shops", https, tls)]), http);
    let client = pebble.client(&[b"http/1.1"]);
    let logs = || format!("{}\n{}", proxy.log(), pebble.log());
    // The service's own certificate first.
    wait_long("the certificate of `domains`", ISSUANCE, logs, || connect(https, &client, "www.shops.example").ok());
    let orders = orders_at_pebble(&pebble);

    for _ in 0..3 {
        // The default certificate (www.shops.example) is not valid for the refused name.
        let refused = connect(https, &client, "denied.shops.example").expect_err("a refused name has no certificate");
        assert!(format!("{refused:?}").contains("NotValidForName"), "{refused:?}");
        let r = Client::connect(http).request("GET", "/", &[("host", "x"), ("connection", "close")]);
        assert_eq!(r.status, 200, "the plain service is served");
        let mut www = connect(https, &client, "www.shops.example").expect("the service's own name");
        assert_eq!(get(&mut www, "/", "www.shops.example").expect("GET").0, 200);
    }
    assert_eq!(ask.asked(), ["denied.shops.example"], "asked once, then answered from the deny cache");
    assert_eq!(orders_at_pebble(&pebble), orders, "no order for a refused name\n{}", pebble.log());
    assert!(!storage
        .read_dir()
        .expect("storage")
        .filter_map(Result::ok)
        .any(|d| d.path().join("denied.shops.example").exists()));

    let m = metrics(admin);
    let results = "switchyard_acme_on_demand_total{service=\"shops\",result=";
    assert_eq!(sample(&m, &format!("{results}\"denied\"}}")), 1, "{m}");
    assert_eq!(sample(&m, &format!("{results}\"cached\"}}")), 2, "{m}");
    assert_eq!(sample(&m, &format!("{results}\"issued\"}}")), 0, "{m}");
    let view = certificates(admin);
    let recent = &view[0]["on_demand"]["recent"];
    assert_eq!(recent[0]["name"], "denied.shops.example", "{view:?}");
    assert!(recent[0]["reason"].as_str().is_some_and(|r| r.contains("403")), "{view:?}");
    let log = proxy.log();
    assert!(log.contains("on-demand certificate refused"), "{log}");

    // An allowed name of the same service still gets its certificate.
    let ok = connect_within(https, &client, "ok.shops.example", HOLD + Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("allowed name: {e}\n{}", logs()));
    assert_ne!(serial(&ok), "");
    assert_eq!(orders_at_pebble(&pebble), orders + 1);
}

/// A certificate issued on demand is renewed like the others (20-second
/// certificates, profile `shortlived`): the same name is later served a new one.
#[test]
fn on_demand_certificates_are_renewed() {
    let (http, https, admin) = (proxy_addr(), proxy_addr(), proxy_addr());
    let Some(pebble) = Pebble::start(http.port(), https.port(), 20) else { return };
    let origin = Origin::start("o");
    let storage = temp_dir("acme-storage");
    let tls = pebble.acme(
        &[],
        "http-01",
        &storage,
        ", profile = \"shortlived\", on_demand = { allow = [\"r.shops.example\"], wait = \"60s\" }",
    );
    let proxy = Proxy::start(&config(http, admin, origin.addr, &[("shops", https, tls)]), http);
    let client = pebble.client(&[b"http/1.1"]);
    let logs = || format!("{}\n{}", proxy.log(), pebble.log());
    let first = connect_within(https, &client, "r.shops.example", HOLD + Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("first handshake: {e}\n{}", logs()));
    let first = serial(&first);
    let renewed = wait_long("a renewed certificate", Duration::from_secs(120), logs, || {
        let s = serial(&connect(https, &client, "r.shops.example").ok()?);
        (s != first).then_some(s)
    });
    assert_ne!(renewed, first);
    let view = certificates(admin);
    let child = view.iter().find(|c| c["domains"][0] == "r.shops.example").expect("listed");
    assert!(child["issued"].as_u64().is_some_and(|n| n >= 2), "{child}");
    let log = proxy.log();
    assert!(
        log.lines().any(|l| l.contains("ACME certificate issued and installed") && l.contains("r.shops.example")),
        "{log}"
    );
}

/// By tls-alpn-01 (Pebble's http-01 port is dead): the validation handshake for
/// the name being ordered is answered, not held behind its own order. After a
/// restart, the stored certificate is read at the name's first handshake (the
/// `ask` endpoint asked again), with no new order.
#[test]
fn on_demand_by_tls_alpn01_and_reused_after_a_restart() {
    let (http, https, admin) = (proxy_addr(), proxy_addr(), proxy_addr());
    let Some(pebble) = Pebble::start(dead_addr().port(), https.port(), 7_776_000) else { return };
    let origin = Origin::start("o");
    let ask = Ask::start(&["t.shops.example"]);
    let storage = temp_dir("acme-storage");
    let od = format!("ask = \"{}\", wait = \"{}s\"", ask.url(), HOLD.as_secs());
    let tls = pebble.acme(&[], "tls-alpn-01", &storage, &format!(", on_demand = {{ {od} }}"));
    let file =
        write_temp("acme-on-demand", "switchyard.toml", &config(http, admin, origin.addr, &[("shops", https, tls)]));
    let proxy = Proxy::run_file(&file, http);
    let client = pebble.client(&[b"h2", b"http/1.1"]);
    let logs = || format!("{}\n{}", proxy.log(), pebble.log());
    let first = connect_within(https, &client, "t.shops.example", HOLD + Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("first handshake: {e}\n{}", logs()));
    assert_eq!(first.conn.alpn_protocol(), Some(&b"h2"[..]));
    let first = serial(&first);
    assert_eq!(orders_at_pebble(&pebble), 1, "{}", pebble.log());
    drop(proxy);

    let proxy = Proxy::run_file(&file, http);
    let again = connect_within(https, &client, "t.shops.example", HOLD + Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("after the restart: {e}\n{}", proxy.log()));
    assert_eq!(serial(&again), first, "the stored certificate is reused");
    assert_eq!(orders_at_pebble(&pebble), 1, "no new order\n{}", pebble.log());
    assert_eq!(ask.asked(), ["t.shops.example", "t.shops.example"], "asked again after the restart");
    let m = metrics(admin);
    assert_eq!(sample(&m, "switchyard_acme_on_demand_total{service=\"shops\",result=\"loaded\"}"), 1, "{m}");
    assert_eq!(sample(&m, "switchyard_acme_on_demand_total{service=\"shops\",result=\"issued\"}"), 0, "{m}");
}

/// `switchyard check` refuses on-demand issuance without an allow check.
#[test]
fn on_demand_without_an_allow_check_is_refused() {
    for on_demand in ["{}", "{ allow = [] }", "{ max_certificates = 5 }"] {
        let toml = format!(
            "[[service]]\nname = \"shops\"\nmode = \"https\"\nlisten = \"127.0.0.1:8443\"\npool = \"main\"\n\
             tls = {{ acme = {{ directory = \"https://acme.example/dir\", on_demand = {on_demand} }} }}\n\n\
             [[pool]]\nname = \"main\"\nservers = [{{ address = \"127.0.0.1:9001\" }}]\n"
        );
        let file = write_temp("acme-on-demand", "switchyard.toml", &toml);
        let (code, out, err) = check(&file);
        assert_ne!(code, 0, "{on_demand}: {out}{err}");
        let text = format!("{out}{err}");
        assert!(text.contains("`on_demand` has no allow check"), "{on_demand}: {text}");
        assert!(text.contains("ask = ") && text.contains("allow = "), "the hint names both checks: {text}");
    }
}
