//! Reader of the `[cluster]` table (high availability: this node and its peers).

use toml::de::DeTable;

use super::{array_of_tables, boolean, duration, entries, integer, string, unknown_key};
use crate::diagnostic::Report;
use crate::raw::*;

const CLUSTER_KEYS: &[&str] = &["name", "listen", "key", "queue", "sync_timeout", "freebind", "peers"];
const PEER_KEYS: &[&str] = &["name", "address"];

pub(super) fn read_cluster(r: &mut Report<'_>, table: &DeTable<'_>) -> RawCluster {
    let mut raw = RawCluster::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        let errors_before = r.error_count();
        match name {
            "name" => raw.name = string(r, name, value),
            "listen" => raw.listen = string(r, name, value),
            "key" => raw.key = string(r, name, value),
            "queue" => raw.queue = integer(r, name, value),
            "sync_timeout" => raw.sync_timeout = duration(r, name, value),
            "freebind" => raw.freebind = boolean(r, name, value),
            "peers" => {
                for (span, t) in array_of_tables(r, name, value, "[[cluster.peers]]") {
                    raw.peers.push(S::new(span, read_peer(r, t)));
                }
            }
            _ => raw.broken.extend(unknown_key(r, key, CLUSTER_KEYS, "in [cluster]")),
        }
        if r.error_count() > errors_before {
            raw.broken.push(name.to_string());
        }
    }
    raw
}

fn read_peer(r: &mut Report<'_>, table: &DeTable<'_>) -> RawPeer {
    let mut raw = RawPeer::default();
    for (key, value) in entries(table) {
        let name = key.get_ref().as_ref();
        match name {
            "name" => raw.name = string(r, name, value),
            "address" => raw.address = string(r, name, value),
            _ => {
                unknown_key(r, key, PEER_KEYS, "in a cluster peer");
            }
        }
    }
    raw
}
