//! Prometheus exposition of the metrics: the families, their names, labels
//! and help texts, in either text format ([`Format`]; the admin API picks one
//! from the scraper's `Accept`).
//!
//! Nothing is mirrored into a registry while requests run: at scrape time the
//! caller lists what exists now ([`ExpositionView`]), [`encode`] sums every
//! object's worker slots once, and writes the families from those sums.
//! Names follow Prometheus conventions: base units (seconds, bytes) as the
//! last word before `_total`, counters ending in `_total` as scraped. Latency histograms are exposed with a subset of the fine
//! bucket bounds (each power of two and 1.5 × each power of two from 16 µs to
//! ≈ 67 s): a subset, so the exposed cumulative counts are exact.

use std::net::SocketAddr;

use super::exposition::{Format, Labels, Type, Writer};

use super::histogram::{upper_bound, HistogramSnapshot, BUCKETS};
use super::{
    is_server_reason, ServerMetrics, ServerTotals, ServiceMetrics, ServiceTotals, TlsMetrics, TlsTotals, ALGORITHMS,
    CLASSES, GRPC_CODES, REASONS,
};

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
    /// Certificates from ACME, per service.
    pub acme: Vec<AcmeRow>,
}

/// One service's certificate from ACME as seen at scrape time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AcmeRow {
    /// Service name.
    pub service: String,
    /// End of the current certificate's validity (Unix seconds); `None`: none issued yet.
    pub not_after: Option<u64>,
    /// Certificates issued since start.
    pub issued: u64,
    /// Failed issuance attempts since start.
    pub failed: u64,
    /// Failed attempts since the last success.
    pub consecutive_failures: u64,
    /// With `on_demand`: the names issued on demand held, and the decisions
    /// by result ([`crate::acme::on_demand::RESULTS`]).
    pub on_demand: Option<(u64, Vec<(&'static str, u64)>)>,
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
    /// Trace spans the collector accepted (`[tracing]`).
    pub tracing_spans_exported: u64,
    /// Trace spans dropped because the export queue was full.
    pub tracing_spans_dropped_queue_full: u64,
    /// Trace spans dropped because their export failed.
    pub tracing_spans_dropped_export_failed: u64,
}

/// The exposition of `view` in `format`; serve it with
/// [`Format::content_type`].
pub fn encode(view: &ExpositionView, format: Format) -> String {
    let mut w = Writer::new(format, "switchyard");
    Scrape::read(view).write(&mut w);
    w.finish()
}

/// The view's sums, read once.
#[derive(Debug)]
struct Scrape {
    services: Vec<(String, ServiceTotals)>,
    servers: Vec<ServerScrape>,
    queues: Vec<(String, u32)>,
    udp: Vec<(String, crate::relay::FlowStats)>,
    tls: TlsTotals,
    process: ProcessGauges,
    /// Per service with a cache: hits, misses, stale, revalidated, evictions, bytes, served bytes, pieces.
    caches: Vec<(String, [u64; 8])>,
    peers: Vec<PeerRow>,
    acme: Vec<AcmeRow>,
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
            services: view
                .services
                .iter()
                .map(|(name, m)| {
                    let mut totals = m.snapshot();
                    for (_, flows) in view.udp.iter().filter(|(udp, _)| udp == name) {
                        totals.add_flows(flows);
                    }
                    (name.to_string(), totals)
                })
                .collect(),
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
                    let v = [
                        &c.hits,
                        &c.misses,
                        &c.stale,
                        &c.revalidated,
                        &c.evictions,
                        &c.bytes,
                        &c.served_bytes,
                        &c.pieces,
                    ]
                    .map(read);
                    (n.to_string(), v)
                })
                .collect(),
            peers: view.peers.clone(),
            acme: view.acme.clone(),
        }
    }
}

impl Scrape {
    fn write(&self, w: &mut Writer) {
        self.process(w);
        self.services(w);
        self.servers(w);
        let waiting = self.queues.iter().map(|(n, q)| ([("pool", n.as_str())], u64::from(*q)));
        w.family("pool_queue_waiting", "Requests waiting in the pool's queue now.", Type::Gauge, None, waiting);
        self.udp(w);
        self.caches(w);
        self.peers(w);
        self.acme(w);
        let t = &self.tls;
        let rows = [("full", t.full), ("resumed", t.resumed), ("failed", t.failed)];
        w.family(
            "tls_handshakes",
            "TLS handshakes by kind.",
            Type::Counter,
            None,
            rows.map(|(k, v)| ([("kind", k)], v)),
        );
    }

    fn process(&self, w: &mut Writer) {
        let p = &self.process;
        let none: [(&str, &str); 0] = [];
        w.family("workers", "Worker threads.", Type::Gauge, None, [(none, p.workers)]);
        let help = "Generation of the running configuration.";
        w.family("config_generation", help, Type::Gauge, None, [(none, p.config_generation)]);
        let reloads = [([("result", "ok")], p.reloads_ok), ([("result", "failed")], p.reloads_failed)];
        w.family("reloads", "Configuration reloads by result.", Type::Counter, None, reloads);
        let help = "Access log lines dropped because the writer fell behind.";
        w.family("access_log_dropped_lines", help, Type::Counter, None, [(none, p.access_log_dropped)]);
        let help = "Trace spans the OTLP collector accepted.";
        w.family("tracing_exported_spans", help, Type::Counter, None, [(none, p.tracing_spans_exported)]);
        let dropped = [
            ([("reason", "queue_full")], p.tracing_spans_dropped_queue_full),
            ([("reason", "export_failed")], p.tracing_spans_dropped_export_failed),
        ];
        let help = "Trace spans dropped: the export queue was full, or their export failed.";
        w.family("tracing_dropped_spans", help, Type::Counter, None, dropped);
    }

    fn peers(&self, w: &mut Writer) {
        let p = &self.peers;
        let up = p.iter().flat_map(|r| {
            [("out", r.connected), ("in", r.inbound)]
                .map(|(d, v)| ([("peer", r.peer.as_str()), ("direction", d)], u64::from(v)))
        });
        let help = "1 when the replication connection with the peer is up, per direction.";
        w.family("cluster_peer_connected", help, Type::Gauge, None, up);
        let updates = p.iter().flat_map(|r| {
            [("sent", r.sent), ("received", r.received), ("dropped", r.dropped)]
                .map(|(e, v)| ([("peer", r.peer.as_str()), ("event", e)], v))
        });
        let help = "Replicated updates sent, received, and dropped on a full queue.";
        w.family("cluster_peer_updates", help, Type::Counter, None, updates);
        let queued = p.iter().map(|r| ([("peer", r.peer.as_str())], r.queued));
        w.family("cluster_peer_queued_updates", "Updates waiting to be sent to the peer.", Type::Gauge, None, queued);
        let lag = p.iter().map(|r| ([("peer", r.peer.as_str())], r.lag_seconds));
        let help = "Seconds from learning an entry to the peer's acknowledgement (last batch).";
        w.gauge_f64("cluster_peer_lag_seconds", help, Some("seconds"), lag);
    }

    fn acme(&self, w: &mut Writer) {
        let a = &self.acme;
        let present = a.iter().map(|r| ([("service", r.service.as_str())], u64::from(r.not_after.is_some())));
        let help = "1 when the service has a certificate from ACME to serve, 0 while none is issued yet.";
        w.family("acme_certificate_present", help, Type::Gauge, None, present);
        let expiry = a.iter().filter_map(|r| Some(([("service", r.service.as_str())], r.not_after?)));
        let help = "End of validity of the service's certificate from ACME (Unix time).";
        w.family("acme_certificate_expiry_timestamp_seconds", help, Type::Gauge, Some("seconds"), expiry);
        let orders = a.iter().flat_map(|r| {
            [("issued", r.issued), ("failed", r.failed)]
                .map(|(k, v)| ([("service", r.service.as_str()), ("result", k)], v))
        });
        let help = "ACME certificate orders by result (issued, failed).";
        w.family("acme_orders", help, Type::Counter, None, orders);
        let failing = a.iter().map(|r| ([("service", r.service.as_str())], r.consecutive_failures));
        let help = "Failed ACME attempts since the last success (retried with back-off).";
        w.family("acme_consecutive_failures", help, Type::Gauge, None, failing);
        let held = a.iter().filter_map(|r| Some(([("service", r.service.as_str())], r.on_demand.as_ref()?.0)));
        let help = "Certificates issued on demand (at a first handshake) held by the service.";
        w.family("acme_on_demand_certificates", help, Type::Gauge, None, held);
        let decisions = a
            .iter()
            .filter_map(|r| Some((r.service.as_str(), r.on_demand.as_ref()?)))
            .flat_map(|(s, od)| od.1.iter().map(move |(result, n)| ([("service", s), ("result", *result)], *n)));
        let help = "On-demand certificate decisions at handshakes by result (issued, loaded, denied, cached, invalid, limited, failed, timeout).";
        w.family("acme_on_demand", help, Type::Counter, None, decisions);
    }

    fn udp(&self, w: &mut Writer) {
        let u = &self.udp;
        let active = u.iter().map(|(n, s)| ([("service", n.as_str())], s.active));
        w.family("udp_flows_active", "UDP flows in the flow table now.", Type::Gauge, None, active);
        let events = u.iter().flat_map(|(n, s)| {
            [("created", s.created), ("expired", s.expired), ("refused", s.refused)]
                .map(|(e, v)| ([("service", n.as_str()), ("event", e)], v))
        });
        let help = "UDP flows created, expired, and refused because the table was full.";
        w.family("udp_flows", help, Type::Counter, None, events);
        let datagrams = u.iter().flat_map(|(n, s)| {
            [("to_server", s.datagrams_to_server), ("to_client", s.datagrams_to_client)]
                .map(|(d, v)| ([("service", n.as_str()), ("direction", d)], v))
        });
        w.family("udp_datagrams", "UDP datagrams relayed, per direction.", Type::Counter, None, datagrams);
        let dropped = u.iter().map(|(n, s)| ([("service", n.as_str())], s.dropped));
        let help = "UDP datagrams dropped (no server, send failure).";
        w.family("udp_dropped_datagrams", help, Type::Counter, None, dropped);
    }

    fn caches(&self, w: &mut Writer) {
        let c = &self.caches;
        let one = |i: usize| c.iter().map(move |(n, v)| ([("service", n.as_str())], v[i]));
        w.family("cache_hits", "Requests answered from a fresh cache entry.", Type::Counter, None, one(0));
        let help = "Cacheable requests forwarded with nothing usable stored.";
        w.family("cache_misses", help, Type::Counter, None, one(1));
        let help = "Requests answered from a stale entry (stale-while-revalidate, stale-if-error).";
        w.family("cache_stale", help, Type::Counter, None, one(2));
        w.family("cache_revalidated", "Stale entries a server confirmed with 304.", Type::Counter, None, one(3));
        w.family("cache_evictions", "Cache entries evicted to make room.", Type::Counter, None, one(4));
        w.family("cache_bytes", "Bytes stored in the cache now.", Type::Gauge, Some("bytes"), one(5));
        let help = "Body bytes sent to clients from stored responses.";
        w.family("cache_served_bytes", help, Type::Counter, Some("bytes"), one(6));
        let help = "Partial responses (206) kept as pieces of a representation.";
        w.family("cache_pieces", help, Type::Counter, None, one(7))
    }

    fn services(&self, w: &mut Writer) {
        let s = &self.services;
        let one = |f: fn(&ServiceTotals) -> u64| s.iter().map(move |(n, t)| ([("service", n.as_str())], f(t)));
        w.family("requests", "Requests finished, per service.", Type::Counter, None, one(|t| t.requests));
        let by_class = s.iter().flat_map(|(n, t)| {
            CLASSES.iter().zip(t.responses.0).map(move |(c, v)| ([("service", n.as_str()), ("class", *c)], v))
        });
        let help = "Requests per response status class (none: no response sent).";
        w.family("responses", help, Type::Counter, None, by_class);
        let help = "Client connections open now.";
        w.family("connections_current", help, Type::Gauge, None, one(|t| t.connections_current));
        let help = "Client connections accepted.";
        w.family("connections", help, Type::Counter, None, one(|t| t.connections_opened));
        let help = "Bytes received from clients.";
        w.family("received_bytes", help, Type::Counter, Some("bytes"), one(|t| t.bytes_in));
        w.family("sent_bytes", "Bytes sent to clients.", Type::Counter, Some("bytes"), one(|t| t.bytes_out));
        let latency = s.iter().map(|(n, t)| ([("service", n.as_str())], &t.latency));
        let help = "Request duration, head received to last byte sent.";
        histogram(w, "request_duration_seconds", help, latency);
        let errors = s.iter().flat_map(|(n, t)| {
            REASONS.iter().zip(t.errors.0).map(move |(r, v)| ([("service", n.as_str()), ("reason", *r)], v))
        });
        w.family("errors", "Requests that ended early, per reason.", Type::Counter, None, errors);
        let grpc = s.iter().flat_map(|(n, t)| {
            GRPC_CODES
                .iter()
                .zip(t.grpc.0)
                .filter(|(_, v)| *v > 0)
                .map(move |(c, v)| ([("service", n.as_str()), ("grpc_code", *c)], v))
        });
        let help = "gRPC answers per status (grpc-status, from the head or the trailers).";
        w.family("grpc_responses", help, Type::Counter, None, grpc);
        let compression = |which: fn((u64, u64)) -> u64| {
            s.iter().flat_map(move |(n, t)| {
                ALGORITHMS
                    .iter()
                    .zip(t.compression.0)
                    .map(move |(a, v)| ([("service", n.as_str()), ("algorithm", a.token())], which(v)))
            })
        };
        let help = "Response payload bytes fed to compression, per algorithm.";
        w.family("compression_input_bytes", help, Type::Counter, Some("bytes"), compression(|(i, _)| i));
        let help = "Compressed response payload bytes, per algorithm.";
        w.family("compression_output_bytes", help, Type::Counter, Some("bytes"), compression(|(_, o)| o));
        let help = "QUIC connection attempts answered with a Retry packet (address validation).";
        w.family("quic_retries", help, Type::Counter, None, one(|t| t.quic_retries));
    }

    fn servers(&self, w: &mut Writer) {
        let s = &self.servers;
        let info = s.iter().map(|r| ([("pool", r.pool.as_str()), ("server", &r.server), ("address", &r.address)], 1));
        w.family("server", "Servers of the pools, with their address.", Type::Info, None, info);
        let one = |f: fn(&ServerScrape) -> u64| s.iter().map(move |r| (r.labels(), f(r)));
        w.family("server_requests", "Requests sent to the server.", Type::Counter, None, one(|r| r.totals.requests));
        let by_class = s
            .iter()
            .flat_map(|r| CLASSES.iter().zip(r.totals.responses.0).map(move |(c, v)| (r.labels_with("class", c), v)));
        let help = "Server's requests per status class sent to the client.";
        w.family("server_responses", help, Type::Counter, None, by_class);
        let help = "Bytes received from clients in the server's requests.";
        w.family("server_received_bytes", help, Type::Counter, Some("bytes"), one(|r| r.totals.bytes_in));
        let help = "Bytes sent to clients in the server's requests.";
        w.family("server_sent_bytes", help, Type::Counter, Some("bytes"), one(|r| r.totals.bytes_out));
        let connect = s.iter().map(|r| (r.labels(), &r.totals.connect_latency));
        let help = "Time to connect to the server (new connections).";
        histogram(w, "server_connect_duration_seconds", help, connect);
        let response = s.iter().map(|r| (r.labels(), &r.totals.response_latency));
        histogram(w, "server_response_duration_seconds", "Request sent to response head received.", response);
        let help = "Requests in flight on the server now.";
        w.family("server_active_requests", help, Type::Gauge, None, one(|r| u64::from(r.active)));
        w.family("server_weight", "Current weight of the server.", Type::Gauge, None, one(|r| u64::from(r.weight)));
        let states = s
            .iter()
            .flat_map(|r| SERVER_STATES.iter().map(move |st| (r.labels_with("state", st), u64::from(r.state == *st))));
        w.family("server_state", "1 for the server's current state, 0 for the others.", Type::Gauge, None, states);
        // Server-side reasons always (stable series); others only when they occurred.
        let failures = s.iter().flat_map(|r| {
            let f = r.totals.failures.0;
            REASONS
                .iter()
                .enumerate()
                .filter(move |(i, _)| is_server_reason(*i) || f[*i] > 0)
                .map(move |(i, reason)| (r.labels_with("reason", reason), f[i]))
        });
        let help = "Server failures per reason (requests retried on another server included).";
        w.family("server_failures", help, Type::Counter, None, failures)
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

/// A latency histogram family (`name` ends in `_seconds`).
fn histogram<'l, 'h, L: Labels<'l>>(
    w: &mut Writer,
    name: &str,
    help: &str,
    rows: impl Iterator<Item = (L, &'h HistogramSnapshot)>,
) {
    let rows = rows.map(|(labels, h)| {
        let mut buckets = Vec::new();
        exposed_buckets(h, &mut buckets);
        (labels, buckets, h.sum_us as f64 / 1e6, h.count)
    });
    w.histogram(name, help, "seconds", rows);
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
