//! Validation of `[tracing]`: OpenTelemetry traces of HTTP requests,
//! exported by OTLP to a collector.
//!
//! Invariants of an accepted [`Tracing`]: the endpoint is an `http://` URL
//! with a host, a valid port and a path (`/v1/traces` when none is given);
//! the protocol is OTLP over HTTP with protobuf bodies; the sampling ratio
//! is within 0–1 (kept in millionths); `batch_size` is at most `queue_size`.

use std::time::Duration;

use crate::raw::{RawTracing, S};
use crate::units::suggest;
use crate::validate::Ctx;

/// `[tracing]`: request traces sent to an OpenTelemetry collector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracing {
    /// The collector's OTLP/HTTP URL, e.g. `http://127.0.0.1:4318/v1/traces`.
    pub endpoint: Endpoint,
    /// Share of new traces (requests without a sampled parent) recorded, in
    /// millionths: 1,000,000 records every one, 0 none.
    pub sample_millionths: u32,
    /// A request that carries a `traceparent` is recorded when its parent
    /// was (the client decided), whatever `sample_ratio` says.
    pub parent_based: bool,
    /// The `service.name` resource attribute of every span.
    pub service_name: String,
    /// Most requests (each up to five spans) sent in one export.
    pub batch_size: usize,
    /// Most requests waiting for export; more are dropped and counted.
    pub queue_size: usize,
    /// Longest time a finished request waits before it is exported.
    pub interval: Duration,
    /// Longest one export may take before it is abandoned (its spans dropped).
    pub timeout: Duration,
}

impl Tracing {
    /// Default of `batch_size` (the OpenTelemetry batch processor's).
    pub const DEFAULT_BATCH: usize = 512;
    /// Default of `queue_size` (the OpenTelemetry batch processor's).
    pub const DEFAULT_QUEUE: usize = 2048;
    /// Default of `interval`.
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);
    /// Default of `timeout`.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
    /// Default of `endpoint`: a collector on this host, OTLP/HTTP's port.
    pub const DEFAULT_ENDPOINT: &'static str = "http://127.0.0.1:4318/v1/traces";
}

/// An `http://` URL, split once at validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The whole URL, path included.
    pub url: String,
    /// Host name or address, as written (brackets kept for IPv6).
    pub host: String,
    /// Port (80 when the URL names none).
    pub port: u16,
}

const PROTOCOLS: &[&str] = &["http/protobuf"];

/// Validates `[tracing]`.
pub(crate) fn validate_tracing(cx: &mut Ctx<'_, '_>, raw: &S<RawTracing>) -> Tracing {
    let raw = raw.get_ref();
    let endpoint = match &raw.endpoint {
        Some(e) => parse_endpoint(e.get_ref()).unwrap_or_else(|(message, hint)| {
            cx.r.error_hint(&e.span(), message, hint);
            default_endpoint()
        }),
        None => default_endpoint(),
    };
    if let Some(p) = &raw.protocol {
        match p.get_ref().as_str() {
            "http/protobuf" => {}
            "grpc" => cx.r.error_hint(
                &p.span(),
                "OTLP over gRPC is not supported",
                "use protocol = \"http/protobuf\" and the collector's OTLP/HTTP port (4318)",
            ),
            other => {
                let hint = suggest(other, PROTOCOLS, "protocols are");
                cx.r.error_hint(&p.span(), format!("unknown OTLP protocol `{other}`"), hint);
            }
        }
    }
    let sample_millionths = raw.sample_ratio.as_ref().map_or(1_000_000, |r| ratio(cx, r));
    let parent_based = raw.parent_based.as_ref().is_none_or(|b| *b.get_ref());
    let service_name = match &raw.service_name {
        Some(n) if n.get_ref().trim().is_empty() => {
            cx.r.error_hint(&n.span(), "`service_name` must not be empty", "service_name = \"switchyard\"");
            "switchyard".to_string()
        }
        Some(n) => n.get_ref().clone(),
        None => "switchyard".to_string(),
    };
    let count = |cx: &mut Ctx<'_, '_>, key, v: &Option<S<i64>>, max, default| {
        v.as_ref().map_or(default, |v| cx.int_in(key, v, 1..=max).map_or(default, |n| n as usize))
    };
    let batch_size = count(cx, "batch_size", &raw.batch_size, 65_536, Tracing::DEFAULT_BATCH);
    let queue_size = count(cx, "queue_size", &raw.queue_size, 1 << 20, Tracing::DEFAULT_QUEUE);
    if let Some(b) = raw.batch_size.as_ref().filter(|_| batch_size > queue_size) {
        cx.r.error_hint(
            &b.span(),
            format!("`batch_size` ({batch_size}) is larger than `queue_size` ({queue_size})"),
            "a batch is taken from the queue: make queue_size at least batch_size",
        );
    }
    let interval = bounded(cx, &raw.interval, "interval", Tracing::DEFAULT_INTERVAL);
    let timeout = bounded(cx, &raw.timeout, "timeout", Tracing::DEFAULT_TIMEOUT);
    Tracing { endpoint, sample_millionths, parent_based, service_name, batch_size, queue_size, interval, timeout }
}

fn default_endpoint() -> Endpoint {
    parse_endpoint(Tracing::DEFAULT_ENDPOINT).unwrap_or(Endpoint {
        url: Tracing::DEFAULT_ENDPOINT.to_string(),
        host: "127.0.0.1".to_string(),
        port: 4318,
    })
}

/// A duration between 10 ms and one minute.
fn bounded(cx: &mut Ctx<'_, '_>, v: &Option<S<String>>, key: &str, default: Duration) -> Duration {
    let d = cx.duration(v, default);
    match v {
        Some(v) if !(Duration::from_millis(10)..=Duration::from_secs(60)).contains(&d) => {
            cx.r.error(&v.span(), format!("`{key}` must be between 10ms and 60s"));
            default
        }
        _ => d,
    }
}

/// The ratio in millionths, or an error (and 0) when it is not within 0–1.
fn ratio(cx: &mut Ctx<'_, '_>, r: &S<String>) -> u32 {
    match r.get_ref().replace('_', "").parse::<f64>() {
        Ok(x) if (0.0..=1.0).contains(&x) => (x * 1_000_000.0).round() as u32,
        _ => {
            cx.r.error_hint(
                &r.span(),
                format!("`sample_ratio` must be between 0 and 1, not {}", r.get_ref()),
                "0.01 records 1 % of new traces, 1 all of them, 0 none",
            );
            0
        }
    }
}

/// Splits an `http://host[:port][/path]` URL; `/v1/traces` is added when
/// the path is empty (as the OpenTelemetry exporters do for a base URL).
/// `Err((message, hint))` when it is not such a URL.
pub fn parse_endpoint(text: &str) -> Result<Endpoint, (String, String)> {
    let example = format!("for example endpoint = \"{}\"", Tracing::DEFAULT_ENDPOINT);
    let Some(rest) = text.strip_prefix("http://") else {
        let message = if text.starts_with("https://") {
            "TLS towards the collector is not supported".to_string()
        } else {
            format!("`{text}` is not an http:// URL")
        };
        return Err((message, format!("run the collector (or an agent) where plain HTTP is safe; {example}")));
    };
    if text.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control()) {
        return Err(("the endpoint must not contain spaces or control characters".to_string(), example));
    }
    let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    let (host, port) = match authority.rfind(':') {
        // A colon inside brackets belongs to an IPv6 address.
        Some(i) if !authority[i..].contains(']') => (&authority[..i], Some(&authority[i + 1..])),
        _ => (authority, None),
    };
    let port = match port {
        None => 80,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => n,
            _ => return Err((format!("`{p}` is not a port number"), example)),
        },
    };
    if host.is_empty() || host.contains('@') {
        return Err((format!("`{text}` names no host"), example));
    }
    let path = if path.is_empty() || path == "/" { "/v1/traces" } else { path };
    let url = format!("http://{authority}{path}");
    Ok(Endpoint { url, host: host.to_string(), port })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let e = parse_endpoint("http://127.0.0.1:4318").expect("valid");
        assert_eq!((e.url.as_str(), e.host.as_str(), e.port), ("http://127.0.0.1:4318/v1/traces", "127.0.0.1", 4318));
        let e = parse_endpoint("http://[::1]:9/x/y").expect("valid");
        assert_eq!((e.url.as_str(), e.host.as_str(), e.port), ("http://[::1]:9/x/y", "[::1]", 9));
        let e = parse_endpoint("http://collector/v1/traces").expect("valid");
        assert_eq!(e.port, 80);
        for bad in ["https://c:4318", "c:4318", "http://:4318", "http://c:0", "http://c:99999", "http://c:4318/ a"] {
            assert!(parse_endpoint(bad).is_err(), "{bad}");
        }
    }
}
