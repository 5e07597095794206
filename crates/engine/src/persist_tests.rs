//! Persistence tests: plain values, an injected clock, no sockets.

use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use switchyard_config::{Algorithm, HashKey, Server, UpstreamProtocol};

use super::*;

const IDLE: Duration = Duration::from_secs(60);

fn clock() -> impl Fn(u64) -> Instant {
    let t0 = Instant::now();
    move |secs| t0 + Duration::from_secs(secs)
}

fn key() -> CookieKey {
    CookieKey::from_bytes([9; 32])
}

fn pool(name: &str, servers: &[&str], persistence: Persistence) -> Pool {
    let servers = servers
        .iter()
        .enumerate()
        .map(|(i, s)| Server {
            name: s.to_string(),
            addr: ([127, 0, 0, 1], 8000 + i as u16).into(),
            weight: 1,
            backup: false,
            max_connections: None,
            check_addr: None,
            slow_start: std::time::Duration::ZERO,
        })
        .collect();
    Pool {
        name: name.to_string(),
        algorithm: Algorithm::RoundRobin,
        hash_key: HashKey::ClientAddr,
        servers,
        max_idle_per_server: 8,
        max_streams_per_connection: Pool::DEFAULT_MAX_STREAMS_PER_CONNECTION,
        health_check: None,
        persistence: Some(persistence),
        send_proxy: None,
        source: switchyard_config::Source::Balancer,
        tls: None,
        protocol: UpstreamProtocol::Http1,
        passive: None,
        queue: None,
        retries: Pool::DEFAULT_RETRIES,
    }
}

fn cookie_spec() -> CookieInsert {
    CookieInsert {
        name: "SY".to_string(),
        path: "/".to_string(),
        domain: None,
        max_age: None,
        secure: false,
        http_only: true,
    }
}

fn table_spec() -> StickTableSpec {
    StickTableSpec { idle_timeout: IDLE, capacity: 1000 }
}

fn build(pool: &Pool, previous: Option<&PoolPersistence>) -> PoolPersistence {
    PoolPersistence::new(pool, &key(), previous).unwrap_or_else(|| panic!("pool {} has persistence", pool.name))
}

fn client(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(192, 0, 2, last))
}

fn cookies<'a>(headers: &'a [(&'a str, &'a [u8])]) -> Facts<'a> {
    Facts { client: client(1), headers }
}

/// The `name=value` part of a `Set-Cookie` value.
fn pair_of(set_cookie: &str) -> &str {
    set_cookie.split(';').next().unwrap_or("")
}

#[test]
fn persistence_is_shared_by_workers() {
    fn is_send_sync<T: Send + Sync>() {}
    is_send_sync::<PoolPersistence>();
}

#[test]
fn a_pool_without_persistence_has_no_state() {
    let mut p = pool("web", &["a"], Persistence::Source(table_spec()));
    p.persistence = None;
    assert!(PoolPersistence::new(&p, &key(), None).is_none());
}

#[test]
fn cookie_round_trip_sends_the_client_back_to_its_server() {
    let p = build(&pool("web", &["a", "b", "c"], Persistence::CookieInsert(cookie_spec())), None);
    assert_eq!(p.kind(), "cookie");
    let none = cookies(&[]);
    assert_eq!(p.lookup(&none, Instant::now()), None);
    let set = p.set_cookie(2, None).unwrap_or_default().to_string();
    assert!(set.starts_with("SY="), "{set}");
    assert!(set.ends_with("; Path=/; HttpOnly"), "{set}");
    assert_eq!(pair_of(&set), format!("SY={}", cookie::token(&key(), "web", "c")));

    let header = pair_of(&set).to_string();
    let headers = [("cookie", header.as_bytes())];
    let facts = cookies(&headers);
    assert_eq!(p.lookup(&facts, Instant::now()), Some(2));
    assert_eq!(p.set_cookie(2, Some(2)), None, "the client already has it");
    assert!(p.set_cookie(0, Some(2)).is_some(), "the client moved: a new cookie");
    p.learn(&facts, 0, Some(2), Instant::now());
    assert_eq!(p.len(), 0, "cookies keep no state");
}

#[test]
fn cookies_are_found_among_others_in_any_header_and_form() {
    let p = build(&pool("web", &["a", "b"], Persistence::CookieInsert(cookie_spec())), None);
    let token = cookie::token(&key(), "web", "b");
    let now = Instant::now();
    let forms = [
        format!("SY={token}"),
        format!("lang=en; SY={token}; theme=dark"),
        format!("  lang = en ;SY = {token} ; x"),
        format!("SY=\"{token}\""),
        format!("SY=forged; SY={token}"),
        format!("sy=nope;SY={token}"),
    ];
    for form in &forms {
        assert_eq!(p.lookup(&cookies(&[("cookie", form.as_bytes())]), now), Some(1), "{form}");
    }
    let second = format!("SY={token}");
    let split = [("cookie", &b"lang=en"[..]), ("accept", b"SY=nothing"), ("cookie", second.as_bytes())];
    assert_eq!(p.lookup(&cookies(&split), now), Some(1), "a later Cookie header");
    for bad in [&b"SY=forged"[..], b"sy=x", b"SY", b"SY=", b";;;=", b"\xff\x00SY\xfe=\"", b"XSY=abc"] {
        assert_eq!(p.lookup(&cookies(&[("cookie", bad)]), now), None, "{:?}", bad.escape_ascii().to_string());
    }
    let other_pool = cookie::token(&key(), "api", "b");
    let foreign = format!("SY={other_pool}");
    assert_eq!(p.lookup(&cookies(&[("cookie", foreign.as_bytes())]), now), None, "tokens are per pool");
}

#[test]
fn set_cookie_carries_the_configured_attributes_and_nothing_injected() {
    let spec = CookieInsert {
        name: "S;Y\r\n".to_string(),
        path: "/app".to_string(),
        domain: Some("example.com\r\nX: y".to_string()),
        max_age: Some(Duration::from_secs(3600)),
        secure: true,
        http_only: false,
    };
    let p = build(&pool("web", &["a"], Persistence::CookieInsert(spec)), None);
    let set = p.set_cookie(0, None).unwrap_or_default();
    let token = cookie::token(&key(), "web", "a");
    assert_eq!(set, format!("SY={token}; Path=/app; Max-Age=3600; Domain=example.comX: y; Secure"));
    assert_eq!(p.set_cookie(7, None), None, "an index out of range");
}

#[test]
fn source_persistence_learns_and_recalls_the_client_address() {
    let t = clock();
    let p = build(&pool("web", &["a", "b"], Persistence::Source(table_spec())), None);
    let alice = Facts { client: client(1), headers: &[] };
    let bob = Facts { client: client(2), headers: &[] };
    assert_eq!(p.lookup(&alice, t(0)), None);
    p.learn(&alice, 1, None, t(0));
    assert_eq!(p.lookup(&alice, t(1)), Some(1));
    assert_eq!(p.lookup(&bob, t(1)), None);
    // The same client over IPv4-mapped IPv6 is the same key.
    let mapped = Facts { client: IpAddr::V6(Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped()), headers: &[] };
    assert_eq!(p.lookup(&mapped, t(2)), Some(1));
    // A failed-over request re-learns; a lookup keeps the entry alive.
    p.learn(&alice, 0, Some(1), t(3));
    assert_eq!(p.lookup(&alice, t(60)), Some(0));
    assert_eq!(p.lookup(&alice, t(200)), None, "idle longer than the timeout");
    assert!(p.set_cookie(0, None).is_none());
    p.learn(&alice, 9, None, t(200));
    assert!(p.is_empty(), "an index out of range is ignored");
}

#[test]
fn header_persistence_keys_on_the_first_value_within_bounds() {
    let t = clock();
    let spec = Persistence::Header { name: "x-tenant".to_string(), table: table_spec() };
    let p = build(&pool("web", &["a", "b"], spec), None);
    let acme = Facts { client: client(1), headers: &[("x-tenant", b" acme "), ("x-tenant", b"other")] };
    let acme_elsewhere = Facts { client: client(9), headers: &[("X-Tenant", b"acme")] };
    p.learn(&acme, 1, None, t(0));
    assert_eq!(p.lookup(&acme_elsewhere, t(1)), Some(1), "the key is the header, not the client");

    let absent = Facts { client: client(1), headers: &[] };
    let empty = Facts { client: client(1), headers: &[("x-tenant", b"  ")] };
    let long_value = vec![b'x'; MAX_HEADER_KEY + 1];
    let long = Facts { client: client(1), headers: &[("x-tenant", &long_value)] };
    for facts in [&absent, &empty, &long] {
        p.learn(facts, 0, None, t(2));
        assert_eq!(p.lookup(facts, t(2)), None);
    }
    assert_eq!(p.len(), 1);

    let odd = Facts { client: client(1), headers: &[("x-tenant", b"a\x01b")] };
    p.learn(&odd, 0, None, t(3));
    let keys: Vec<_> = p.entries(10, t(3)).into_iter().map(|e| (e.key, e.server.to_string())).collect();
    assert_eq!(keys, [("a\\x01b".to_string(), "a".to_string()), ("acme".to_string(), "b".to_string())]);
}

#[test]
fn entries_flush_and_forget_server_manage_the_table() {
    let t = clock();
    let p = build(&pool("web", &["a", "b"], Persistence::Source(table_spec())), None);
    for i in 1..=4 {
        p.learn(&Facts { client: client(i), headers: &[] }, usize::from(i % 2), None, t(u64::from(i)));
    }
    let listed = p.entries(2, t(10));
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].key, "192.0.2.4");
    assert_eq!(listed[0].idle, Duration::from_secs(6));
    assert_eq!(p.forget_server("b"), 2);
    assert_eq!(p.len(), 2);
    assert_eq!(p.expire(t(63)), 1, "of clients 2 and 4 (server a), 2 idled out");
    assert_eq!(p.flush(), 1);
    assert_eq!(p.evictions(), 0);
    let cookie = build(&pool("web", &["a"], Persistence::CookieInsert(cookie_spec())), None);
    assert_eq!((cookie.len(), cookie.flush(), cookie.entries(5, t(0)).len()), (0, 0, 0));
}

#[test]
fn a_reload_keeps_the_table_when_kind_and_bounds_are_unchanged() {
    let t = clock();
    let old_pool = pool("web", &["a", "b", "c"], Persistence::Source(table_spec()));
    let old = build(&old_pool, None);
    old.learn(&Facts { client: client(1), headers: &[] }, 2, None, t(0));
    old.learn(&Facts { client: client(2), headers: &[] }, 1, None, t(0));

    // Server "b" is removed and the others shift: names, not indices, carry over.
    let new_pool = pool("web", &["c", "a"], Persistence::Source(table_spec()));
    let new = build(&new_pool, Some(&old));
    assert_eq!(new.lookup(&Facts { client: client(1), headers: &[] }, t(1)), Some(0));
    assert_eq!(new.lookup(&Facts { client: client(2), headers: &[] }, t(1)), None);
    assert_eq!(new.len(), 1, "entries of the removed server are dropped");

    let bigger = StickTableSpec { capacity: 5000, ..table_spec() };
    let resized = build(&pool("web", &["c", "a"], Persistence::Source(bigger)), Some(&new));
    assert!(resized.is_empty(), "new bounds start a new table");
    let renamed = build(&pool("api", &["c", "a"], Persistence::Source(table_spec())), Some(&new));
    assert!(renamed.is_empty(), "another pool's table is never taken");
    let header = Persistence::Header { name: "x-a".to_string(), table: table_spec() };
    assert!(build(&pool("web", &["c", "a"], header), Some(&new)).is_empty(), "another kind");
}

#[test]
fn a_stale_entry_for_an_unknown_server_is_no_answer() {
    let t = clock();
    let p = build(&pool("web", &["a"], Persistence::Source(table_spec())), None);
    if let State::Source { table, .. } = &p.state {
        table.insert(client(1), Arc::from("gone"), t(0));
    }
    assert_eq!(p.lookup(&Facts { client: client(1), headers: &[] }, t(1)), None);
    let v6 = Facts { client: IpAddr::V6(Ipv6Addr::LOCALHOST), headers: &[] };
    p.learn(&v6, 0, None, t(1));
    assert_eq!(p.lookup(&v6, t(2)), Some(0));
}

#[test]
fn cookie_learn_follows_the_servers_own_cookie() {
    let t = clock();
    let learn = Persistence::CookieLearn { name: "JSESSIONID".to_string(), table: table_spec() };
    let p = build(&pool("web", &["a", "b"], learn), None);
    assert_eq!(p.kind(), "cookie-learn");
    assert_eq!(p.learned_cookie(), Some("JSESSIONID"));
    let request = |cookie: &'static [u8]| [("cookie", cookie)];
    let with = request(b"theme=dark; JSESSIONID=abc123");
    let facts = Facts { client: client(1), headers: &with };
    assert_eq!(p.request_key(&facts), Some(&b"abc123"[..]));
    assert_eq!(p.lookup(&facts, t(0)), None, "nothing learned yet");

    // Other cookies and other servers' names are not learned; the session cookie is.
    p.learn_response(b"theme=light; Path=/", None, 0, t(0));
    p.learn_response(b"JSESSIONIDX=zzz", None, 0, t(0));
    assert!(p.is_empty());
    p.learn_response(b"JSESSIONID=abc123; Path=/; HttpOnly", None, 1, t(0));
    assert_eq!(p.lookup(&facts, t(1)), Some(1));
    assert!(p.set_cookie(0, None).is_none(), "cookie learn never sets a cookie itself");

    // Re-pointed when the request had to go elsewhere; deleted by the server.
    p.learn(&facts, 0, Some(1), t(2));
    assert_eq!(p.lookup(&facts, t(3)), Some(0));
    p.learn_response(b"JSESSIONID=abc123; Max-Age=0", None, 0, t(4));
    assert_eq!(p.lookup(&facts, t(5)), None);
    p.learn(&facts, 0, None, t(5));
    p.learn_response(b"JSESSIONID=; Path=/", Some(b"abc123"), 0, t(5));
    assert_eq!(p.lookup(&facts, t(5)), None, "an empty value deletes the presented one");
    p.learn_response(b"JSESSIONID=\"quoted\"; Max-Age=60", None, 1, t(5));
    let quoted = request(b"JSESSIONID=\"quoted\"");
    assert_eq!(p.lookup(&Facts { client: client(9), headers: &quoted }, t(6)), Some(1));

    // Over-long values are neither learned nor looked up.
    let long = format!("JSESSIONID={}", "x".repeat(MAX_HEADER_KEY + 1));
    p.learn_response(long.as_bytes(), None, 0, t(6));
    assert_eq!(p.len(), 1);
}

#[test]
fn connection_keys_stick_and_survive_a_reload_of_the_same_kind() {
    let t = clock();
    let rdp = build(&pool("farm", &["a", "b"], Persistence::RdpCookie(table_spec())), None);
    assert_eq!(rdp.lookup_with(client(1), Some(b"alice"), t(0)), None);
    rdp.learn_with(client(1), Some(b"alice"), 1, None, t(0));
    assert_eq!(rdp.lookup_with(client(2), Some(b"alice"), t(1)), Some(1), "the name, not the address");
    assert_eq!(rdp.lookup_with(client(1), None, t(1)), None, "no cookie, no persistence");
    assert_eq!(rdp.entries(10, t(1))[0].key, "alice");

    let again = build(&pool("farm", &["b", "a"], Persistence::RdpCookie(table_spec())), Some(&rdp));
    assert_eq!(again.lookup_with(client(3), Some(b"alice"), t(2)), Some(0), "b, now first");
    let sni = build(&pool("farm", &["a", "b"], Persistence::Sni(table_spec())), Some(&again));
    assert!(sni.is_empty(), "another kind starts empty");
    let name = "a".repeat(MAX_NAME_KEY);
    sni.learn_with(client(1), Some(name.as_bytes()), 0, None, t(3));
    assert_eq!(sni.lookup_with(client(1), Some(name.as_bytes()), t(4)), Some(0), "a 253-byte name is a key");
}

proptest! {
    #[test]
    fn cookie_parsing_is_total_and_finds_an_embedded_pair(
        before in proptest::collection::vec(any::<u8>(), 0..64),
        after in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        // Arbitrary bytes alone: no panic, and values are sub-slices of the input.
        for value in cookie_values(&before, b"SY") {
            prop_assert!(value.len() <= before.len());
        }
        // A well-formed pair between `;`s is found whatever surrounds it.
        let mut header = before.clone();
        header.extend_from_slice(b"; SY=token123;");
        header.extend_from_slice(&after);
        prop_assert!(cookie_values(&header, b"SY").any(|v| v == b"token123"));
    }
}
