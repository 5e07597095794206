//! The admin API's view of the running engine: [`switchyard_admin::Backend`]
//! implemented over the engine's [`Control`]. Every change goes through
//! `Control::apply`, the same path as SIGHUP.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use switchyard_admin::backend::{
    ApiError, Backend, CacheEntriesView, CacheEntryView, CacheKeyView, CachePartialView, CacheView, CertificateView,
    ClassCounts, ClusterView, DatagramCounts, HealthView, HistogramView, OnDemandRefusal, OnDemandView, PeerView,
    PersistenceEntryView, PersistenceView, PoolView, ReloadView, ServerOp, ServerView, ServiceView, StatsView,
};
use switchyard_admin::MetricsFormat;
use switchyard_config::{Algorithm, Mode, Persistence};
use switchyard_engine::metrics::{
    self, AcmeRow, ByClass, ExpositionView, HistogramSnapshot, PeerRow, ProcessGauges, ServerRow,
};
use switchyard_engine::{Applied, ApplyError, Change, Control, Generation};

use crate::commands::{reload_file, ReloadError};

/// The engine as the admin API sees it.
pub struct EngineBackend {
    control: Arc<Control>,
    /// The configuration file (`None` for the embedded demo).
    file: Option<PathBuf>,
    /// TOML text of the configuration last applied.
    source: Mutex<String>,
    started: Instant,
    reloads: Mutex<(u64, u64)>,
}

impl EngineBackend {
    /// A backend for `control`, running `source` (read from `file` when there is one).
    pub fn new(control: Arc<Control>, file: Option<PathBuf>, source: String) -> Self {
        EngineBackend {
            control,
            file,
            source: Mutex::new(source),
            started: Instant::now(),
            reloads: Mutex::new((0, 0)),
        }
    }

    /// Re-reads the file and applies it (SIGHUP and the API both come here).
    pub fn reload_now(&self) -> Result<Applied, ReloadError> {
        let text = self.file.as_ref().and_then(|f| std::fs::read_to_string(f).ok());
        let result = reload_file(&self.control, self.file.as_deref());
        let mut counts = self.reloads.lock().unwrap_or_else(|e| e.into_inner());
        match &result {
            Ok(_) => {
                counts.0 += 1;
                if let Some(text) = text {
                    *self.source.lock().unwrap_or_else(|e| e.into_inner()) = text;
                }
            }
            Err(_) => counts.1 += 1,
        }
        result
    }
}

fn api_error(e: ApplyError) -> ApiError {
    match e {
        ApplyError::NotFound(m) => ApiError::NotFound(m),
        ApplyError::BadInput(m) => ApiError::BadRequest(m),
        other => ApiError::Conflict(other.to_string()),
    }
}

fn unix(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A service's certificate from ACME and the names it issued on demand.
fn certificate_views(m: &switchyard_engine::acme::Managed) -> Vec<CertificateView> {
    let mut views = vec![certificate_view(m)];
    if let Some(od) = &m.on_demand {
        views.extend(od.children().iter().map(|c| certificate_view(c)));
    }
    views
}

/// What a service's on-demand issuance holds and decided.
fn on_demand_view(od: &switchyard_engine::acme::on_demand::OnDemand) -> OnDemandView {
    let children = od.children();
    let issued = children.iter().filter(|c| c.has_certificate()).count() as u64;
    OnDemandView {
        certificates: issued,
        pending: children.len() as u64 - issued,
        results: od.counters.all().into_iter().map(|(r, n)| (r.to_string(), n)).collect(),
        recent: od
            .recent()
            .into_iter()
            .map(|r| OnDemandRefusal { name: r.name, reason: r.reason, at: unix(r.at) })
            .collect(),
    }
}

/// A certificate from ACME, its state and what the operator should know.
fn certificate_view(m: &switchyard_engine::acme::Managed) -> CertificateView {
    let status = m.status();
    let now = std::time::SystemTime::now();
    let state = match &status.current {
        // A service whose names are all issued on demand has no certificate of its own.
        None if m.settings.domains.is_empty() => "on-demand",
        None => "pending",
        Some(c) if c.not_after <= now => "expired",
        Some(c) if c.expiring(now) => "expiring",
        Some(_) => "valid",
    };
    let warning = match (state, &status.last_error) {
        ("expired", _) => Some("the certificate has expired".to_string()),
        ("expiring", _) => Some("the certificate expires soon and is not renewed yet".to_string()),
        (_, Some(e)) => Some(format!("{} failed attempt(s), retrying: {e}", status.failures)),
        _ => None,
    };
    CertificateView {
        service: m.service.clone(),
        domains: m.settings.domains.clone(),
        directory: m.settings.directory.clone(),
        challenge: m.settings.challenge.name().to_string(),
        state: state.to_string(),
        serial: status.current.as_ref().map(|c| c.serial.clone()),
        not_before: status.current.as_ref().map(|c| unix(c.not_before)),
        not_after: status.current.as_ref().map(|c| unix(c.not_after)),
        next_attempt: status.next_attempt.map(unix),
        ari: status.ari,
        failures: status.failures,
        last_error: status.last_error,
        issued: m.counters.issued.load(std::sync::atomic::Ordering::Relaxed),
        warning,
        issued_on_demand: m.child,
        on_demand: m.on_demand.as_deref().map(on_demand_view),
    }
}

fn acme_row(m: &switchyard_engine::acme::Managed) -> AcmeRow {
    let status = m.status();
    let read = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    AcmeRow {
        service: m.service.clone(),
        not_after: status.current.as_ref().map(|c| unix(c.not_after)),
        issued: read(&m.counters.issued),
        failed: read(&m.counters.failed),
        consecutive_failures: u64::from(status.failures),
        on_demand: m.on_demand.as_ref().map(|od| {
            let held = od.children().iter().filter(|c| c.has_certificate()).count() as u64;
            (held, od.counters.all())
        }),
    }
}

/// Every service's cache, in configuration order.
fn cache_views(gen: &Generation) -> Vec<CacheView> {
    let read = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    gen.config
        .services
        .iter()
        .zip(&gen.caches)
        .filter_map(|(s, c)| {
            let c = c.as_ref()?;
            Some(CacheView {
                service: s.name.clone(),
                size: c.config.size,
                bytes: read(&c.stats.bytes),
                keys: c.key_count(),
                hits: read(&c.stats.hits),
                misses: read(&c.stats.misses),
                stale: read(&c.stats.stale),
                revalidated: read(&c.stats.revalidated),
                evictions: read(&c.stats.evictions),
                served_bytes: read(&c.stats.served_bytes),
                pieces: read(&c.stats.pieces),
            })
        })
        .collect()
}

fn cache_key_view(k: switchyard_engine::cache::KeyView) -> CacheKeyView {
    let variants = k
        .variants
        .into_iter()
        .map(|e| CacheEntryView {
            status: e.status,
            vary: e.vary.into_iter().collect(),
            age_s: e.age.as_secs(),
            fresh_for_s: e.fresh_for,
            size: e.size,
            stored_bytes: e.stored,
            hits: e.hits,
        })
        .collect();
    let partial = k.partial.map(|(held, length)| CachePartialView { held, length });
    CacheKeyView { key: k.key, variants, partial }
}

/// `ByClass` is indexed like [`metrics::CLASSES`]: `none` first.
fn classes(c: &ByClass) -> ClassCounts {
    ClassCounts { none: c.0[0], xx1: c.0[1], xx2: c.0[2], xx3: c.0[3], xx4: c.0[4], xx5: c.0[5] }
}

fn histogram(h: &HistogramSnapshot) -> HistogramView {
    let bounds_us = (0..h.buckets.len()).filter_map(metrics::upper_bound).collect();
    HistogramView { bounds_us, counts: h.buckets.clone(), sum_us: h.sum_us, count: h.count }
}

fn algorithm(a: Algorithm) -> &'static str {
    match a {
        Algorithm::RoundRobin => "round-robin",
        Algorithm::LeastConnections => "least-connections",
        Algorithm::RandomTwo => "random-two",
        Algorithm::SourceHash => "source-hash",
        Algorithm::Hash => "hash",
        Algorithm::Maglev => "maglev",
        Algorithm::First => "first",
    }
}

fn persistence(p: &Persistence) -> String {
    match p {
        Persistence::CookieInsert(c) => format!("cookie {}", c.name),
        Persistence::Source(_) => "source".to_string(),
        Persistence::Header { name, .. } => format!("header {name}"),
        Persistence::CookieLearn { name, .. } => format!("cookie-learn {name}"),
        Persistence::RdpCookie(_) => "rdp_cookie".to_string(),
        Persistence::Sni(_) => "sni".to_string(),
    }
}

fn server_view(gen: &Generation, p: usize, s: usize) -> ServerView {
    let pool = &gen.config.pools[p];
    let live = &gen.pools[p].servers[s];
    let totals = live.metrics.snapshot();
    ServerView {
        pool: pool.name.clone(),
        name: live.name.to_string(),
        address: live.addr.to_string(),
        state: live.status().to_string(),
        weight: live.ramped_weight(pool.servers[s].slow_start),
        configured_weight: pool.servers[s].weight,
        backup: pool.servers[s].backup,
        active: u64::from(live.in_flight()),
        requests: totals.requests,
        responses: classes(&totals.responses),
        failures: totals.failures.0.iter().sum(),
    }
}

impl Backend for EngineBackend {
    fn health(&self) -> HealthView {
        let gen = self.control.generation();
        HealthView {
            status: "ok".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            uptime_s: self.started.elapsed().as_secs(),
            workers: self.control.workers(),
            generation: gen.number,
            config_source: self.file.as_ref().map_or("<demo>".into(), |f| f.display().to_string()),
        }
    }

    fn config(&self) -> String {
        self.source.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn stats(&self) -> StatsView {
        let gen = self.control.generation();
        let services = gen
            .config
            .services
            .iter()
            .zip(&gen.services)
            .zip(&gen.udp)
            .map(|((service, m), board)| {
                let mut t = m.snapshot();
                let flows = (service.mode == Mode::Udp).then(|| board.total());
                if let Some(f) = &flows {
                    t.add_flows(f);
                }
                ServiceView {
                    name: service.name.clone(),
                    mode: service.mode.name().into(),
                    listeners: service.listeners.iter().map(|a| a.to_string()).collect(),
                    connections_current: t.connections_current,
                    connections_total: t.connections_opened,
                    requests: t.requests,
                    responses: classes(&t.responses),
                    bytes_in: t.bytes_in,
                    bytes_out: t.bytes_out,
                    latency: histogram(&t.latency),
                    datagrams: flows.map(|f| DatagramCounts {
                        to_server: f.datagrams_to_server,
                        to_client: f.datagrams_to_client,
                        refused: f.refused,
                        dropped: f.dropped,
                    }),
                }
            })
            .collect();
        let pools = gen
            .config
            .pools
            .iter()
            .enumerate()
            .map(|(p, pool)| PoolView {
                name: pool.name.clone(),
                algorithm: algorithm(pool.algorithm).into(),
                persistence: pool.persistence.as_ref().map(persistence),
                servers: (0..pool.servers.len()).map(|s| server_view(&gen, p, s)).collect(),
            })
            .collect();
        StatsView { services, pools, caches: cache_views(&gen) }
    }

    fn metrics(&self, format: MetricsFormat) -> String {
        let gen = self.control.generation();
        let (ok, failed) = *self.reloads.lock().unwrap_or_else(|e| e.into_inner());
        let (exported, queue_full, export_failed) = gen.tracing.counters.read();
        let mut view = ExpositionView {
            process: ProcessGauges {
                workers: self.control.workers() as u64,
                config_generation: gen.number,
                reloads_ok: ok,
                reloads_failed: failed,
                access_log_dropped: gen.access_log.as_ref().map_or(0, |l| l.dropped()),
                tracing_spans_exported: exported,
                tracing_spans_dropped_queue_full: queue_full,
                tracing_spans_dropped_export_failed: export_failed,
            },
            tls: Some(&gen.tls_handshakes),
            acme: gen.acme.all().iter().map(|m| acme_row(m)).collect(),
            ..ExpositionView::default()
        };
        view.peers = self
            .cluster()
            .peers
            .into_iter()
            .map(|p| PeerRow {
                peer: p.name,
                connected: p.connected,
                inbound: p.inbound,
                sent: p.sent,
                received: p.received,
                dropped: p.dropped,
                queued: p.queued,
                lag_seconds: p.lag_ms / 1000.0,
            })
            .collect();
        view.services = gen.config.services.iter().zip(&gen.services).map(|(s, m)| (s.name.as_str(), &**m)).collect();
        view.caches = gen
            .config
            .services
            .iter()
            .zip(&gen.caches)
            .filter_map(|(s, c)| Some((s.name.as_str(), &c.as_ref()?.stats)))
            .collect();
        view.udp = gen
            .config
            .services
            .iter()
            .zip(&gen.udp)
            .filter(|(s, _)| s.mode == Mode::Udp)
            .map(|(s, board)| (s.name.as_str(), board.total()))
            .collect();
        for (p, pool) in gen.config.pools.iter().enumerate() {
            if pool.queue.is_some() {
                view.queues.push((&pool.name, gen.pools[p].queue.waiting()));
            }
            for (live, server) in gen.pools[p].servers.iter().zip(&pool.servers) {
                view.servers.push(ServerRow {
                    pool: &pool.name,
                    server: &live.name,
                    address: live.addr,
                    state: live.status(),
                    weight: live.ramped_weight(server.slow_start),
                    active: live.in_flight(),
                    metrics: &live.metrics,
                });
            }
        }
        let format = match format {
            MetricsFormat::OpenMetrics => metrics::Format::OpenMetrics,
            MetricsFormat::Text => metrics::Format::Text,
        };
        metrics::encode(&view, format)
    }

    fn server(&self, pool: &str, server: &str, op: ServerOp) -> Result<ServerView, ApiError> {
        let op = match op {
            ServerOp::Enable => switchyard_engine::ServerOp::Enable,
            ServerOp::Disable => switchyard_engine::ServerOp::Disable,
            ServerOp::Drain => switchyard_engine::ServerOp::Drain,
            ServerOp::Weight(w) => switchyard_engine::ServerOp::Weight(w),
        };
        let change = Change::Server { pool: pool.to_string(), server: server.to_string(), op };
        self.control.apply(change).map_err(api_error)?;
        let gen = self.control.generation();
        let p = gen.pool_index(pool).ok_or_else(|| ApiError::NotFound(format!("no pool named `{pool}`")))?;
        let s = gen.pools[p].server_index(server).ok_or_else(|| ApiError::NotFound(format!("no server `{server}`")))?;
        Ok(server_view(&gen, p, s))
    }

    fn persistence(&self, pool: &str, limit: usize) -> Result<PersistenceView, ApiError> {
        let (kind, entries, total) = self.control.persistence(pool, limit).map_err(api_error)?;
        let entries = entries
            .into_iter()
            .map(|e| PersistenceEntryView { key: e.key, server: e.server.to_string(), idle_s: e.idle.as_secs_f64() })
            .collect();
        Ok(PersistenceView { pool: pool.to_string(), kind: kind.to_string(), entries, total })
    }

    fn flush_persistence(&self, pool: &str) -> Result<u64, ApiError> {
        match self.control.apply(Change::FlushPersistence { pool: pool.to_string() }).map_err(api_error)? {
            Applied::Flushed { removed, .. } => Ok(removed),
            _ => Ok(0),
        }
    }

    fn purge_cache(&self, service: &str, key: &str, prefix: bool) -> Result<u64, ApiError> {
        let change = Change::PurgeCache { service: service.to_string(), key: key.to_string(), prefix };
        match self.control.apply(change).map_err(api_error)? {
            Applied::Purged { purged, .. } => Ok(purged),
            _ => Ok(0),
        }
    }

    fn cache_entries(
        &self,
        service: &str,
        key: &str,
        prefix: bool,
        limit: usize,
    ) -> Result<CacheEntriesView, ApiError> {
        let gen = self.control.generation();
        let i =
            gen.service_index(service).ok_or_else(|| ApiError::NotFound(format!("no service named `{service}`")))?;
        let cache = gen
            .caches
            .get(i)
            .and_then(Option::as_ref)
            .ok_or_else(|| ApiError::NotFound(format!("service `{service}` has no cache")))?;
        let listing = cache.list(key, prefix, limit);
        let keys = listing.keys.into_iter().map(cache_key_view).collect();
        Ok(CacheEntriesView { service: service.to_string(), matched: listing.matched, keys })
    }

    fn validate(&self, source: &str, name: &str) -> Result<Vec<String>, Vec<String>> {
        // Relative file paths in the text mean what they would in the running file.
        let (config, diagnostics) = match &self.file {
            Some(file) => switchyard_config::parse_file_with_warnings(source, &file.with_file_name(name)),
            None => switchyard_config::parse_with_warnings(source, name),
        };
        let lines = diagnostics.0.iter().map(|d| d.to_string()).collect();
        match config {
            Some(_) => Ok(lines),
            None => Err(lines),
        }
    }

    fn certificates(&self) -> Vec<CertificateView> {
        let gen = self.control.generation();
        gen.acme.all().iter().flat_map(|m| certificate_views(m)).collect()
    }

    fn cluster(&self) -> ClusterView {
        let stopping = self.control.stopping();
        let Some(cluster) = self.control.cluster() else {
            return ClusterView { ready: !stopping, stopping, ..ClusterView::default() };
        };
        let read = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        let flag = |a: &std::sync::atomic::AtomicBool| a.load(std::sync::atomic::Ordering::Relaxed);
        let peers = cluster
            .peers()
            .iter()
            .map(|l| PeerView {
                name: l.name.clone(),
                address: l.address.to_string(),
                connected: flag(&l.stats.connected),
                inbound: flag(&l.stats.inbound),
                sent: read(&l.stats.sent),
                received: read(&l.stats.received),
                dropped: read(&l.stats.dropped),
                queued: l.queued() as u64,
                lag_ms: read(&l.stats.lag_us) as f64 / 1000.0,
                syncs_sent: read(&l.stats.syncs_sent),
                syncs_received: read(&l.stats.syncs_received),
            })
            .collect();
        ClusterView {
            ready: !stopping && cluster.ready(),
            stopping,
            node: Some(cluster.node.clone()),
            synced: cluster.synced(),
            refused: read(&cluster.refused),
            peers,
        }
    }

    fn reload(&self) -> Result<ReloadView, ApiError> {
        match self.reload_now() {
            Ok(Applied::Reloaded { generation, summary, warnings }) => Ok(ReloadView { generation, summary, warnings }),
            Ok(_) => Err(ApiError::Conflict("unexpected change result".into())),
            Err(ReloadError::NoFile) => Err(ApiError::Conflict(ReloadError::NoFile.to_string())),
            Err(ReloadError::Invalid(lines)) => Err(ApiError::Invalid(lines)),
            Err(ReloadError::Apply(e)) => Err(api_error(e)),
        }
    }
}
