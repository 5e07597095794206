//! Prometheus exposition of the metrics, in the OpenMetrics text format that
//! the `prometheus-client` crate writes (Prometheus scrapes it natively).
//!
//! Nothing is mirrored into a registry while requests run: at scrape time the
//! caller lists what exists now ([`ExpositionView`]), [`encode`] sums every
//! object's worker slots once, and a one-shot collector writes the families
//! from those sums. Latency histograms are exposed with a subset of the fine
//! bucket bounds (each power of two and 1.5 × each power of two from 16 µs to
//! ≈ 67 s): a subset, so the exposed cumulative counts are exact.

use std::fmt;
use std::net::SocketAddr;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::histogram::{upper_bound, HistogramSnapshot, BUCKETS};
use super::{
    is_server_reason, ServerMetrics, ServerTotals, ServiceMetrics, ServiceTotals, TlsMetrics, TlsTotals, ALGORITHMS,
    CLASSES, REASONS,
};

/// The `Content-Type` of [`encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Server states, as the values of the `state` label of `switchyard_server_state`.
pub const SERVER_STATES: [&str; 4] = ["up", "draining", "maintenance", "down"];

/// What exists at scrape time: built by the caller from the running
/// configuration, borrowed for the duration of [`encode`].
#[derive(Debug, Clone, Default)]
pub struct ExpositionView<'a> {
    /// Every service: name and metrics.
    pub services: Vec<(&'a str, &'a ServiceMetrics)>,
    /// Every server of every pool.
    pub servers: Vec<ServerRow<'a>>,
    /// Requests waiting in each pool's queue now (all workers), per pool name.
    pub queues: Vec<(&'a str, u32)>,
    /// UDP flow counters per `udp` service.
    pub udp: Vec<(&'a str, crate::relay::FlowStats)>,
    /// TLS handshake counters, once TLS exists (absent: exposed as zeros).
    pub tls: Option<&'a TlsMetrics>,
    /// The response cache of each service that has one.
    pub caches: Vec<(&'a str, &'a crate::cache::CacheStats)>,
    /// Process-wide values.
    pub process: ProcessGauges,
    /// Cluster peers (high availability); empty on a single node.
    pub peers: Vec<PeerRow>,
}

/// One cluster peer as seen at scrape time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PeerRow {
    /// Peer name.
    pub peer: String,
    /// Our connection to it is up and authenticated.
    pub connected: bool,
    /// Its connection to us is up and authenticated.
    pub inbound: bool,
    /// Updates sent to it.
    pub sent: u64,
    /// Updates received from it.
    pub received: u64,
    /// Updates dropped because its queue was full.
    pub dropped: u64,
    /// Updates waiting in its queue now.
    pub queued: u64,
    /// From learning an entry to the peer's acknowledgement, last batch, in seconds.
    pub lag_seconds: f64,
}

/// One server as seen at scrape time.
#[derive(Debug, Clone)]
pub struct ServerRow<'a> {
    /// Pool name.
    pub pool: &'a str,
    /// Server name.
    pub server: &'a str,
    /// Server address.
    pub address: SocketAddr,
    /// Current state, one of [`SERVER_STATES`].
    pub state: &'a str,
    /// Current weight.
    pub weight: u32,
    /// Requests in flight on the server now (all workers).
    pub active: u32,
    /// The server's metrics.
    pub metrics: &'a ServerMetrics,
}

/// Process-wide values of an exposition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessGauges {
    /// Worker threads.
    pub workers: u64,
    /// Generation of the running configuration (1 at start, +1 per applied reload).
    pub config_generation: u64,
    /// Reloads applied.
    pub reloads_ok: u64,
    /// Reloads refused (invalid configuration) or failed.
    pub reloads_failed: u64,
    /// Access log lines dropped because the writer fell behind.
    pub access_log_dropped: u64,
}

/// The text exposition of `view` (ends with `# EOF`); serve it with [`CONTENT_TYPE`].
pub fn encode(view: &ExpositionView) -> String {
    let scrape = Scrape::read(view);
    let mut registry = Registry::with_prefix("switchyard");
    registry.register_collector(Box::new(scrape));
    let mut out = String::with_capacity(16 * 1024);
    // Writing into a String cannot fail, and the collector only fails on an
    // empty bucket list, which exposed_buckets never produces.
    if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
        tracing::error!("metrics exposition failed to encode");
    }
    out
}

/// The view's sums, read once, owned: the collector the registry needs must
/// be `'static`.
#[derive(Debug)]
struct Scrape {
    services: Vec<(String, ServiceTotals)>,
    servers: Vec<ServerScrape>,
    queues: Vec<(String, u32)>,
    udp: Vec<(String, crate::relay::FlowStats)>,
    tls: TlsTotals,
    process: ProcessGauges,
    /// Per service with a cache: hits, misses, stale, revalidated, evictions, bytes.
    caches: Vec<(String, [u64; 6])>,
    peers: Vec<PeerRow>,
}

#[derive(Debug)]
struct ServerScrape {
    pool: String,
    server: String,
    address: String,
    state: String,
    weight: u32,
    active: u32,
    totals: ServerTotals,
}

impl Scrape {
    fn read(view: &ExpositionView) -> Scrape {
        Scrape {
            services: view.services.iter().map(|(name, m)| (name.to_string(), m.snapshot())).collect(),
            servers: view
                .servers
                .iter()
                .map(|r| ServerScrape {
                    pool: r.pool.to_string(),
                    server: r.server.to_string(),
                    address: r.address.to_string(),
                    state: r.state.to_string(),
                    weight: r.weight,
                    active: r.active,
                    totals: r.metrics.snapshot(),
                })
                .collect(),
            queues: view.queues.iter().map(|(n, w)| (n.to_string(), *w)).collect(),
            udp: view.udp.iter().map(|(n, s)| (n.to_string(), *s)).collect(),
            tls: view.tls.map(TlsMetrics::snapshot).unwrap_or_default(),
            process: view.process,
            caches: view
                .caches
                .iter()
                .map(|(n, c)| {
                    let read = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
                    let v = [&c.hits, &c.misses, &c.stale, &c.revalidated, &c.evictions, &c.bytes].map(read);
                    (n.to_string(), v)
                })
                .collect(),
            peers: view.peers.clone(),
        }
    }
}

impl Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        self.process(&mut enc)?;
        self.services(&mut enc)?;
        self.servers(&mut enc)?;
        let waiting = self.queues.iter().map(|(n, w)| ([("pool", n.as_str())], u64::from(*w)));
        gauge(&mut enc, "pool_queue_waiting", "Requests waiting in the pool's queue now.", waiting)?;
        self.udp(&mut enc)?;
        self.caches(&mut enc)?;
        self.peers(&mut enc)?;
        let t = &self.tls;
        let rows = [("full", t.full), ("resumed", t.resumed), ("failed", t.failed)];
        counter(&mut enc, "tls_handshakes", "TLS handshakes by kind.", rows.map(|(k, v)| ([("kind", k)], v)))
    }
}

impl Scrape {
    fn process(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        let p = &self.process;
        enc.encode_descriptor("workers", "Worker threads.", None, MetricType::Gauge)?.encode_gauge(&p.workers)?;
        let help = "Generation of the running configuration.";
        enc.encode_descriptor("config_generation", help, None, MetricType::Gauge)?
            .encode_gauge(&p.config_generation)?;
        let reloads = [([("result", "ok")], p.reloads_ok), ([("result", "failed")], p.reloads_failed)];
        counter(enc, "reloads", "Configuration reloads by result.", reloads)?;
        let help = "Access log lines dropped because the writer fell behind.";
        enc.encode_descriptor("access_log_dropped_lines", help, None, MetricType::Counter)?
            .encode_counter::<NoLabelSet, u64, u64>(&p.access_log_dropped, None)
    }

    fn peers(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        if self.peers.is_empty() {
            return Ok(());
        }
        let p = &self.peers;
        let up = p.iter().flat_map(|r| {
            [("out", r.connected), ("in", r.inbound)]
                .map(|(d, v)| ([("peer", r.peer.as_str()), ("direction", d)], u64::from(v)))
        });
        gauge(
            enc,
            "cluster_peer_connected",
            "1 when the replication connection with the peer is up, per direction.",
            up,
        )?;
        let updates = p.iter().flat_map(|r| {
            [("sent", r.sent), ("received", r.received), ("dropped", r.dropped)]
                .map(|(e, v)| ([("peer", r.peer.as_str()), ("event", e)], v))
        });
        counter(
            enc,
            "cluster_peer_updates",
            "Replicated updates sent, received, and dropped on a full queue.",
            updates,
        )?;
        let queued = p.iter().map(|r| ([("peer", r.peer.as_str())], r.queued));
        gauge(enc, "cluster_peer_queue", "Updates waiting to be sent to the peer.", queued)?;
        let help = "Seconds from learning an entry to the peer's acknowledgement (last batch).";
        let mut m = enc.encode_descriptor("cluster_peer_lag_seconds", help, None, MetricType::Gauge)?;
        for r in p {
            m.encode_family(&[("peer", r.peer.as_str())])?.encode_gauge(&r.lag_seconds)?;
        }
        Ok(())
    }

    fn udp(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        let u = &self.udp;
        let active = u.iter().map(|(n, s)| ([("service", n.as_str())], s.active));
        gauge(enc, "udp_flows_active", "UDP flows in the flow table now.", active)?;
        let events = u.iter().flat_map(|(n, s)| {
            [("created", s.created), ("expired", s.expired), ("refused", s.refused)]
                .map(|(e, v)| ([("service", n.as_str()), ("event", e)], v))
        });
        counter(enc, "udp_flows", "UDP flows created, expired, and refused because the table was full.", events)?;
        let datagrams = u.iter().flat_map(|(n, s)| {
            [("to_server", s.datagrams_to_server), ("to_client", s.datagrams_to_client)]
                .map(|(d, v)| ([("service", n.as_str()), ("direction", d)], v))
        });
        counter(enc, "udp_datagrams", "UDP datagrams relayed, per direction.", datagrams)?;
        let dropped = u.iter().map(|(n, s)| ([("service", n.as_str())], s.dropped));
        counter(enc, "udp_dropped", "UDP datagrams dropped (no server, send failure).", dropped)
    }

    fn caches(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        let c = &self.caches;
        let one = |i: usize| c.iter().map(move |(n, v)| ([("service", n.as_str())], v[i]));
        counter(enc, "cache_hits", "Requests answered from a fresh cache entry.", one(0))?;
        counter(enc, "cache_misses", "Cacheable requests forwarded with nothing usable stored.", one(1))?;
        counter(
            enc,
            "cache_stale",
            "Requests answered from a stale entry (stale-while-revalidate, stale-if-error).",
            one(2),
        )?;
        counter(enc, "cache_revalidated", "Stale entries a server confirmed with 304.", one(3))?;
        counter(enc, "cache_evictions", "Cache entries evicted to make room.", one(4))?;
        gauge(enc, "cache_bytes", "Bytes stored in the cache now.", one(5))
    }

    fn services(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        let s = &self.services;
        let one = |f: fn(&ServiceTotals) -> u64| s.iter().map(move |(n, t)| ([("service", n.as_str())], f(t)));
        counter(enc, "requests", "Requests finished, per service.", one(|t| t.requests))?;
        let by_class = s.iter().flat_map(|(n, t)| {
            CLASSES.iter().zip(t.responses.0).map(move |(c, v)| ([("service", n.as_str()), ("class", *c)], v))
        });
        counter(enc, "responses", "Requests per response status class (none: no response sent).", by_class)?;
        gauge(enc, "connections_current", "Client connections open now.", one(|t| t.connections_current))?;
        counter(enc, "connections", "Client connections accepted.", one(|t| t.connections_opened))?;
        counter(enc, "bytes_received", "Bytes received from clients.", one(|t| t.bytes_in))?;
        counter(enc, "bytes_sent", "Bytes sent to clients.", one(|t| t.bytes_out))?;
        let latency = s.iter().map(|(n, t)| ([("service", n.as_str())], &t.latency));
        histogram(enc, "request_duration", "Request duration, head received to last byte sent.", latency)?;
        let errors = s.iter().flat_map(|(n, t)| {
            REASONS.iter().zip(t.errors.0).map(move |(r, v)| ([("service", n.as_str()), ("reason", *r)], v))
        });
        counter(enc, "errors", "Requests that ended early, per reason.", errors)?;
        let compression = |which: fn((u64, u64)) -> u64| {
            s.iter().flat_map(move |(n, t)| {
                ALGORITHMS
                    .iter()
                    .zip(t.compression.0)
                    .map(move |(a, v)| ([("service", n.as_str()), ("algorithm", a.token())], which(v)))
            })
        };
        counter(
            enc,
            "compression_bytes_in",
            "Response payload bytes fed to compression, per algorithm.",
            compression(|(i, _)| i),
        )?;
        counter(
            enc,
            "compression_bytes_out",
            "Compressed response payload bytes, per algorithm.",
            compression(|(_, o)| o),
        )
    }

    fn servers(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        let s = &self.servers;
        let info = enc.encode_descriptor("server", "Servers of the pools, with their address.", None, MetricType::Info);
        let mut info = info?;
        for r in s {
            info.encode_info(&[("pool", r.pool.as_str()), ("server", &r.server), ("address", &r.address)])?;
        }
        let one = |f: fn(&ServerScrape) -> u64| s.iter().map(move |r| (r.labels(), f(r)));
        counter(enc, "server_requests", "Requests sent to the server.", one(|r| r.totals.requests))?;
        let by_class = s
            .iter()
            .flat_map(|r| CLASSES.iter().zip(r.totals.responses.0).map(move |(c, v)| (r.labels_with("class", c), v)));
        counter(enc, "server_responses", "Server's requests per status class sent to the client.", by_class)?;
        counter(
            enc,
            "server_bytes_received",
            "Bytes received from clients in the server's requests.",
            one(|r| r.totals.bytes_in),
        )?;
        counter(
            enc,
            "server_bytes_sent",
            "Bytes sent to clients in the server's requests.",
            one(|r| r.totals.bytes_out),
        )?;
        let connect = s.iter().map(|r| (r.labels(), &r.totals.connect_latency));
        histogram(enc, "server_connect_duration", "Time to connect to the server (new connections).", connect)?;
        let response = s.iter().map(|r| (r.labels(), &r.totals.response_latency));
        histogram(enc, "server_response_duration", "Request sent to response head received.", response)?;
        gauge(enc, "server_active", "Requests in flight on the server.", one(|r| u64::from(r.active)))?;
        gauge(enc, "server_weight", "Current weight of the server.", one(|r| u64::from(r.weight)))?;
        let states = s
            .iter()
            .flat_map(|r| SERVER_STATES.iter().map(move |st| (r.labels_with("state", st), u64::from(r.state == *st))));
        gauge(enc, "server_state", "1 for the server's current state, 0 for the others.", states)?;
        // Server-side reasons always (stable series); others only when they occurred.
        let failures = s.iter().flat_map(|r| {
            let f = r.totals.failures.0;
            REASONS
                .iter()
                .enumerate()
                .filter(move |(i, _)| is_server_reason(*i) || f[*i] > 0)
                .map(move |(i, reason)| (r.labels_with("reason", reason), f[i]))
        });
        counter(
            enc,
            "server_failures",
            "Server failures per reason (requests retried on another server included).",
            failures,
        )
    }
}

impl ServerScrape {
    fn labels(&self) -> [(&str, &str); 2] {
        [("pool", &self.pool), ("server", &self.server)]
    }

    fn labels_with<'a>(&'a self, key: &'static str, value: &'a str) -> [(&'a str, &'a str); 3] {
        [("pool", &self.pool), ("server", &self.server), (key, value)]
    }
}

fn counter<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (L, u64)>,
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in rows {
        m.encode_family(&labels)?.encode_counter::<NoLabelSet, u64, u64>(&v, None)?;
    }
    Ok(())
}

fn gauge<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (L, u64)>,
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in rows {
        m.encode_family(&labels)?.encode_gauge(&v)?;
    }
    Ok(())
}

fn histogram<'h, L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (L, &'h HistogramSnapshot)>,
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, Some(&Unit::Seconds), MetricType::Histogram)?;
    let mut buckets = Vec::new();
    for (labels, h) in rows {
        exposed_buckets(h, &mut buckets);
        m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(h.sum_us as f64 / 1e6, h.count, &buckets, None)?;
    }
    Ok(())
}

/// Whether the upper bound of fine bucket `i` is an exposed bound: 2^k or
/// 1.5 · 2^k µs, from 16 µs up (sub-buckets 11 and 15 of each power of two).
fn exposed(i: usize) -> bool {
    (15..BUCKETS - 1).contains(&i) && matches!(i % 8, 3 | 7)
}

/// The fine buckets merged into the exposed ones, as (upper bound in seconds,
/// count in that bucket alone), the last one `+Inf`; the encoder cumulates.
fn exposed_buckets(h: &HistogramSnapshot, out: &mut Vec<(f64, u64)>) {
    out.clear();
    let mut acc = 0;
    for (i, n) in h.buckets.iter().enumerate() {
        acc += n;
        if exposed(i) {
            let upper = upper_bound(i).unwrap_or(u64::MAX);
            out.push((upper as f64 / 1e6, acc));
            acc = 0;
        }
    }
    out.push((f64::INFINITY, acc));
}

#[cfg(test)]
#[path = "prometheus_tests.rs"]
mod tests;
