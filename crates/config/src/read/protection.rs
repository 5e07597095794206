//! Reader of a service's `protection` table.

use toml::de::DeTable;

use super::{duration, entries, integer, string, strings, table_of, unknown_key, Value};
use crate::diagnostic::Report;
use crate::raw::*;

const PROTECTION_KEYS: &[&str] = &[
    "max_connections_per_client",
    "connection_rate",
    "request_rate",
    "allow",
    "deny",
    "client_address_header",
    "table_size",
];
const RATE_KEYS: &[&str] = &["count", "per"];
const HEADER_KEYS: &[&str] = &["name", "trusted"];

pub(super) fn read_protection(r: &mut Report<'_>, table: &DeTable<'_>) -> RawProtection {
    let mut raw = RawProtection::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        match name {
            "max_connections_per_client" => raw.max_connections_per_client = integer(r, name, value),
            "connection_rate" => raw.connection_rate = rate(r, name, value),
            "request_rate" => raw.request_rate = rate(r, name, value),
            "allow" => raw.allow = strings(r, name, value),
            "deny" => raw.deny = strings(r, name, value),
            "client_address_header" => {
                raw.client_address_header = table_of(r, name, value).map(|t| S::new(value.span(), read_header(r, t)));
            }
            "table_size" => raw.table_size = integer(r, name, value),
            _ => {
                unknown_key(r, key, PROTECTION_KEYS, "in `protection`");
            }
        }
    }
    raw
}

fn rate(r: &mut Report<'_>, key: &str, value: &Value<'_>) -> Option<S<RawRate>> {
    let table = table_of(r, key, value)?;
    let mut raw = RawRate::default();
    for (k, v) in entries(table) {
        let name = k.get_ref().as_ref();
        match name {
            "count" => raw.count = integer(r, name, v),
            "per" => raw.per = duration(r, name, v),
            _ => {
                unknown_key(r, k, RATE_KEYS, &format!("in `{key}`"));
            }
        }
    }
    Some(S::new(value.span(), raw))
}

fn read_header(r: &mut Report<'_>, table: &DeTable<'_>) -> RawClientAddressHeader {
    let mut raw = RawClientAddressHeader::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        match name {
            "name" => raw.name = string(r, name, value),
            "trusted" => raw.trusted = strings(r, name, value),
            _ => {
                unknown_key(r, key, HEADER_KEYS, "in `client_address_header`");
            }
        }
    }
    raw
}
