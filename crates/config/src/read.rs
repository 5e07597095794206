//! Reading the spanned TOML document into the raw types.
//!
//! Why not `#[derive(Deserialize)]` on the raw types: serde stops at the first
//! error, and `deny_unknown_fields` names neither the position nor a
//! suggestion. `switchyard check` must report every problem at once, so the
//! file is parsed by `toml` into its spanned document tree
//! ([`toml::de::DeTable`]: every key and value carries its byte span) and
//! walked here, table by table. A key is read with the reader for its type; a
//! value of the wrong type becomes one located diagnostic and the field stays
//! `None`, and reading continues with the next key. Unknown keys are reported
//! with a "did you mean" hint drawn from the table's known keys, which are
//! listed once per table next to the reader that uses them.
//!
//! Only types are checked here; meanings (ranges, addresses, names) are
//! [`crate::validate`]'s job.

use std::borrow::Cow;
use std::ops::Range;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use crate::diagnostic::Report;
use crate::raw::*;
use crate::units::{closest, suggest};

mod cluster;
mod compression;
mod protection;
mod tls;
mod tracing;
use cluster::read_cluster;
use compression::read_compression;
use protection::read_protection;
use tls::{read_hsts, read_http2, read_http3, read_server_tls, read_upstream_tls, redirect_https, switch_or_table};

type Value<'i> = Spanned<DeValue<'i>>;
type Key<'i> = Spanned<Cow<'i, str>>;

const TOP_KEYS: &[&str] =
    &["workers", "drain_timeout", "service", "pool", "admin", "access_log", "event_log", "cluster", "tracing"];
const SERVICE_KEYS: &[&str] = &[
    "name",
    "mode",
    "listen",
    "pool",
    "x_forwarded_for",
    "x_forwarded_proto",
    "forwarded",
    "timeouts",
    "limits",
    "rules",
    "idle_timeout",
    "max_connections",
    "when_full",
    "zero_copy",
    "udp",
    "accept_proxy",
    "sni",
    "tls",
    "http2",
    "http3",
    "compression",
    "cache",
    "protection",
];
const CACHE_KEYS: &[&str] = &["size", "max_object", "key", "heuristic", "targeted"];
const UDP_KEYS: &[&str] = &["max_flows", "flow_idle", "per_datagram"];
const SNI_ROUTE_KEYS: &[&str] = &["name", "pool"];
const TIMEOUT_KEYS: &[&str] =
    &["client_header", "client_idle", "client_body", "connect", "server_response", "server_idle"];
const LIMIT_KEYS: &[&str] = &["max_header_bytes", "max_headers", "max_body_bytes", "max_uri_bytes"];
const POOL_KEYS: &[&str] = &[
    "name",
    "balance",
    "hash_key",
    "max_idle_per_server",
    "max_streams_per_connection",
    "servers",
    "persistence",
    "send_proxy",
    "source",
    "health_check",
    "tls",
    "protocol",
    "passive",
    "slow_start",
    "queue",
    "retries",
];
const QUEUE_KEYS: &[&str] = &["size", "timeout"];
const HEALTH_CHECK_KEYS: &[&str] = &[
    "type",
    "send",
    "expect",
    "interval",
    "timeout",
    "rise",
    "fall",
    "port",
    "method",
    "path",
    "host",
    "expect_status",
    "expect_body",
    "service",
];
const PASSIVE_KEYS: &[&str] = &["failures", "eject"];
const SERVER_KEYS: &[&str] = &["address", "name", "weight", "backup", "max_connections", "check_address", "slow_start"];
const ADMIN_KEYS: &[&str] = &["listen", "tokens"];
const TOKEN_KEYS: &[&str] = &["token", "role"];
const ACCESS_LOG_KEYS: &[&str] = &["path", "format", "syslog", "facility"];
const EVENT_LOG_KEYS: &[&str] = &["syslog", "facility"];
/// Keys of `persistence`: the kinds, then the options of each.
const PERSISTENCE_KEYS: &[&str] = &[
    "cookie",
    "source",
    "header",
    "rdp_cookie",
    "sni",
    "mode",
    "path",
    "domain",
    "max_age",
    "secure",
    "http_only",
    "idle_timeout",
    "capacity",
];
const FIELD_MATCH_KEYS: &[&str] = &["name", "value", "prefix", "suffix", "regex"];
/// Keys of a rule, in the order the documentation lists them.
pub(crate) const RULE_KEYS: &[&str] = &[
    "name",
    "host",
    "host_prefix",
    "host_suffix",
    "host_regex",
    "path",
    "path_prefix",
    "path_suffix",
    "path_regex",
    "method",
    "header",
    "query",
    "client",
    "client_cert",
    "set_request_headers",
    "add_request_headers",
    "remove_request_headers",
    "set_response_headers",
    "add_response_headers",
    "remove_response_headers",
    "hsts",
    "compress",
    "cache",
    "pool",
    "redirect",
    "redirect_https",
    "respond",
    "deny",
    "status",
    "content_type",
];

/// Reads the document root into a [`RawConfig`], reporting type errors and
/// unknown keys.
pub(crate) fn read_config(r: &mut Report<'_>, root: &DeTable<'_>) -> RawConfig {
    let mut raw = RawConfig::default();
    for (key, value) in entries(root) {
        let name = key.get_ref().as_ref();
        let errors_before = r.error_count();
        match name {
            "workers" => raw.workers = integer(r, name, value),
            "drain_timeout" => raw.drain_timeout = duration(r, name, value),
            "service" => {
                for (span, table) in array_of_tables(r, name, value, "[[service]]") {
                    raw.services.push(S::new(span, read_service(r, table)));
                }
            }
            "pool" => {
                for (span, table) in array_of_tables(r, name, value, "[[pool]]") {
                    raw.pools.push(S::new(span, read_pool(r, table)));
                }
            }
            "admin" => raw.admin = table_of(r, name, value).map(|t| S::new(value.span(), read_admin(r, t))),
            "access_log" => {
                raw.access_log = table_of(r, name, value).map(|t| S::new(value.span(), read_access_log(r, t)))
            }
            "event_log" => raw.event_log = table_of(r, name, value).map(|t| S::new(value.span(), read_event_log(r, t))),
            "cluster" => raw.cluster = table_of(r, name, value).map(|t| S::new(value.span(), read_cluster(r, t))),
            "tracing" => {
                raw.tracing = table_of(r, name, value).map(|t| S::new(value.span(), tracing::read_tracing(r, t)))
            }
            _ => raw.broken.extend(unknown_key(r, key, TOP_KEYS, "at the top level")),
        }
        if r.error_count() > errors_before {
            raw.broken.push(name.to_string());
        }
    }
    raw
}

fn read_service(r: &mut Report<'_>, table: &DeTable<'_>) -> RawService {
    let mut raw = RawService::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        let errors_before = r.error_count();
        match name {
            "name" => raw.name = string(r, name, value),
            "mode" => raw.mode = string(r, name, value),
            "listen" => raw.listen = strings(r, name, value),
            "pool" => raw.pool = string(r, name, value),
            "x_forwarded_for" => raw.x_forwarded_for = boolean(r, name, value),
            "x_forwarded_proto" => raw.x_forwarded_proto = boolean(r, name, value),
            "forwarded" => raw.forwarded = boolean(r, name, value),
            "timeouts" => raw.timeouts = table_of(r, name, value).map(|t| S::new(value.span(), read_timeouts(r, t))),
            "limits" => raw.limits = table_of(r, name, value).map(|t| S::new(value.span(), read_limits(r, t))),
            "rules" => {
                for (span, table) in array_of_tables(r, name, value, "[[service.rules]]") {
                    raw.rules.push(S::new(span, read_rule(r, table)));
                }
            }
            "idle_timeout" => raw.idle_timeout = duration(r, name, value),
            "max_connections" => raw.max_connections = integer(r, name, value),
            "when_full" => raw.when_full = string(r, name, value),
            "zero_copy" => raw.zero_copy = boolean(r, name, value),
            "udp" => raw.udp = table_of(r, name, value).map(|t| S::new(value.span(), read_udp(r, t))),
            "accept_proxy" => raw.accept_proxy = strings(r, name, value),
            "sni" => {
                let routes = array_of_tables(r, name, value, "[[service.sni]]")
                    .into_iter()
                    .map(|(span, t)| S::new(span, read_sni_route(r, t)))
                    .collect();
                if matches!(value.get_ref(), DeValue::Array(_)) {
                    raw.sni = Some(S::new(value.span(), routes));
                }
            }
            "tls" => raw.tls = table_of(r, name, value).map(|t| S::new(value.span(), read_server_tls(r, t))),
            "http2" => {
                raw.http2 =
                    switch_or_table(r, name, value, |b| RawHttp2 { enabled: Some(b), ..Default::default() }, read_http2)
            }
            "http3" => {
                raw.http3 =
                    switch_or_table(r, name, value, |b| RawHttp3 { enabled: Some(b), ..Default::default() }, read_http3)
            }
            "compression" => {
                raw.compression = switch_or_table(
                    r,
                    name,
                    value,
                    |b| RawCompression { enabled: Some(b), ..Default::default() },
                    read_compression,
                )
            }
            "cache" => {
                raw.cache =
                    switch_or_table(r, name, value, |b| RawCache { enabled: Some(b), ..Default::default() }, read_cache)
            }
            "protection" => {
                raw.protection = table_of(r, name, value).map(|t| S::new(value.span(), read_protection(r, t)))
            }
            _ => raw.broken.extend(unknown_key(r, key, SERVICE_KEYS, "in [[service]]")),
        }
        if r.error_count() > errors_before {
            raw.broken.push(name.to_string());
        }
    }
    raw
}

fn read_cache(r: &mut Report<'_>, table: &DeTable<'_>) -> RawCache {
    let mut raw = RawCache::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        match name {
            "size" => raw.size = size(r, name, value),
            "max_object" => raw.max_object = size(r, name, value),
            "key" => raw.key = strings(r, name, value),
            "heuristic" => raw.heuristic = boolean(r, name, value),
            "targeted" => raw.targeted = strings(r, name, value),
            _ => {
                unknown_key(r, key, CACHE_KEYS, "in `cache`");
            }
        }
    }
    raw
}

fn read_udp(r: &mut Report<'_>, table: &DeTable<'_>) -> RawUdp {
    let mut raw = RawUdp::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        match name {
            "max_flows" => raw.max_flows = integer(r, name, value),
            "flow_idle" => raw.flow_idle = duration(r, name, value),
            "per_datagram" => raw.per_datagram = boolean(r, name, value),
            _ => {
                unknown_key(r, key, UDP_KEYS, "in `udp`");
            }
        }
    }
    raw
}

fn read_sni_route(r: &mut Report<'_>, table: &DeTable<'_>) -> RawSniRoute {
    let mut raw = RawSniRoute::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        let errors_before = r.error_count();
        match name {
            "name" => raw.name = string(r, name, value),
            "pool" => raw.pool = string(r, name, value),
            _ => raw.broken.extend(unknown_key(r, key, SNI_ROUTE_KEYS, "in an `sni` route")),
        }
        if r.error_count() > errors_before {
            raw.broken.push(name.to_string());
        }
    }
    raw
}

fn read_timeouts(r: &mut Report<'_>, table: &DeTable<'_>) -> RawTimeouts {
    let mut raw = RawTimeouts::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        let slot = match name {
            "client_header" => &mut raw.client_header,
            "client_idle" => &mut raw.client_idle,
            "client_body" => &mut raw.client_body,
            "connect" => &mut raw.connect,
            "server_response" => &mut raw.server_response,
            "server_idle" => &mut raw.server_idle,
            _ => {
                unknown_key(r, key, TIMEOUT_KEYS, "in `timeouts`");
                continue;
            }
        };
        *slot = duration(r, name, value);
    }
    raw
}

fn read_limits(r: &mut Report<'_>, table: &DeTable<'_>) -> RawLimits {
    let mut raw = RawLimits::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        match name {
            "max_header_bytes" => raw.max_header_bytes = size(r, name, value),
            "max_headers" => raw.max_headers = integer(r, name, value),
            "max_body_bytes" => raw.max_body_bytes = size(r, name, value),
            "max_uri_bytes" => raw.max_uri_bytes = size(r, name, value),
            _ => {
                unknown_key(r, key, LIMIT_KEYS, "in `limits`");
            }
        }
    }
    raw
}

fn read_rule(r: &mut Report<'_>, table: &DeTable<'_>) -> RawRule {
    let mut raw = RawRule::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        let errors_before = r.error_count();
        match name {
            "name" => raw.name = string(r, name, value),
            "host" => raw.host = string(r, name, value),
            "host_prefix" => raw.host_prefix = string(r, name, value),
            "host_suffix" => raw.host_suffix = string(r, name, value),
            "host_regex" => raw.host_regex = string(r, name, value),
            "path" => raw.path = string(r, name, value),
            "path_prefix" => raw.path_prefix = string(r, name, value),
            "path_suffix" => raw.path_suffix = string(r, name, value),
            "path_regex" => raw.path_regex = string(r, name, value),
            "method" => raw.method = strings(r, name, value),
            "header" | "query" => {
                let matches = tables_of(r, name, value)
                    .into_iter()
                    .map(|(span, t)| S::new(span, read_field_match(r, name, t)))
                    .collect();
                if name == "header" {
                    raw.header = matches;
                } else {
                    raw.query = matches;
                }
            }
            "client" => raw.client = strings(r, name, value),
            "set_request_headers" => raw.set_request_headers = header_pairs(r, name, value),
            "add_request_headers" => raw.add_request_headers = header_pairs(r, name, value),
            "remove_request_headers" => raw.remove_request_headers = strings(r, name, value),
            "set_response_headers" => raw.set_response_headers = header_pairs(r, name, value),
            "add_response_headers" => raw.add_response_headers = header_pairs(r, name, value),
            "remove_response_headers" => raw.remove_response_headers = strings(r, name, value),
            "compress" => raw.compress = boolean(r, name, value),
            "pool" => raw.pool = string(r, name, value),
            "redirect" => raw.redirect = string(r, name, value),
            "respond" => raw.respond = string(r, name, value),
            "deny" => raw.deny = boolean(r, name, value),
            "status" => raw.status = integer(r, name, value),
            "content_type" => raw.content_type = string(r, name, value),
            "client_cert" => raw.client_cert = string(r, name, value),
            "cache" => raw.cache = boolean(r, name, value),
            "redirect_https" => raw.redirect_https = redirect_https(r, name, value),
            "hsts" => {
                raw.hsts =
                    switch_or_table(r, name, value, |b| RawHsts { enabled: Some(b), ..Default::default() }, read_hsts)
            }
            _ => raw.broken.extend(unknown_key(r, key, RULE_KEYS, "in a rule")),
        }
        if r.error_count() > errors_before {
            raw.broken.push(name.to_string());
        }
    }
    raw
}

fn read_field_match(r: &mut Report<'_>, what: &str, table: &DeTable<'_>) -> RawFieldMatch {
    let mut raw = RawFieldMatch::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        let errors_before = r.error_count();
        let slot = match name {
            "name" => &mut raw.name,
            "value" => &mut raw.value,
            "prefix" => &mut raw.prefix,
            "suffix" => &mut raw.suffix,
            "regex" => &mut raw.regex,
            _ => {
                raw.broken.extend(unknown_key(r, key, FIELD_MATCH_KEYS, &format!("in a `{what}` condition")));
                continue;
            }
        };
        *slot = string(r, name, value);
        if r.error_count() > errors_before {
            raw.broken.push(name.to_string());
        }
    }
    raw
}

fn read_pool(r: &mut Report<'_>, table: &DeTable<'_>) -> RawPool {
    let mut raw = RawPool::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        let errors_before = r.error_count();
        match name {
            "name" => raw.name = string(r, name, value),
            "balance" => raw.balance = string(r, name, value),
            "hash_key" => raw.hash_key = string(r, name, value),
            "max_idle_per_server" => raw.max_idle_per_server = integer(r, name, value),
            "max_streams_per_connection" => raw.max_streams_per_connection = integer(r, name, value),
            "servers" => {
                let servers = array_of_tables(r, name, value, "[[pool.servers]]")
                    .into_iter()
                    .map(|(span, t)| S::new(span, read_server(r, t)))
                    .collect();
                if matches!(value.get_ref(), DeValue::Array(_)) {
                    raw.servers = Some(S::new(value.span(), servers));
                }
            }
            "persistence" => {
                raw.persistence = table_of(r, name, value).map(|t| S::new(value.span(), read_persistence(r, t)))
            }
            "send_proxy" => raw.send_proxy = string(r, name, value),
            "source" => raw.source = string(r, name, value),
            "health_check" => {
                raw.health_check = table_of(r, name, value).map(|t| S::new(value.span(), read_health_check(r, t)))
            }
            "tls" => {
                raw.tls = switch_or_table(
                    r,
                    name,
                    value,
                    |b| RawUpstreamTls { enabled: Some(b), ..Default::default() },
                    read_upstream_tls,
                )
            }
            "protocol" => raw.protocol = string(r, name, value),
            "passive" => raw.passive = table_of(r, name, value).map(|t| S::new(value.span(), read_passive(r, t))),
            "slow_start" => raw.slow_start = duration(r, name, value),
            "queue" => raw.queue = table_of(r, name, value).map(|t| S::new(value.span(), read_queue(r, t))),
            "retries" => raw.retries = integer(r, name, value),
            _ => raw.broken.extend(unknown_key(r, key, POOL_KEYS, "in [[pool]]")),
        }
        if r.error_count() > errors_before {
            raw.broken.push(name.to_string());
        }
    }
    raw
}

fn read_server(r: &mut Report<'_>, table: &DeTable<'_>) -> RawServer {
    let mut raw = RawServer::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        let errors_before = r.error_count();
        match name {
            "address" => raw.address = string(r, name, value),
            "name" => raw.name = string(r, name, value),
            "weight" => raw.weight = integer(r, name, value),
            "backup" => raw.backup = boolean(r, name, value),
            "max_connections" => raw.max_connections = integer(r, name, value),
            "check_address" => raw.check_address = string(r, name, value),
            "slow_start" => raw.slow_start = duration(r, name, value),
            _ => raw.broken.extend(unknown_key(r, key, SERVER_KEYS, "in a server")),
        }
        if r.error_count() > errors_before {
            raw.broken.push(name.to_string());
        }
    }
    raw
}

fn read_admin(r: &mut Report<'_>, table: &DeTable<'_>) -> RawAdmin {
    let mut raw = RawAdmin::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        let errors_before = r.error_count();
        match name {
            "listen" => raw.listen = string(r, name, value),
            "tokens" => {
                let tokens = array_of_tables(r, name, value, "[[admin.tokens]]")
                    .into_iter()
                    .map(|(span, t)| S::new(span, read_token(r, t)))
                    .collect();
                if matches!(value.get_ref(), DeValue::Array(_)) {
                    raw.tokens = Some(S::new(value.span(), tokens));
                }
            }
            _ => raw.broken.extend(unknown_key(r, key, ADMIN_KEYS, "in [admin]")),
        }
        if r.error_count() > errors_before {
            raw.broken.push(name.to_string());
        }
    }
    raw
}

fn read_token(r: &mut Report<'_>, table: &DeTable<'_>) -> RawAdminToken {
    let mut raw = RawAdminToken::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        let errors_before = r.error_count();
        match name {
            "token" => raw.token = string(r, name, value),
            "role" => raw.role = string(r, name, value),
            _ => raw.broken.extend(unknown_key(r, key, TOKEN_KEYS, "in an admin token")),
        }
        if r.error_count() > errors_before {
            raw.broken.push(name.to_string());
        }
    }
    raw
}

fn read_access_log(r: &mut Report<'_>, table: &DeTable<'_>) -> RawAccessLog {
    let mut raw = RawAccessLog::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        match name {
            "path" => raw.path = string(r, name, value),
            "format" => raw.format = string(r, name, value),
            "syslog" => raw.syslog = string(r, name, value),
            "facility" => raw.facility = string(r, name, value),
            _ => {
                unknown_key(r, key, ACCESS_LOG_KEYS, "in [access_log]");
            }
        }
    }
    raw
}

fn read_event_log(r: &mut Report<'_>, table: &DeTable<'_>) -> RawEventLog {
    let mut raw = RawEventLog::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        match name {
            "syslog" => raw.syslog = string(r, name, value),
            "facility" => raw.facility = string(r, name, value),
            _ => {
                unknown_key(r, key, EVENT_LOG_KEYS, "in [event_log]");
            }
        }
    }
    raw
}

fn read_persistence(r: &mut Report<'_>, table: &DeTable<'_>) -> RawPersistence {
    let mut raw = RawPersistence::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        let errors_before = r.error_count();
        match name {
            "cookie" => raw.cookie = string(r, name, value),
            "source" => raw.source = boolean(r, name, value),
            "header" => raw.header = string(r, name, value),
            "rdp_cookie" => raw.rdp_cookie = boolean(r, name, value),
            "sni" => raw.sni = boolean(r, name, value),
            "mode" => raw.mode = string(r, name, value),
            "path" => raw.path = string(r, name, value),
            "domain" => raw.domain = string(r, name, value),
            "max_age" => raw.max_age = duration(r, name, value),
            "secure" => raw.secure = boolean(r, name, value),
            "http_only" => raw.http_only = boolean(r, name, value),
            "idle_timeout" => raw.idle_timeout = duration(r, name, value),
            "capacity" => raw.capacity = integer(r, name, value),
            _ => raw.broken.extend(unknown_key(r, key, PERSISTENCE_KEYS, "in `persistence`")),
        }
        if r.error_count() > errors_before {
            raw.broken.push(name.to_string());
        }
    }
    raw
}

fn read_queue(r: &mut Report<'_>, table: &DeTable<'_>) -> RawQueue {
    let mut raw = RawQueue::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        let errors_before = r.error_count();
        match name {
            "size" => raw.size = integer(r, name, value),
            "timeout" => raw.timeout = duration(r, name, value),
            _ => raw.broken.extend(unknown_key(r, key, QUEUE_KEYS, "in `queue`")),
        }
        if r.error_count() > errors_before {
            raw.broken.push(name.to_string());
        }
    }
    raw
}

fn read_health_check(r: &mut Report<'_>, table: &DeTable<'_>) -> RawHealthCheck {
    let mut raw = RawHealthCheck::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        let errors_before = r.error_count();
        match name {
            "type" => raw.kind = string(r, name, value),
            "send" => raw.send = string(r, name, value),
            "expect" => raw.expect = string(r, name, value),
            "interval" => raw.interval = duration(r, name, value),
            "timeout" => raw.timeout = duration(r, name, value),
            "rise" => raw.rise = integer(r, name, value),
            "fall" => raw.fall = integer(r, name, value),
            "port" => raw.port = integer(r, name, value),
            "method" => raw.method = string(r, name, value),
            "path" => raw.path = string(r, name, value),
            "host" => raw.host = string(r, name, value),
            "expect_status" => raw.expect_status = statuses(r, name, value),
            "expect_body" => raw.expect_body = string(r, name, value),
            "service" => raw.service = string(r, name, value),
            _ => raw.broken.extend(unknown_key(r, key, HEALTH_CHECK_KEYS, "in `health_check`")),
        }
        if r.error_count() > errors_before {
            raw.broken.push(name.to_string());
        }
    }
    raw
}

fn read_passive(r: &mut Report<'_>, table: &DeTable<'_>) -> RawPassive {
    let mut raw = RawPassive::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        let errors_before = r.error_count();
        match name {
            "failures" => raw.failures = integer(r, name, value),
            "eject" => raw.eject = duration(r, name, value),
            _ => raw.broken.extend(unknown_key(r, key, PASSIVE_KEYS, "in `passive`")),
        }
        if r.error_count() > errors_before {
            raw.broken.push(name.to_string());
        }
    }
    raw
}

/// A table's entries in file order (the parser's map is sorted by key).
fn entries<'a, 'i>(table: &'a DeTable<'i>) -> Vec<(&'a Key<'i>, &'a Value<'i>)> {
    let mut entries: Vec<_> = table.iter().collect();
    entries.sort_by_key(|(key, _)| key.span().start);
    entries
}

/// Reports an unknown key; returns the known key it probably misspells.
fn unknown_key(r: &mut Report<'_>, key: &Key<'_>, known: &[&str], context: &str) -> Option<String> {
    let name = key.get_ref().as_ref();
    r.error_hint(&key.span(), format!("unknown key `{name}` {context}"), suggest(name, known, "known keys are"));
    closest(name, known.iter().copied()).map(str::to_string)
}

/// "a string", "an integer", … for messages.
fn kind(value: &DeValue<'_>) -> &'static str {
    match value {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a date-time",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

fn type_error(r: &mut Report<'_>, key: &str, value: &Value<'_>, expected: &str) {
    let found = kind(value.get_ref());
    r.error(&value.span(), format!("`{key}` must be {expected}, not {found}"));
}

fn string(r: &mut Report<'_>, key: &str, value: &Value<'_>) -> Option<S<String>> {
    match value.get_ref() {
        DeValue::String(s) => Some(S::new(value.span(), s.to_string())),
        _ => {
            type_error(r, key, value, "a string");
            None
        }
    }
}

fn integer(r: &mut Report<'_>, key: &str, value: &Value<'_>) -> Option<S<i64>> {
    match value.get_ref() {
        DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix()) {
            Ok(n) => Some(S::new(value.span(), n)),
            Err(_) => {
                r.error(&value.span(), format!("`{key}` is out of range"));
                None
            }
        },
        _ => {
            type_error(r, key, value, "an integer");
            None
        }
    }
}

fn boolean(r: &mut Report<'_>, key: &str, value: &Value<'_>) -> Option<S<bool>> {
    match value.get_ref() {
        DeValue::Boolean(b) => Some(S::new(value.span(), *b)),
        DeValue::String(s) if matches!(s.as_ref(), "true" | "false") => {
            r.error_hint(
                &value.span(),
                format!("`{key}` must be a boolean, not a string"),
                format!("write {s} without quotes"),
            );
            None
        }
        _ => {
            type_error(r, key, value, "a boolean (true or false)");
            None
        }
    }
}

/// A duration string; an integer gets a hint, since seconds or milliseconds
/// would be a guess.
fn duration(r: &mut Report<'_>, key: &str, value: &Value<'_>) -> Option<S<String>> {
    match value.get_ref() {
        DeValue::String(s) => Some(S::new(value.span(), s.to_string())),
        DeValue::Integer(i) => {
            r.error_hint(
                &value.span(),
                format!("`{key}` must be a duration string, not an integer"),
                format!("write \"{}s\" (or \"{}ms\"): durations need a unit", i.as_str(), i.as_str()),
            );
            None
        }
        _ => {
            type_error(r, key, value, "a duration string such as \"10s\"");
            None
        }
    }
}

fn size(r: &mut Report<'_>, key: &str, value: &Value<'_>) -> Option<S<RawSize>> {
    match value.get_ref() {
        DeValue::String(s) => Some(S::new(value.span(), RawSize::Text(s.to_string()))),
        DeValue::Integer(_) => integer(r, key, value).map(|n| S::new(value.span(), RawSize::Bytes(*n.get_ref()))),
        _ => {
            type_error(r, key, value, "a size (bytes, or a string such as \"16KiB\")");
            None
        }
    }
}

/// One string or an array of strings; one string becomes a list of one.
fn strings(r: &mut Report<'_>, key: &str, value: &Value<'_>) -> Option<S<Vec<S<String>>>> {
    match value.get_ref() {
        DeValue::String(s) => Some(S::new(value.span(), vec![S::new(value.span(), s.to_string())])),
        DeValue::Array(items) => {
            let mut list = Vec::new();
            for item in items.iter() {
                match item.get_ref() {
                    DeValue::String(s) => list.push(S::new(item.span(), s.to_string())),
                    other => r.error(&item.span(), format!("elements of `{key}` must be strings, not {}", kind(other))),
                }
            }
            Some(S::new(value.span(), list))
        }
        _ => {
            type_error(r, key, value, "a string or an array of strings");
            None
        }
    }
}

/// Status codes: an integer, a string, or an array of both; integers become
/// their text, so validation parses one form.
fn statuses(r: &mut Report<'_>, key: &str, value: &Value<'_>) -> Option<S<Vec<S<String>>>> {
    let one = |item: &Value<'_>| match item.get_ref() {
        DeValue::String(s) => Some(S::new(item.span(), s.to_string())),
        DeValue::Integer(i) => {
            i64::from_str_radix(i.as_str(), i.radix()).ok().map(|n| S::new(item.span(), n.to_string()))
        }
        _ => None,
    };
    if let DeValue::Array(items) = value.get_ref() {
        let mut list = Vec::new();
        for item in items.iter() {
            match one(item) {
                Some(s) => list.push(s),
                None => r.error(
                    &item.span(),
                    format!("elements of `{key}` must be integers or strings, not {}", kind(item.get_ref())),
                ),
            }
        }
        return Some(S::new(value.span(), list));
    }
    match one(value) {
        Some(s) => Some(S::new(value.span(), vec![s])),
        None => {
            type_error(r, key, value, "a status code, a string such as \"2xx\" or \"200-399\", or an array of them");
            None
        }
    }
}

/// A table of `header-name = "value"` pairs, in file order.
fn header_pairs(r: &mut Report<'_>, key: &str, value: &Value<'_>) -> Option<S<RawHeaderPairs>> {
    let table = table_of(r, key, value)?;
    let mut pairs = Vec::new();
    for (name, v) in entries(table) {
        match v.get_ref() {
            DeValue::String(s) => {
                pairs.push((S::new(name.span(), name.get_ref().to_string()), S::new(v.span(), s.to_string())))
            }
            other => r.error(
                &v.span(),
                format!("the value of header `{}` in `{key}` must be a string, not {}", name.get_ref(), kind(other)),
            ),
        }
    }
    Some(S::new(value.span(), pairs))
}

fn table_of<'a, 'i>(r: &mut Report<'_>, key: &str, value: &'a Value<'i>) -> Option<&'a DeTable<'i>> {
    match value.get_ref() {
        DeValue::Table(t) => Some(t),
        _ => {
            type_error(r, key, value, "a table");
            None
        }
    }
}

/// One table or an array of tables.
fn tables_of<'a, 'i>(r: &mut Report<'_>, key: &str, value: &'a Value<'i>) -> Vec<(Range<usize>, &'a DeTable<'i>)> {
    match value.get_ref() {
        DeValue::Table(t) => vec![(value.span(), t)],
        DeValue::Array(_) => array_elements(r, key, value),
        _ => {
            type_error(r, key, value, "a table or an array of tables");
            Vec::new()
        }
    }
}

/// An array of tables (`[[x]]` or an inline array of inline tables).
fn array_of_tables<'a, 'i>(
    r: &mut Report<'_>,
    key: &str,
    value: &'a Value<'i>,
    header: &str,
) -> Vec<(Range<usize>, &'a DeTable<'i>)> {
    match value.get_ref() {
        DeValue::Array(_) => array_elements(r, key, value),
        other => {
            r.error_hint(
                &value.span(),
                format!("`{key}` must be an array of tables, not {}", kind(other)),
                format!("write each one as a `{header}` table, or `{key} = [ {{ ... }}, {{ ... }} ]`"),
            );
            Vec::new()
        }
    }
}

fn array_elements<'a, 'i>(r: &mut Report<'_>, key: &str, value: &'a Value<'i>) -> Vec<(Range<usize>, &'a DeTable<'i>)> {
    let DeValue::Array(items) = value.get_ref() else {
        return Vec::new();
    };
    let mut tables = Vec::new();
    for item in items.iter() {
        match item.get_ref() {
            DeValue::Table(t) => tables.push((item.span(), t)),
            other => r.error(&item.span(), format!("elements of `{key}` must be tables, not {}", kind(other))),
        }
    }
    tables
}
