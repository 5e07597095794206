//! Layer-4 services as the engine receives them: modes, defaults, PROXY
//! protocol, SNI routes, and the listeners TCP and UDP may share.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use switchyard_config::*;

const POOLS: &str = "\n[[pool]]\nname = \"main\"\nservers = [ { address = \"127.0.0.1:9000\" } ]\n\
                     [[pool]]\nname = \"other\"\nservers = [ { address = \"127.0.0.1:9001\" } ]\n";

fn parse_ok(src: &str) -> Config {
    match parse(src, "t.toml") {
        Ok(c) => c,
        Err(d) => panic!("refused:\n{d}"),
    }
}

/// One service in `mode` on 127.0.0.1:8080 with `extra` lines, plus pools `main` and `other`.
fn service(mode: &str, extra: &str) -> Service {
    let src = format!(
        "[[service]]\nname = \"s\"\nmode = \"{mode}\"\nlisten = \"127.0.0.1:8080\"\n{extra}\n\
         [[service]]\nname = \"keep-other-used\"\nlisten = \"127.0.0.1:8081\"\npool = \"other\"\n{POOLS}"
    );
    parse_ok(&src).services.remove(0)
}

fn errors(src: &str) -> Vec<String> {
    parse(src, "t.toml").unwrap_err().errors().map(|d| d.message.clone()).collect()
}

#[test]
fn l4_defaults() {
    let d = L4::default();
    assert_eq!(d.idle_timeout, Duration::from_secs(300));
    assert_eq!((d.max_connections, d.when_full, d.zero_copy), (None, WhenFull::Wait, true));
    assert_eq!((d.max_flows, d.flow_idle, d.per_datagram), (65_536, Duration::from_secs(60), false));
    for mode in ["tcp", "udp", "tls-passthrough"] {
        let s = service(mode, "pool = \"main\"");
        assert_eq!(s.l4, d, "{mode}");
        assert!(s.accept_proxy.is_empty() && s.sni_routes.is_empty(), "{mode}");
        assert_eq!(s.default_pool, Some(PoolId(0)));
    }
    let http = service("http", "");
    assert_eq!((http.mode, http.l4), (Mode::Http, d));
}

#[test]
fn modes() {
    assert_eq!(service("http", "").mode, Mode::Http);
    assert_eq!(service("tcp", "pool = \"main\"").mode, Mode::Tcp);
    assert_eq!(service("udp", "pool = \"main\"").mode, Mode::Udp);
    assert_eq!(service("tls-passthrough", "pool = \"main\"").mode, Mode::TlsPassthrough);
}

#[test]
fn tcp_settings() {
    let s = service(
        "tcp",
        "pool = \"main\"\nidle_timeout = \"90s\"\nmax_connections = 1_000_000\nwhen_full = \"refuse\"\nzero_copy = false",
    );
    let want = L4 {
        idle_timeout: Duration::from_secs(90),
        max_connections: Some(1_000_000),
        when_full: WhenFull::Refuse,
        zero_copy: false,
        ..L4::default()
    };
    assert_eq!(s.l4, want);
    let wait = service("tls-passthrough", "pool = \"main\"\nmax_connections = 1\nwhen_full = \"wait\"");
    assert_eq!((wait.l4.max_connections, wait.l4.when_full), (Some(1), WhenFull::Wait));
}

#[test]
fn udp_settings() {
    let s =
        service("udp", "pool = \"main\"\nudp = { max_flows = 10_000_000, flow_idle = \"5s\", per_datagram = true }");
    let want = L4 { max_flows: 10_000_000, flow_idle: Duration::from_secs(5), per_datagram: true, ..L4::default() };
    assert_eq!(s.l4, want);
    // An empty table keeps every default.
    assert_eq!(service("udp", "pool = \"main\"\nudp = {}").l4, L4::default());
}

#[test]
fn accept_proxy_networks() {
    let s = service("tcp", "pool = \"main\"\naccept_proxy = [\"10.1.2.3/8\", \"::1\"]");
    let nets: Vec<String> = s.accept_proxy.iter().map(|c| format!("{}/{}", c.addr, c.prefix)).collect();
    assert_eq!(nets, ["10.0.0.0/8", "::1/128"]);
    // One string is a list of one, as for a rule's `client`.
    assert_eq!(service("http", "accept_proxy = \"192.0.2.0/24\"").accept_proxy.len(), 1);
}

#[test]
fn sni_routes_resolve_pools_and_lower_case() {
    let s = service(
        "tls-passthrough",
        "sni = [ { name = \"API.Example.com\", pool = \"other\" }, { name = \"*.example.com\", pool = \"main\" } ]",
    );
    let routes: Vec<(&str, PoolId)> = s.sni_routes.iter().map(|r| (r.pattern.as_str(), r.pool)).collect();
    assert_eq!(routes, [("api.example.com", PoolId(1)), ("*.example.com", PoolId(0))]);
    assert_eq!(s.default_pool, None);
}

#[test]
fn sni_pools_count_as_used() {
    let src = format!(
        "[[service]]\nname = \"t\"\nmode = \"tls-passthrough\"\nlisten = \"127.0.0.1:8443\"\n\
         sni = [ {{ name = \"a.example.com\", pool = \"main\" }}, {{ name = \"b.example.com\", pool = \"other\" }} ]\n{POOLS}"
    );
    let (config, diagnostics) = parse_with_warnings(&src, "t.toml");
    assert!(config.is_some() && diagnostics.is_empty(), "{diagnostics}");
}

#[test]
fn send_proxy_versions() {
    let pool = |v: &str| {
        let src = format!(
            "[[service]]\nname = \"t\"\nmode = \"tcp\"\nlisten = \"127.0.0.1:80\"\npool = \"p\"\n\
             [[pool]]\nname = \"p\"\n{v}\nservers = [ {{ address = \"127.0.0.1:9000\" }} ]\n"
        );
        parse_ok(&src).pools.remove(0).send_proxy
    };
    assert_eq!(pool(""), None);
    assert_eq!(pool("send_proxy = \"v1\""), Some(ProxyVersion::V1));
    assert_eq!(pool("send_proxy = \"v2\""), Some(ProxyVersion::V2));
}

#[test]
fn udp_and_tcp_share_addresses_but_not_within_a_protocol() {
    let two = |a: &str, b: &str| {
        format!(
            "[[service]]\nname = \"a\"\n{a}\nlisten = [\"127.0.0.1:5353\", \"[::1]:5353\"]\npool = \"main\"\n\
             [[service]]\nname = \"b\"\n{b}\nlisten = [\"0.0.0.0:5353\", \"[::]:5353\"]\npool = \"main\"\n{POOLS}\n\
             [[service]]\nname = \"c\"\nlisten = \"127.0.0.1:1\"\npool = \"other\"\n"
        )
    };
    let udp = "mode = \"udp\"";
    let c = parse_ok(&two(udp, "mode = \"tcp\""));
    assert_eq!(c.services[1].listeners[1], "[::]:5353".parse::<SocketAddr>().unwrap());
    parse_ok(&two("", udp));
    assert_eq!(errors(&two(udp, udp)).len(), 2);
    assert_eq!(errors(&two("mode = \"tls-passthrough\"", "")).len(), 2);
}

#[test]
fn the_admin_listener_may_share_a_udp_address() {
    let src = |mode: &str| {
        format!(
            "[admin]\nlisten = \"127.0.0.1:9090\"\n[[service]]\nname = \"a\"\nmode = \"{mode}\"\n\
             listen = \"127.0.0.1:9090\"\npool = \"main\"\n{POOLS}\n\
             [[service]]\nname = \"c\"\nlisten = \"127.0.0.1:1\"\npool = \"other\"\n"
        )
    };
    parse_ok(&src("udp"));
    assert_eq!(errors(&src("tcp")).len(), 1);
}

#[test]
fn layer4_changes_show_in_the_diff() {
    let base = format!(
        "[[service]]\nname = \"t\"\nmode = \"tls-passthrough\"\nlisten = \"127.0.0.1:8443\"\n\
         sni = [ {{ name = \"a.example.com\", pool = \"main\" }} ]\nidle_timeout = \"1m\"\n\
         [[service]]\nname = \"c\"\nlisten = \"127.0.0.1:1\"\npool = \"other\"\n{POOLS}"
    );
    let old = parse_ok(&base);
    assert!(diff(&old, &parse_ok(&base)).is_empty());
    for new in [
        base.replace("a.example.com", "*.example.com"),
        base.replace("\"1m\"", "\"2m\""),
        base.replace("idle_timeout", "accept_proxy = \"10.0.0.0/8\"\nidle_timeout"),
        base.replace("pool = \"main\" }", "pool = \"other\" }"),
    ] {
        assert_eq!(diff(&old, &parse_ok(&new)).services.changed, ["t"], "{new}");
    }
    let proxy = base.replace("name = \"main\"\n", "name = \"main\"\nsend_proxy = \"v1\"\n");
    assert_eq!(diff(&old, &parse_ok(&proxy)).pools.changed, ["main"]);
}
