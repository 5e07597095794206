//! Readers of the TLS and HTTP/2 tables (a service's `tls` with its `acme`, and `http2`, a
//! pool's `tls`, a rule's `hsts` and `redirect_https`), and of the values
//! that take two types: `http2 = true` or a table, `session_cache = false`
//! or a number, `redirect_https = true` or a port.

use toml::de::{DeTable, DeValue};

use super::{
    array_of_tables, boolean, duration, entries, integer, string, strings, table_of, type_error, unknown_key, Value,
};
use crate::diagnostic::Report;
use crate::raw::*;

const SERVER_TLS_KEYS: &[&str] = &[
    "certificate",
    "key",
    "certificates",
    "min_version",
    "ciphers",
    "groups",
    "tickets",
    "session_cache",
    "client_auth",
    "acme",
];
const ACME_KEYS: &[&str] =
    &["directory", "contact", "domains", "challenge", "storage", "ca_roots", "profile", "on_demand"];
const ON_DEMAND_KEYS: &[&str] = &[
    "ask",
    "allow",
    "max_certificates",
    "max_pending",
    "max_orders",
    "order_period",
    "deny_for",
    "ask_timeout",
    "wait",
];
const CERT_KEY_KEYS: &[&str] = &["certificate", "key"];
const CLIENT_AUTH_KEYS: &[&str] = &["ca", "required"];
const HTTP2_KEYS: &[&str] = &["enabled", "max_concurrent_streams", "max_resets", "max_control_frames"];
const HTTP3_KEYS: &[&str] = &[
    "enabled",
    "max_concurrent_streams",
    "max_resets",
    "max_control_frames",
    "early_data",
    "retry",
    "retry_threshold",
];
const UPSTREAM_TLS_KEYS: &[&str] = &["verify", "ca", "server_name", "certificate", "key"];
const HSTS_KEYS: &[&str] = &["max_age", "include_subdomains", "preload"];

pub(super) fn read_server_tls(r: &mut Report<'_>, table: &DeTable<'_>) -> RawServerTls {
    let mut raw = RawServerTls::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        let errors_before = r.error_count();
        match name {
            "certificate" => raw.certificate = string(r, name, value),
            "key" => raw.key = string(r, name, value),
            "certificates" => {
                let list = array_of_tables(r, name, value, "[[service.tls.certificates]]")
                    .into_iter()
                    .map(|(span, t)| S::new(span, read_cert_key(r, t)))
                    .collect();
                if matches!(value.get_ref(), DeValue::Array(_)) {
                    raw.certificates = Some(S::new(value.span(), list));
                }
            }
            "min_version" => raw.min_version = version(r, name, value),
            "ciphers" => raw.ciphers = strings(r, name, value),
            "groups" => raw.groups = strings(r, name, value),
            "tickets" => raw.tickets = boolean(r, name, value),
            "session_cache" => raw.session_cache = cache_size(r, name, value),
            "client_auth" => {
                raw.client_auth = table_of(r, name, value).map(|t| S::new(value.span(), read_client_auth(r, t)))
            }
            "acme" => raw.acme = table_of(r, name, value).map(|t| S::new(value.span(), read_acme(r, t))),
            _ => raw.broken.extend(unknown_key(r, key, SERVER_TLS_KEYS, "in `tls`")),
        }
        if r.error_count() > errors_before {
            raw.broken.push(name.to_string());
        }
    }
    raw
}

fn read_cert_key(r: &mut Report<'_>, table: &DeTable<'_>) -> RawCertKey {
    let mut raw = RawCertKey::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        let errors_before = r.error_count();
        match name {
            "certificate" => raw.certificate = string(r, name, value),
            "key" => raw.key = string(r, name, value),
            _ => raw.broken.extend(unknown_key(r, key, CERT_KEY_KEYS, "in a `certificates` entry")),
        }
        if r.error_count() > errors_before {
            raw.broken.push(name.to_string());
        }
    }
    raw
}

fn read_client_auth(r: &mut Report<'_>, table: &DeTable<'_>) -> RawClientAuth {
    let mut raw = RawClientAuth::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        let errors_before = r.error_count();
        match name {
            "ca" => raw.ca = string(r, name, value),
            "required" => raw.required = boolean(r, name, value),
            _ => raw.broken.extend(unknown_key(r, key, CLIENT_AUTH_KEYS, "in `client_auth`")),
        }
        if r.error_count() > errors_before {
            raw.broken.push(name.to_string());
        }
    }
    raw
}

fn read_acme(r: &mut Report<'_>, table: &DeTable<'_>) -> RawAcme {
    let mut raw = RawAcme::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        let errors_before = r.error_count();
        match name {
            "directory" => raw.directory = string(r, name, value),
            "contact" => raw.contact = strings(r, name, value),
            "domains" => raw.domains = strings(r, name, value),
            "challenge" => raw.challenge = string(r, name, value),
            "storage" => raw.storage = string(r, name, value),
            "ca_roots" => raw.ca_roots = string(r, name, value),
            "profile" => raw.profile = string(r, name, value),
            "on_demand" => raw.on_demand = table_of(r, name, value).map(|t| S::new(value.span(), read_on_demand(r, t))),
            _ => raw.broken.extend(unknown_key(r, key, ACME_KEYS, "in `acme`")),
        }
        if r.error_count() > errors_before {
            raw.broken.push(name.to_string());
        }
    }
    raw
}

fn read_on_demand(r: &mut Report<'_>, table: &DeTable<'_>) -> RawOnDemand {
    let mut raw = RawOnDemand::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        let errors_before = r.error_count();
        match name {
            "ask" => raw.ask = string(r, name, value),
            "allow" => raw.allow = strings(r, name, value),
            "max_certificates" => raw.max_certificates = integer(r, name, value),
            "max_pending" => raw.max_pending = integer(r, name, value),
            "max_orders" => raw.max_orders = integer(r, name, value),
            "order_period" => raw.order_period = duration(r, name, value),
            "deny_for" => raw.deny_for = duration(r, name, value),
            "ask_timeout" => raw.ask_timeout = duration(r, name, value),
            "wait" => raw.wait = duration(r, name, value),
            _ => raw.broken.extend(unknown_key(r, key, ON_DEMAND_KEYS, "in `on_demand`")),
        }
        if r.error_count() > errors_before {
            raw.broken.push(name.to_string());
        }
    }
    raw
}

pub(super) fn read_http2(r: &mut Report<'_>, table: &DeTable<'_>) -> RawHttp2 {
    let mut raw = RawHttp2::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        match name {
            "enabled" => raw.enabled = boolean(r, name, value),
            "max_concurrent_streams" => raw.max_concurrent_streams = integer(r, name, value),
            "max_resets" => raw.max_resets = integer(r, name, value),
            "max_control_frames" => raw.max_control_frames = integer(r, name, value),
            _ => {
                unknown_key(r, key, HTTP2_KEYS, "in `http2`");
            }
        }
    }
    raw
}

pub(super) fn read_http3(r: &mut Report<'_>, table: &DeTable<'_>) -> RawHttp3 {
    let mut raw = RawHttp3::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        match name {
            "enabled" => raw.enabled = boolean(r, name, value),
            "max_concurrent_streams" => raw.max_concurrent_streams = integer(r, name, value),
            "max_resets" => raw.max_resets = integer(r, name, value),
            "max_control_frames" => raw.max_control_frames = integer(r, name, value),
            "early_data" => raw.early_data = boolean(r, name, value),
            "retry" => raw.retry = string(r, name, value),
            "retry_threshold" => raw.retry_threshold = integer(r, name, value),
            _ => {
                unknown_key(r, key, HTTP3_KEYS, "in `http3`");
            }
        }
    }
    raw
}

pub(super) fn read_upstream_tls(r: &mut Report<'_>, table: &DeTable<'_>) -> RawUpstreamTls {
    let mut raw = RawUpstreamTls::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        let errors_before = r.error_count();
        match name {
            "verify" => raw.verify = boolean(r, name, value),
            "ca" => raw.ca = string(r, name, value),
            "server_name" => raw.server_name = string(r, name, value),
            "certificate" => raw.certificate = string(r, name, value),
            "key" => raw.key = string(r, name, value),
            _ => raw.broken.extend(unknown_key(r, key, UPSTREAM_TLS_KEYS, "in a pool's `tls`")),
        }
        if r.error_count() > errors_before {
            raw.broken.push(name.to_string());
        }
    }
    raw
}

pub(super) fn read_hsts(r: &mut Report<'_>, table: &DeTable<'_>) -> RawHsts {
    let mut raw = RawHsts::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        match name {
            "max_age" => raw.max_age = duration(r, name, value),
            "include_subdomains" => raw.include_subdomains = boolean(r, name, value),
            "preload" => raw.preload = boolean(r, name, value),
            _ => {
                unknown_key(r, key, HSTS_KEYS, "in `hsts`");
            }
        }
    }
    raw
}

/// A key that takes a boolean or a table (`http2`, `hsts`, a pool's `tls`).
pub(super) enum FlagOr<'a, 'i> {
    Flag(S<bool>),
    Table(&'a DeTable<'i>),
}

/// A key written as `true` / `false` or as a table: `flag` makes the raw
/// value of a boolean, `table` reads a table.
pub(super) fn switch_or_table<T>(
    r: &mut Report<'_>,
    key: &str,
    value: &Value<'_>,
    flag: impl FnOnce(S<bool>) -> T,
    table: impl FnOnce(&mut Report<'_>, &DeTable<'_>) -> T,
) -> Option<S<T>> {
    let read = match flag_or_table(r, key, value)? {
        FlagOr::Flag(b) => flag(b),
        FlagOr::Table(t) => table(r, t),
    };
    Some(S::new(value.span(), read))
}

pub(super) fn flag_or_table<'a, 'i>(r: &mut Report<'_>, key: &str, value: &'a Value<'i>) -> Option<FlagOr<'a, 'i>> {
    match value.get_ref() {
        DeValue::Table(t) => Some(FlagOr::Table(t)),
        _ if is_boolean_text(value) => boolean(r, key, value).map(FlagOr::Flag),
        _ => {
            type_error(r, key, value, "a boolean or a table");
            None
        }
    }
}

/// A boolean, or a string `boolean` explains (`"true"`, `"false"`).
fn is_boolean_text(value: &Value<'_>) -> bool {
    match value.get_ref() {
        DeValue::Boolean(_) => true,
        DeValue::String(s) => matches!(s.as_ref(), "true" | "false"),
        _ => false,
    }
}

/// A TLS version string; a bare `1.2` (a TOML float) gets a hint.
fn version(r: &mut Report<'_>, key: &str, value: &Value<'_>) -> Option<S<String>> {
    match value.get_ref() {
        DeValue::String(s) => Some(S::new(value.span(), s.to_string())),
        DeValue::Float(_) => {
            r.error_hint(
                &value.span(),
                format!("`{key}` must be a string, not a float"),
                "write the version in quotes: \"1.2\" or \"1.3\"",
            );
            None
        }
        _ => {
            type_error(r, key, value, "a string (\"1.2\" or \"1.3\")");
            None
        }
    }
}

fn cache_size(r: &mut Report<'_>, key: &str, value: &Value<'_>) -> Option<S<RawCacheSize>> {
    match value.get_ref() {
        DeValue::Integer(_) => {
            integer(r, key, value).map(|n| S::new(value.span(), RawCacheSize::Entries(*n.get_ref())))
        }
        _ if is_boolean_text(value) => {
            boolean(r, key, value).map(|b| S::new(value.span(), RawCacheSize::Flag(*b.get_ref())))
        }
        _ => {
            type_error(r, key, value, "a boolean or a number of entries");
            None
        }
    }
}

pub(super) fn redirect_https(r: &mut Report<'_>, key: &str, value: &Value<'_>) -> Option<S<RawRedirectHttps>> {
    match value.get_ref() {
        DeValue::Integer(_) => {
            integer(r, key, value).map(|n| S::new(value.span(), RawRedirectHttps::Port(*n.get_ref())))
        }
        _ if is_boolean_text(value) => {
            boolean(r, key, value).map(|b| S::new(value.span(), RawRedirectHttps::Flag(*b.get_ref())))
        }
        _ => {
            type_error(r, key, value, "`true` or a port number");
            None
        }
    }
}
