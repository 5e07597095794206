//! Reader of the `[tracing]` table (OpenTelemetry traces exported by OTLP).

use toml::de::{DeTable, DeValue};

use super::{boolean, duration, entries, integer, string, type_error, unknown_key, Value};
use crate::diagnostic::Report;
use crate::raw::*;

const TRACING_KEYS: &[&str] = &[
    "endpoint",
    "protocol",
    "sample_ratio",
    "parent_based",
    "service_name",
    "batch_size",
    "queue_size",
    "interval",
    "timeout",
];

pub(super) fn read_tracing(r: &mut Report<'_>, table: &DeTable<'_>) -> RawTracing {
    let mut raw = RawTracing::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        match name {
            "endpoint" => raw.endpoint = string(r, name, value),
            "protocol" => raw.protocol = string(r, name, value),
            "sample_ratio" => raw.sample_ratio = number(r, name, value),
            "parent_based" => raw.parent_based = boolean(r, name, value),
            "service_name" => raw.service_name = string(r, name, value),
            "batch_size" => raw.batch_size = integer(r, name, value),
            "queue_size" => raw.queue_size = integer(r, name, value),
            "interval" => raw.interval = duration(r, name, value),
            "timeout" => raw.timeout = duration(r, name, value),
            _ => {
                unknown_key(r, key, TRACING_KEYS, "in [tracing]");
            }
        }
    }
    raw
}

/// A float or an integer, kept as its text (validation parses and bounds
/// it); a percentage written as a string gets a hint.
fn number(r: &mut Report<'_>, key: &str, value: &Value<'_>) -> Option<S<String>> {
    match value.get_ref() {
        DeValue::Float(f) => Some(S::new(value.span(), f.to_string())),
        DeValue::Integer(i) => Some(S::new(value.span(), i.as_str().to_string())),
        DeValue::String(s) if s.ends_with('%') => {
            r.error_hint(
                &value.span(),
                format!("`{key}` must be a number from 0 to 1, not a string"),
                "write the ratio without quotes: 0.01 for 1 %",
            );
            None
        }
        _ => {
            type_error(r, key, value, "a number from 0 to 1");
            None
        }
    }
}
