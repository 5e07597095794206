//! `[cluster]`: what a valid table turns into, and every refusal with its position.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use switchyard_config::*;

const BASE: &str = "[[service]]\nname = \"web\"\nlisten = \"10.0.0.100:80\"\npool = \"main\"\n\n\
                    [[pool]]\nname = \"main\"\nservers = [ { address = \"10.0.0.11:8080\" } ]\n\n";

fn parse_cluster(cluster: &str) -> Result<Config, Diagnostics> {
    parse(&format!("{BASE}{cluster}"), "t.toml")
}

/// Errors as `LINE:COL message`.
fn errors(cluster: &str) -> Vec<String> {
    parse_cluster(cluster).unwrap_err().errors().map(|d| format!("{}:{} {}", d.line, d.col, d.message)).collect()
}

const PEER: &str = "\n[[cluster.peers]]\nname = \"lb2\"\naddress = \"10.0.0.2:7400\"\n";

#[test]
fn a_valid_table_with_defaults() {
    let c = parse_cluster(&format!(
        "[cluster]\nname = \"lb1\"\nlisten = \"10.0.0.1:7400\"\nkey = \"0123456789abcdef\"\n{PEER}"
    ))
    .unwrap();
    let cluster = c.cluster.unwrap();
    assert_eq!(cluster.name, "lb1");
    assert_eq!(cluster.listen, "10.0.0.1:7400".parse().unwrap());
    assert_eq!(cluster.queue, Cluster::DEFAULT_QUEUE);
    assert_eq!(cluster.sync_timeout, Duration::from_secs(10));
    assert!(cluster.freebind);
    assert_eq!(cluster.peers, vec![ClusterPeer { name: "lb2".into(), address: "10.0.0.2:7400".parse().unwrap() }]);
    assert!(!format!("{cluster:?}").contains("0123456789abcdef"), "the key never reaches Debug output");
    assert!(parse(BASE, "t.toml").unwrap().cluster.is_none());
}

#[test]
fn settings_are_read() {
    let c = parse_cluster(&format!(
        "[cluster]\nname = \"lb1\"\nlisten = \"10.0.0.1:7400\"\nkey = \"0123456789abcdef\"\nqueue = 100\n\
         sync_timeout = \"3s\"\nfreebind = false\n{PEER}"
    ))
    .unwrap()
    .cluster
    .unwrap();
    assert_eq!((c.queue, c.sync_timeout, c.freebind), (100, Duration::from_secs(3), false));
}

#[test]
fn refusals_are_located() {
    // Line 10 is `[cluster]` (BASE has nine lines).
    assert_eq!(
        errors("[cluster]\nlisten = \"10.0.0.1:7400\"\nkey = \"short\"\n"),
        vec!["10:1 [cluster] has no `name`", "12:7 the cluster key is 5 bytes long; at least 16 are needed"]
    );
    assert_eq!(
        errors("[cluster]\nname = \"lb 1\"\nlisten = \"10.0.0.100:80\"\nkey = \"0123456789abcdef\"\n"),
        vec![
            "11:8 a cluster node name must be 1 to 64 letters, digits, `-`, `_` or `.`",
            "12:10 cluster listener `10.0.0.100:80` is also used by service `web` (line 3)",
        ]
    );
    let peers = "[cluster]\nname = \"lb1\"\nlisten = \"10.0.0.1:7400\"\nkey = \"0123456789abcdef\"\n\
                 [[cluster.peers]]\nname = \"lb1\"\naddress = \"10.0.0.2:7400\"\n\
                 [[cluster.peers]]\nname = \"lb2\"\naddress = \"10.0.0.1:7400\"\n\
                 [[cluster.peers]]\nname = \"lb3\"\n";
    assert_eq!(
        errors(peers),
        vec![
            "15:8 peer `lb1` has this node's own name",
            "19:11 peer `lb2` has this node's own listen address",
            "20:1 peer `lb3` has no `address`",
        ]
    );
    assert_eq!(
        errors("[cluster]\nname = \"lb1\"\nlisten = \"10.0.0.1:7400\"\nkey = \"0123456789abcdef\"\nqueu = 5\n"),
        vec!["14:1 unknown key `queu` in [cluster]"]
    );
}

#[test]
fn no_peers_is_a_warning() {
    let (config, diagnostics) = parse_with_warnings(
        &format!("{BASE}[cluster]\nname = \"lb1\"\nlisten = \"10.0.0.1:7400\"\nkey = \"0123456789abcdef\"\n"),
        "t.toml",
    );
    assert!(config.is_some());
    let warnings: Vec<_> = diagnostics.warnings().map(|d| d.message.clone()).collect();
    assert_eq!(warnings, vec!["[cluster] has no peers: nothing is replicated"]);
}
