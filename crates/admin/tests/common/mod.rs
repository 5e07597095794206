//! Test support: a fake [`Backend`] that records every call and whose
//! counters move on each `stats()`, plus helpers to drive the router in
//! process and to serve it on 127.0.0.1:0.
#![allow(dead_code)] // Each test file uses its own subset.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use switchyard_admin::{
    ApiError, Backend, CacheEntriesView, CacheEntryView, CacheKeyView, CacheView, ClassCounts, HealthView,
    HistogramView, MetricsFormat, PersistenceEntryView, PersistenceView, PoolView, ReloadView, ServerOp, ServerView,
    ServiceView, StatsView,
};
use switchyard_config::{AdminToken, Role};
use tower::ServiceExt;

/// How long any single wait in a test may last before it is a failure.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// The admin token of the tests.
pub const ADMIN: &str = "admin-secret";
/// The read-only token of the tests.
pub const READER: &str = "reader-secret";

/// Both test tokens.
pub fn tokens() -> Vec<AdminToken> {
    vec![
        AdminToken { secret: ADMIN.into(), role: Role::Admin },
        AdminToken { secret: READER.into(), role: Role::ReadOnly },
    ]
}

/// A call the fake received that changes or inspects something.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    /// `server(pool, server, op)`.
    Server(String, String, ServerOp),
    /// `persistence(pool, limit)`.
    Persistence(String, usize),
    /// `flush_persistence(pool)`.
    Flush(String),
    /// `validate(source, name)`.
    Validate(String, String),
    /// `reload()`.
    Reload,
    /// `cache_entries(service, key, prefix, limit)`.
    CacheEntries(String, String, bool, usize),
    /// `purge_cache(service, key, prefix)`.
    Purge(String, String, bool),
}

/// A balancer that exists only in memory: pools `web` (origin-a, origin-b,
/// source-ip persistence) and `images` (origin-b), one service `demo` with a
/// cache that answers 8 of every 10 requests (each answer 1 KiB) and holds
/// the keys `demo.test/a` and `demo.test/b`.
pub struct Fake {
    calls: Mutex<Vec<Call>>,
    state: Mutex<FakeState>,
    /// `reload()` answers 409 like the demo.
    pub demo: bool,
}

struct FakeState {
    ticks: u64,
    generation: u64,
    pools: Vec<PoolView>,
}

impl Fake {
    /// A fresh fake with a configuration file (reload works).
    pub fn new() -> Arc<Fake> {
        Arc::new(Fake::build(false))
    }

    /// A fresh fake running the demo (no file: reload is a conflict).
    pub fn demo() -> Arc<Fake> {
        Arc::new(Fake::build(true))
    }

    fn build(demo: bool) -> Fake {
        let server = |pool: &str, name: &str, port: u16| ServerView {
            pool: pool.into(),
            name: name.into(),
            address: format!("127.0.0.1:{port}"),
            state: "up".into(),
            weight: 100,
            configured_weight: 100,
            ..ServerView::default()
        };
        let pools = vec![
            PoolView {
                name: "web".into(),
                algorithm: "round-robin".into(),
                persistence: Some("source-ip".into()),
                servers: vec![server("web", "origin-a", 9101), server("web", "origin-b", 9102)],
            },
            PoolView {
                name: "images".into(),
                algorithm: "least-conn".into(),
                persistence: None,
                servers: vec![server("images", "origin-b", 9102)],
            },
        ];
        Fake { calls: Mutex::new(Vec::new()), state: Mutex::new(FakeState { ticks: 0, generation: 1, pools }), demo }
    }

    /// Every recorded call, in order.
    pub fn calls(&self) -> Vec<Call> {
        lock(&self.calls).clone()
    }

    fn record(&self, call: Call) {
        lock(&self.calls).push(call);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Backend for Fake {
    fn health(&self) -> HealthView {
        HealthView {
            status: "ok".into(),
            version: "0.1.0-test".into(),
            uptime_s: 61,
            workers: 2,
            generation: lock(&self.state).generation,
            config_source: if self.demo { "<demo>".into() } else { "/etc/switchyard.toml".into() },
        }
    }

    fn config(&self) -> String {
        "[[service]]\nname = \"demo\"\n".into()
    }

    /// Every call advances the counters: 10 requests (split over the servers
    /// in rotation), 1000 bytes in, 10000 out, latencies in the 1–2 ms bucket.
    fn stats(&self) -> StatsView {
        let mut state = lock(&self.state);
        state.ticks += 1;
        let ticks = state.ticks;
        for pool in &mut state.pools {
            let serving: Vec<usize> = (0..pool.servers.len()).filter(|&i| pool.servers[i].state == "up").collect();
            for &i in &serving {
                let s = &mut pool.servers[i];
                s.requests += 10 / serving.len() as u64;
                s.responses.xx2 = s.requests;
            }
        }
        let service = ServiceView {
            name: "demo".into(),
            mode: "http".into(),
            listeners: vec!["127.0.0.1:8080".into()],
            connections_current: 4,
            connections_total: ticks * 2,
            requests: ticks * 10,
            responses: ClassCounts { xx2: ticks * 10, ..ClassCounts::default() },
            bytes_in: ticks * 1000,
            bytes_out: ticks * 10_000,
            latency: HistogramView {
                bounds_us: vec![1000, 2000, 5000],
                counts: vec![0, ticks * 10, 0, 0],
                sum_us: ticks * 15_000,
                count: ticks * 10,
            },
            datagrams: None,
        };
        let cache = CacheView {
            service: "demo".into(),
            size: 1 << 20,
            bytes: 4096,
            keys: 2,
            hits: ticks * 8,
            misses: ticks * 2,
            served_bytes: ticks * 8 * 1024,
            ..CacheView::default()
        };
        StatsView { services: vec![service], pools: state.pools.clone(), caches: vec![cache] }
    }

    fn metrics(&self, _format: MetricsFormat) -> String {
        "# TYPE switchyard_requests_total counter\nswitchyard_requests_total{service=\"demo\"} 42\n".into()
    }

    fn server(&self, pool: &str, server: &str, op: ServerOp) -> Result<ServerView, ApiError> {
        self.record(Call::Server(pool.into(), server.into(), op));
        let mut state = lock(&self.state);
        let p = state
            .pools
            .iter_mut()
            .find(|p| p.name == pool)
            .ok_or_else(|| ApiError::NotFound(format!("no pool `{pool}`")))?;
        let s = p
            .servers
            .iter_mut()
            .find(|s| s.name == server)
            .ok_or_else(|| ApiError::NotFound(format!("no server `{server}` in pool `{pool}`")))?;
        match op {
            ServerOp::Enable => s.state = "up".into(),
            ServerOp::Disable => s.state = "maintenance".into(),
            ServerOp::Drain => s.state = "draining".into(),
            ServerOp::Weight(w) => s.weight = w,
        }
        Ok(s.clone())
    }

    fn persistence(&self, pool: &str, limit: usize) -> Result<PersistenceView, ApiError> {
        self.record(Call::Persistence(pool.into(), limit));
        self.check_persistent(pool)?;
        let entries = (0..3)
            .take(limit)
            .map(|i| PersistenceEntryView {
                key: format!("10.0.0.{i}"),
                server: "origin-a".into(),
                idle_s: f64::from(i),
            })
            .collect();
        Ok(PersistenceView { pool: pool.into(), kind: "source-ip".into(), entries, total: 3 })
    }

    fn flush_persistence(&self, pool: &str) -> Result<u64, ApiError> {
        self.record(Call::Flush(pool.into()));
        self.check_persistent(pool)?;
        Ok(3)
    }

    fn purge_cache(&self, service: &str, key: &str, prefix: bool) -> Result<u64, ApiError> {
        self.record(Call::Purge(service.into(), key.into(), prefix));
        Fake::check_cache(service)?;
        Ok(u64::from(prefix) + 1)
    }

    fn cache_entries(
        &self,
        service: &str,
        key: &str,
        prefix: bool,
        limit: usize,
    ) -> Result<CacheEntriesView, ApiError> {
        self.record(Call::CacheEntries(service.into(), key.into(), prefix, limit));
        Fake::check_cache(service)?;
        let keys: Vec<CacheKeyView> = ["demo.test/a", "demo.test/b"]
            .into_iter()
            .filter(|k| if prefix { k.starts_with(key) } else { *k == key })
            .map(|k| CacheKeyView {
                key: k.into(),
                variants: vec![CacheEntryView {
                    status: 200,
                    age_s: 12,
                    fresh_for_s: 48.0,
                    size: 1024,
                    stored_bytes: 1300,
                    hits: 5,
                    ..CacheEntryView::default()
                }],
                partial: None,
            })
            .collect();
        let matched = keys.len() as u64;
        Ok(CacheEntriesView { service: service.into(), matched, keys: keys.into_iter().take(limit).collect() })
    }

    fn validate(&self, source: &str, name: &str) -> Result<Vec<String>, Vec<String>> {
        self.record(Call::Validate(source.into(), name.into()));
        if source.contains("invalid") {
            Err(vec![format!("{name}:1:1: error: unknown key `invalid`"), "  hint: remove it".into()])
        } else {
            Ok(vec![format!("{name}: warning: no health check")])
        }
    }

    fn reload(&self) -> Result<ReloadView, ApiError> {
        self.record(Call::Reload);
        if self.demo {
            return Err(ApiError::Conflict("the demo has no configuration file to reload".into()));
        }
        let mut state = lock(&self.state);
        state.generation += 1;
        Ok(ReloadView { generation: state.generation, summary: "1 pool changed".into(), warnings: vec![] })
    }
}

impl Fake {
    fn check_cache(service: &str) -> Result<(), ApiError> {
        match service {
            "demo" => Ok(()),
            other => Err(ApiError::NotFound(format!("no service named `{other}`"))),
        }
    }

    fn check_persistent(&self, pool: &str) -> Result<(), ApiError> {
        let state = lock(&self.state);
        match state.pools.iter().find(|p| p.name == pool) {
            None => Err(ApiError::NotFound(format!("no pool `{pool}`"))),
            Some(p) if p.persistence.is_none() => Err(ApiError::Conflict(format!("pool `{pool}` has no persistence"))),
            Some(_) => Ok(()),
        }
    }
}

/// An answer from the in-process router.
pub struct Answer {
    /// Status code.
    pub status: StatusCode,
    /// Headers.
    pub headers: axum::http::HeaderMap,
    /// Body text.
    pub body: String,
}

impl Answer {
    /// The body as JSON (panics with the body when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The `error` field of a JSON error body.
    pub fn error(&self) -> String {
        self.json()["error"].as_str().unwrap_or_default().to_owned()
    }
}

/// Sends one request through `router` (no socket).
pub async fn send(
    router: &axum::Router,
    method: &str,
    uri: &str,
    token: Option<&str>,
    body: impl Into<Body>,
) -> Answer {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(t) = token {
        request = request.header("authorization", format!("Bearer {t}"));
    }
    let request = request.body(body.into()).expect("request");
    let response = router.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.expect("body");
    Answer { status, headers, body: String::from_utf8_lossy(&bytes).into_owned() }
}

/// Serves `state` on 127.0.0.1:0 on a runtime of its own, in a background
/// thread; returns the address and a stopper (drop or call to stop).
pub fn serve_in_background(state: switchyard_admin::AdminState) -> (SocketAddr, Stopper) {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        runtime.block_on(async move {
            let shutdown = async move {
                let _ = stop_rx.await;
            };
            let (addr, served) = switchyard_admin::serve_with("127.0.0.1:0".parse().expect("addr"), state, shutdown)
                .await
                .expect("serve");
            addr_tx.send(addr).expect("send address");
            served.await;
        });
    });
    let addr = addr_rx.recv_timeout(PATIENCE).expect("server started");
    (addr, Stopper { stop: Some(stop_tx), thread: Some(thread) })
}

/// Stops a background server when dropped.
pub struct Stopper {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Stopper {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Polls `f` every 50 ms until it returns `Some`, or panics after [`PATIENCE`].
pub fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Awaits `f` for at most [`PATIENCE`].
pub async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, f).await.unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}
