//! Validation of `[cluster]`: this node of an active/standby pair and its peers.
//!
//! Invariants of an accepted [`Cluster`]: the node has a non-empty name that
//! no peer shares; its `listen` address neither equals nor overlaps a TCP
//! service listener; the key is at least [`MIN_KEY_LEN`] visible ASCII bytes
//! (it is an HMAC key, and it must survive being pasted between two files);
//! peer names are unique and no peer's address is this node's own `listen`.
//! The key never appears in a diagnostic.

use std::collections::HashMap;

use crate::model::{Cluster, ClusterPeer};
use crate::raw::{RawCluster, RawPeer, S};
use crate::units::parse_socket_addr;
use crate::validate::{broken, overlaps, Ctx, Listener};

/// Shortest shared key accepted, in bytes.
pub const MIN_KEY_LEN: usize = 16;

/// Validates `[cluster]`; `listeners` are the service listeners, which the
/// replication address must not take.
pub(crate) fn validate_cluster(cx: &mut Ctx<'_, '_>, raw: &S<RawCluster>, listeners: &[Listener]) -> Cluster {
    let span = raw.span();
    let raw = raw.get_ref();
    let name = match &raw.name {
        Some(n) if is_node_name(n.get_ref()) => n.get_ref().clone(),
        Some(n) => {
            cx.r.error_hint(
                &n.span(),
                "a cluster node name must be 1 to 64 letters, digits, `-`, `_` or `.`",
                "for example name = \"lb1\"",
            );
            String::new()
        }
        None => {
            if !broken(&raw.broken, "name") {
                cx.r.error_hint(&span, "[cluster] has no `name`", "give this node a name: name = \"lb1\"");
            }
            String::new()
        }
    };
    let listen = match &raw.listen {
        Some(l) => match parse_socket_addr(l.get_ref()) {
            Ok(addr) => {
                check_listen(cx, l, addr, listeners);
                Some(addr)
            }
            Err(p) => {
                cx.problem(&l.span(), p);
                None
            }
        },
        None => {
            if !broken(&raw.broken, "listen") {
                cx.r.error_hint(
                    &span,
                    "[cluster] has no `listen`",
                    "give the address peers connect to, e.g. listen = \"10.0.0.1:7400\"",
                );
            }
            None
        }
    };
    let key = validate_key(cx, raw, &span);
    let queue = match &raw.queue {
        Some(q) => cx.int_in("queue", q, 1..=10_000_000).map_or(Cluster::DEFAULT_QUEUE, |q| q as usize),
        None => Cluster::DEFAULT_QUEUE,
    };
    let sync_timeout = cx.duration(&raw.sync_timeout, Cluster::DEFAULT_SYNC_TIMEOUT);
    let freebind = raw.freebind.as_ref().is_none_or(|f| *f.get_ref());
    let peers = validate_peers(cx, &raw.peers, &name, listen);
    if raw.peers.is_empty() && !broken(&raw.broken, "peers") {
        cx.r.warning(
            &span,
            "[cluster] has no peers: nothing is replicated",
            Some("add the other node: [[cluster.peers]] name = \"lb2\" address = \"10.0.0.2:7400\"".to_string()),
        );
    }
    Cluster {
        name,
        listen: listen.unwrap_or_else(|| std::net::SocketAddr::from(([0, 0, 0, 0], 7400))),
        key,
        queue,
        sync_timeout,
        freebind,
        peers,
    }
}

fn is_node_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

fn check_listen(cx: &mut Ctx<'_, '_>, at: &S<String>, addr: std::net::SocketAddr, listeners: &[Listener]) {
    if let Some(l) = listeners.iter().find(|l| !l.udp && overlaps(&l.addr, &addr)) {
        let line = cx.r.line_of(&l.span);
        cx.r.error_hint(
            &at.span(),
            format!("cluster listener `{addr}` is also used by service `{}` (line {line})", l.service),
            "replication needs an address of its own, e.g. port 7400",
        );
    }
}

fn validate_key(cx: &mut Ctx<'_, '_>, raw: &RawCluster, span: &std::ops::Range<usize>) -> String {
    let Some(key) = &raw.key else {
        if !broken(&raw.broken, "key") {
            cx.r.error_hint(
                span,
                "[cluster] has no `key`",
                format!("peers prove they share a secret: key = \"...\" ({MIN_KEY_LEN} characters or more, the same on every node)"),
            );
        }
        return String::new();
    };
    let text = key.get_ref();
    if text.len() < MIN_KEY_LEN {
        cx.r.error_hint(
            &key.span(),
            format!("the cluster key is {} bytes long; at least {MIN_KEY_LEN} are needed", text.len()),
            "draw one with `openssl rand -base64 32`",
        );
    } else if !text.bytes().all(|b| b.is_ascii_graphic()) {
        cx.r.error_hint(
            &key.span(),
            "the cluster key must be visible ASCII characters, without spaces",
            "draw one with `openssl rand -base64 32`",
        );
    }
    text.clone()
}

fn validate_peers(
    cx: &mut Ctx<'_, '_>,
    raw: &[S<RawPeer>],
    node: &str,
    listen: Option<std::net::SocketAddr>,
) -> Vec<ClusterPeer> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut peers = Vec::new();
    for entry in raw {
        let line = cx.r.line_of(&entry.span());
        let p = entry.get_ref();
        let name = match &p.name {
            Some(n) if !is_node_name(n.get_ref()) => {
                cx.r.error_hint(
                    &n.span(),
                    "a peer name must be 1 to 64 letters, digits, `-`, `_` or `.`",
                    "the peer's own [cluster] name",
                );
                continue;
            }
            Some(n) if n.get_ref() == node => {
                cx.r.error_hint(
                    &n.span(),
                    format!("peer `{node}` has this node's own name"),
                    "list the other nodes only",
                );
                continue;
            }
            Some(n) => {
                if let Some(first) = seen.insert(n.get_ref().clone(), line) {
                    cx.r.error_hint(
                        &n.span(),
                        format!("peer `{}` is listed twice (first at line {first})", n.get_ref()),
                        "peer names must be unique",
                    );
                    continue;
                }
                n.get_ref().clone()
            }
            None => {
                cx.r.error_hint(&entry.span(), "a cluster peer has no `name`", "name = \"lb2\"");
                continue;
            }
        };
        let address = match &p.address {
            Some(a) => match parse_socket_addr(a.get_ref()) {
                Ok(addr) if Some(addr) == listen => {
                    cx.r.error_hint(
                        &a.span(),
                        format!("peer `{name}` has this node's own listen address"),
                        "give the peer's [cluster] listen address",
                    );
                    continue;
                }
                Ok(addr) => addr,
                Err(problem) => {
                    cx.problem(&a.span(), problem);
                    continue;
                }
            },
            None => {
                cx.r.error_hint(
                    &entry.span(),
                    format!("peer `{name}` has no `address`"),
                    "address = \"10.0.0.2:7400\"",
                );
                continue;
            }
        };
        peers.push(ClusterPeer { name, address });
    }
    peers
}
