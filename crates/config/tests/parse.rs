//! What valid files turn into: defaults, normalisation and every matcher.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use switchyard_config::*;

const POOL: &str = "\n[[pool]]\nname = \"main\"\nservers = [ { address = \"127.0.0.1:9000\" } ]\n";

fn parse_ok(src: &str) -> Config {
    match parse(src, "t.toml") {
        Ok(c) => c,
        Err(d) => panic!("refused:\n{d}"),
    }
}

/// One service on 127.0.0.1:8080 with `extra` lines, plus pool `main`.
fn service(extra: &str) -> Config {
    parse_ok(&format!("[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:8080\"\npool = \"main\"\n{extra}\n{POOL}"))
}

fn rule(rule: &str) -> Rule {
    let mut c = service(&format!("rules = [ {rule} ]"));
    c.services.remove(0).rules.remove(0)
}

fn errors(src: &str) -> Vec<String> {
    parse(src, "t.toml").unwrap_err().errors().map(|d| d.message.clone()).collect()
}

#[test]
fn defaults() {
    let c = service("");
    assert_eq!(c.workers, None);
    assert_eq!(c.drain_timeout, Duration::from_secs(30));
    let s = &c.services[0];
    assert_eq!(s.mode, Mode::Http);
    assert_eq!(s.listeners, vec!["127.0.0.1:8080".parse::<SocketAddr>().unwrap()]);
    assert_eq!(s.default_pool, Some(PoolId(0)));
    assert_eq!(s.timeouts, Timeouts::default());
    assert_eq!(s.limits, Limits::default());
    assert_eq!(s.forwarded, Forwarded::default());
    assert!(s.rules.is_empty());
    let p = &c.pools[0];
    assert_eq!(p.algorithm, Algorithm::RoundRobin);
    assert_eq!(p.hash_key, HashKey::ClientAddr);
    assert_eq!(p.max_idle_per_server, 1024);
    assert_eq!(p.max_streams_per_connection, 100);
    let server = &p.servers[0];
    assert_eq!(server.name, "127.0.0.1:9000");
    assert_eq!((server.weight, server.backup, server.max_connections), (1, false, None));
}

#[test]
fn top_level_and_service_values() {
    let c = parse_ok(&format!(
        "workers = 4\ndrain_timeout = \"2m\"\n[[service]]\nname = \"w\"\nlisten = [\"[::1]:80\", \"10.0.0.1:81\"]\n\
         forwarded = true\nx_forwarded_for = false\n\
         timeouts = {{ connect = \"250ms\", server_idle = \"1h\" }}\n\
         limits = {{ max_header_bytes = \"8KiB\", max_headers = 10, max_body_bytes = 1000 }}\n\
         rules = [ {{ path = \"/\", pool = \"main\" }} ]\n{POOL}"
    ));
    assert_eq!(c.workers, Some(4));
    assert_eq!(c.drain_timeout, Duration::from_secs(120));
    let s = &c.services[0];
    assert_eq!(s.listeners.len(), 2);
    assert_eq!(s.default_pool, None);
    assert_eq!(s.forwarded, Forwarded { x_forwarded_for: false, x_forwarded_proto: true, forwarded: true });
    assert_eq!(s.timeouts.connect, Duration::from_millis(250));
    assert_eq!(s.timeouts.server_idle, Duration::from_secs(3600));
    assert_eq!(s.timeouts.client_header, Timeouts::default().client_header);
    assert_eq!(
        s.limits,
        Limits { max_header_bytes: 8192, max_headers: 10, max_body_bytes: Some(1000), max_uri_bytes: 8192 }
    );
}

#[test]
fn pools_and_servers() {
    let c = parse_ok(
        "[[service]]\nname = \"w\"\nlisten = \"127.0.0.1:80\"\npool = \"p\"\n\
         [[pool]]\nname = \"p\"\nbalance = \"hash\"\nhash_key = \"header:X-User\"\nmax_idle_per_server = 0\n\
         servers = [ { address = \"127.0.0.1:1\", name = \"a\", weight = 0, backup = true, max_connections = 5 } ]\n",
    );
    let p = &c.pools[0];
    assert_eq!(p.algorithm, Algorithm::Hash);
    assert_eq!(p.hash_key, HashKey::Header("x-user".into()));
    assert_eq!(p.max_idle_per_server, 0);
    let s = &p.servers[0];
    assert_eq!((s.name.as_str(), s.weight, s.backup, s.max_connections), ("a", 0, true, Some(5)));
    for (name, algorithm) in [
        ("least-connections", Algorithm::LeastConnections),
        ("random-two", Algorithm::RandomTwo),
        ("source-hash", Algorithm::SourceHash),
        ("maglev", Algorithm::Maglev),
        ("first", Algorithm::First),
    ] {
        let src = format!(
            "[[service]]\nname = \"w\"\nlisten = \"127.0.0.1:80\"\npool = \"p\"\n\
             [[pool]]\nname = \"p\"\nbalance = \"{name}\"\nservers = [ {{ address = \"127.0.0.1:1\" }} ]\n"
        );
        assert_eq!(parse_ok(&src).pools[0].algorithm, algorithm);
    }
}

#[test]
fn http2_pools_cap_their_streams_per_connection() {
    let pool = |lines: &str| {
        format!(
            "[[service]]\nname = \"w\"\nlisten = \"127.0.0.1:80\"\npool = \"p\"\n\
             [[pool]]\nname = \"p\"\n{lines}\nservers = [ {{ address = \"127.0.0.1:1\" }} ]\n"
        )
    };
    let c = parse_ok(&pool("protocol = \"h2\"\nmax_streams_per_connection = 20"));
    assert_eq!((c.pools[0].protocol, c.pools[0].max_streams_per_connection), (UpstreamProtocol::Http2, 20));
    assert_eq!(parse_ok(&pool("protocol = \"h2\"")).pools[0].max_streams_per_connection, 100);
    assert_eq!(
        errors(&pool("max_streams_per_connection = 20")),
        ["`max_streams_per_connection` applies only to a pool with protocol = \"h2\""]
    );
    assert_eq!(
        errors(&pool("protocol = \"h2\"\nmax_streams_per_connection = 10001")),
        ["`max_streams_per_connection` must be between 1 and 10000, not 10001"]
    );
}

fn only_condition(r: &Rule) -> &Condition {
    assert_eq!(r.conditions.len(), 1, "{r:?}");
    &r.conditions[0]
}

#[test]
fn host_matchers_are_lower_case() {
    let cases = [
        ("host = \"WWW.Example.COM\"", "www.example.com", "www.example.org"),
        ("host_prefix = \"API.\"", "api.example.com", "www.api.com"),
        ("host_suffix = \".Example.com\"", "a.example.com", "example.org"),
        ("host_regex = \"^(a|b)\\\\.\"", "b.example.com", "c.example.com"),
    ];
    for (cond, yes, no) in cases {
        let r = rule(&format!("{{ {cond}, pool = \"main\" }}"));
        let Condition::Host(m) = only_condition(&r) else { panic!("{r:?}") };
        assert!(m.matches(yes), "{cond} should match {yes}");
        assert!(!m.matches(no), "{cond} should not match {no}");
    }
}

#[test]
fn path_matchers() {
    let cases = [
        ("path = \"/a\"", "/a", "/a/b"),
        ("path_prefix = \"/api/\"", "/api/v1", "/apix"),
        ("path_suffix = \".png\"", "/x/y.png", "/x.png/y"),
        ("path_regex = \"^/v[0-9]+/\"", "/v2/x", "/vx/"),
    ];
    for (cond, yes, no) in cases {
        let r = rule(&format!("{{ {cond}, pool = \"main\" }}"));
        let Condition::Path(m) = only_condition(&r) else { panic!("{r:?}") };
        assert!(m.matches(yes) && !m.matches(no), "{cond}");
    }
}

#[test]
fn method_is_upper_case_and_one_or_many() {
    let r = rule("{ method = \"get\", pool = \"main\" }");
    assert!(matches!(only_condition(&r), Condition::Method(m) if m == &["GET"]));
    let r = rule("{ method = [\"get\", \"Post\"], pool = \"main\" }");
    assert!(matches!(only_condition(&r), Condition::Method(m) if m == &["GET", "POST"]));
}

#[test]
fn header_and_query_conditions() {
    let r = rule("{ header = { name = \"X-Tenant\" }, pool = \"main\" }");
    assert!(matches!(only_condition(&r), Condition::Header { name, matcher: None } if name == "x-tenant"));
    for (key, yes, no) in
        [("value", "abc", "abcd"), ("prefix", "abcd", "xabc"), ("suffix", "xabc", "abcx"), ("regex", "zabcz", "ab")]
    {
        let r = rule(&format!("{{ header = {{ name = \"x-t\", {key} = \"abc\" }}, pool = \"main\" }}"));
        let Condition::Header { matcher: Some(m), .. } = only_condition(&r) else { panic!("{r:?}") };
        assert!(m.matches(yes) && !m.matches(no), "{key}");
    }
    let r = rule("{ query = { name = \"Debug\", value = \"1\" }, pool = \"main\" }");
    assert!(
        matches!(only_condition(&r), Condition::Query { name, matcher: Some(StrMatch::Exact(v)) } if name == "Debug" && v == "1")
    );
    let r = rule("{ header = [ { name = \"a\" }, { name = \"b\", value = \"1\" } ], query = [ { name = \"q\" } ], pool = \"main\" }");
    assert_eq!(r.conditions.len(), 3);
}

#[test]
fn client_networks() {
    let r = rule("{ client = [\"10.0.0.0/8\", \"::1\", \"192.168.1.77/24\"], deny = true }");
    let Condition::ClientAddr(nets) = only_condition(&r) else { panic!("{r:?}") };
    assert_eq!(nets.len(), 3);
    assert!(nets[0].contains("10.9.8.7".parse().unwrap()));
    assert!(nets[1].contains("::1".parse().unwrap()));
    assert!(nets[2].contains("192.168.1.1".parse().unwrap()));
    assert!(!nets[2].contains("192.168.2.1".parse().unwrap()));
    let r = rule("{ client = \"127.0.0.1\", deny = true }");
    assert!(matches!(only_condition(&r), Condition::ClientAddr(n) if n[0].prefix == 32));
}

#[test]
fn conditions_combine() {
    let r = rule("{ host = \"a\", path_prefix = \"/x\", method = \"GET\", client = \"::/0\", pool = \"main\" }");
    assert_eq!(r.conditions.len(), 4);
}

#[test]
fn edits() {
    let r = rule(
        "{ set_request_headers = { \"X-A\" = \"1\", \"x-b\" = \"2\" }, add_request_headers = { \"X-C\" = \"3\" }, \
         remove_request_headers = [\"Cookie\"], set_response_headers = { \"Server\" = \"sy\" }, \
         add_response_headers = { \"x-d\" = \"4\" }, remove_response_headers = \"X-Powered-By\" }",
    );
    assert!(r.action.is_none());
    let e = &r.edits;
    assert_eq!(e.set_request, vec![("x-a".into(), "1".into()), ("x-b".into(), "2".into())]);
    assert_eq!(e.add_request, vec![("x-c".into(), "3".into())]);
    assert_eq!(e.remove_request, vec!["cookie".to_string()]);
    assert_eq!(e.set_response, vec![("server".into(), "sy".into())]);
    assert_eq!(e.add_response, vec![("x-d".into(), "4".into())]);
    assert_eq!(e.remove_response, vec!["x-powered-by".to_string()]);
}

#[test]
fn edits_cannot_touch_framing_fields() {
    let src = format!(
        "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:8080\"\npool = \"main\"\nrules = [ {{ \
         remove_request_headers = \"Content-Length\", set_response_headers = {{ \"transfer-encoding\" = \"chunked\" }} }} ]\n{POOL}"
    );
    let refused: Vec<String> = errors(&src).into_iter().filter(|e| e.contains("cannot edit")).collect();
    assert_eq!(refused.len(), 2, "{refused:?}");
}

#[test]
fn actions_and_statuses() {
    assert!(matches!(rule("{ pool = \"main\" }").action, Some(Action::Pool(PoolId(0)))));
    assert!(
        matches!(rule("{ redirect = \"/x\" }").action, Some(Action::Redirect { status: 302, ref location }) if location == "/x")
    );
    assert!(matches!(rule("{ redirect = \"/x\", status = 308 }").action, Some(Action::Redirect { status: 308, .. })));
    let Some(Action::Respond { status, body, content_type }) = rule("{ respond = \"hi\" }").action else { panic!() };
    assert_eq!((status, body.as_str(), content_type.as_str()), (200, "hi", "text/plain; charset=utf-8"));
    let Some(Action::Respond { status, content_type, .. }) =
        rule("{ respond = \"{}\", status = 503, content_type = \"application/json\" }").action
    else {
        panic!()
    };
    assert_eq!((status, content_type.as_str()), (503, "application/json"));
    assert!(matches!(rule("{ deny = true }").action, Some(Action::Deny { status: 403 })));
    assert!(matches!(rule("{ deny = true, status = 429 }").action, Some(Action::Deny { status: 429 })));
    assert_eq!(rule("{ name = \"n\", deny = true }").name.as_deref(), Some("n"));
}

#[test]
fn many_errors_at_once() {
    let errs = errors(
        "workers = 0\n[[service]]\nname = \"w\"\nlisten = \"x\"\npool = \"nope\"\nmode = \"udp\"\n\
         rules = [ { path_regex = \"(\" , pool = \"main\", deny = true } ]\n[[pool]]\nname = \"main\"\n",
    );
    assert_eq!(errs.len(), 7, "{errs:#?}");
}

#[test]
fn positions_are_in_characters() {
    let d = parse("# é ü\n\"wörkers\" = 1\n[[service]]\nname = \"é\"\nlisten = \"é:1\"\n", "f").unwrap_err();
    let first = d.iter().next().unwrap();
    assert_eq!((first.line, first.col), (2, 1));
    let addr = d.iter().find(|x| x.message.contains("not an IP")).unwrap();
    assert_eq!((addr.line, addr.col), (5, 10));
    assert!(d.to_string().starts_with("f:2:1: error: unknown key `wörkers` at the top level\n  hint: "));
    // A syntax error is located in characters too: `ö` is the 2nd character.
    let syntax = parse("# é\nwörkers = 1\n", "f").unwrap_err();
    assert_eq!(syntax.to_string().lines().next().map(|l| l.starts_with("f:2:2: error: invalid TOML")), Some(true));
}

#[test]
fn warnings_do_not_fail() {
    let src = format!("[[service]]\nname = \"w\"\nlisten = \"127.0.0.1:80\"\n{POOL}");
    let (config, diags) = parse_with_warnings(&src, "w.toml");
    assert!(config.is_some());
    assert_eq!(diags.warnings().count(), 1);
    assert!(!diags.has_errors());
    assert!(diags.to_string().starts_with("w.toml:6:8: warning: pool `main` is not used"));
    assert!(parse(&src, "w.toml").is_ok());
}

#[test]
fn unreadable_file() {
    let err = load(std::path::Path::new("/nonexistent/switchyard.toml")).unwrap_err();
    assert_eq!(err.len(), 1);
    assert!(err.to_string().starts_with("/nonexistent/switchyard.toml:1:1: error: cannot read the configuration file"));
}

#[test]
fn syntax_error_is_one_diagnostic() {
    let err = parse("[[service]\nname = \"x\"\n", "s.toml").unwrap_err();
    assert_eq!(err.len(), 1);
    assert!(err.to_string().starts_with("s.toml:1:"), "{err}");
}

/// Service `web` and pool `main`, followed by `tail` (top-level tables).
fn with_tables(tail: &str) -> String {
    format!("[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:8080\"\npool = \"main\"\n{POOL}\n{tail}\n")
}

/// The persistence of pool `main` written as `persistence = {table}`.
fn persistence(table: &str) -> Option<Persistence> {
    let src = with_tables("").replace("name = \"main\"\n", &format!("name = \"main\"\npersistence = {table}\n"));
    parse_ok(&src).pools.remove(0).persistence
}

#[test]
fn admin_and_access_log_are_off_without_their_tables() {
    let c = service("");
    assert_eq!((c.admin, c.access_log), (None, None));
    assert_eq!(c.pools[0].persistence, None);
}

#[test]
fn admin_defaults() {
    let admin = parse_ok(&with_tables("[admin]")).admin.unwrap();
    assert_eq!(admin, Admin { listen: "127.0.0.1:9090".parse().unwrap(), tokens: vec![] });
    assert_eq!(admin.listen, Admin::DEFAULT_LISTEN);
    let admin = parse_ok(&with_tables(
        "[admin]\nlisten = \"[::]:9443\"\ntokens = [ { token = \"t1\" }, { token = \"t2\", role = \"read-only\" } ]",
    ))
    .admin
    .unwrap();
    assert_eq!(admin.listen, "[::]:9443".parse::<SocketAddr>().unwrap());
    assert_eq!(
        admin.tokens,
        [
            AdminToken { secret: "t1".into(), role: Role::Admin },
            AdminToken { secret: "t2".into(), role: Role::ReadOnly }
        ]
    );
}

#[test]
fn admin_on_loopback_needs_no_token() {
    for listen in ["127.0.0.1:9091", "127.8.9.10:9091", "[::1]:9091", "[::ffff:127.0.0.1]:9091"] {
        let c = parse_ok(&with_tables(&format!("[admin]\nlisten = \"{listen}\"")));
        assert!(c.admin.unwrap().tokens.is_empty(), "{listen}");
    }
    for listen in ["0.0.0.0:9091", "[::]:9091", "10.0.0.1:9091", "[2001:db8::1]:9091"] {
        let errs = errors(&with_tables(&format!("[admin]\nlisten = \"{listen}\"\ntokens = []")));
        assert_eq!(errs.len(), 1, "{listen}: {errs:?}");
        assert!(errs[0].contains("not on a loopback address and has no tokens"), "{errs:?}");
    }
}

#[test]
fn admin_listener_must_not_overlap_a_service() {
    // The same port on another family, or another port, is fine.
    parse_ok(&with_tables("[admin]\nlisten = \"[::1]:8080\""));
    parse_ok(&with_tables("[admin]\nlisten = \"127.0.0.1:8081\""));
    let errs = errors(&with_tables("[admin]\nlisten = \"0.0.0.0:8080\"\ntokens = [ { token = \"t\" } ]"));
    assert_eq!(errs, ["admin listener `0.0.0.0:8080` overlaps `127.0.0.1:8080` of service `web` (line 3)"]);
}

#[test]
fn access_log_defaults_and_targets() {
    let log = |body: &str| parse_ok(&with_tables(&format!("[access_log]\n{body}"))).access_log.unwrap();
    assert_eq!(log(""), AccessLog { target: LogTarget::Stdout, format: LogFormat::Json });
    assert_eq!(log("path = \"-\"").target, LogTarget::Stdout);
    assert_eq!(log("path = \"stdout\"\nformat = \"combined\"").format, LogFormat::Combined);
    assert_eq!(log("path = \"access.log\"").target, LogTarget::File("access.log".into()));
    assert_eq!(log("path = \"/tmp/a.log\"").target, LogTarget::File("/tmp/a.log".into()));
    for bad in ["\"\"", "\"stderr\"", "\"/tmp/\""] {
        assert_eq!(errors(&with_tables(&format!("[access_log]\npath = {bad}"))).len(), 1, "{bad}");
    }
}

#[test]
fn access_log_in_a_missing_directory_is_a_warning() {
    let src = with_tables("[access_log]\npath = \"/nonexistent-switchyard/x.log\"");
    let (config, diags) = parse_with_warnings(&src, "t.toml");
    assert!(config.is_some());
    assert_eq!(diags.warnings().count(), 1, "{diags}");
}

#[test]
fn cookie_persistence_defaults() {
    let want = CookieInsert {
        name: "SRV".into(),
        path: "/".into(),
        domain: None,
        max_age: None,
        secure: false,
        http_only: true,
    };
    assert_eq!(persistence("{ cookie = \"SRV\" }"), Some(Persistence::CookieInsert(want.clone())));
    let all = "{ cookie = \"SRV\", mode = \"insert\", path = \"/a\", domain = \"example.com\", max_age = \"2h\", \
               secure = true, http_only = false }";
    let full = CookieInsert {
        path: "/a".into(),
        domain: Some("example.com".into()),
        max_age: Some(Duration::from_secs(7200)),
        secure: true,
        http_only: false,
        ..want
    };
    assert_eq!(persistence(all), Some(Persistence::CookieInsert(full)));
}

#[test]
fn stick_table_persistence_defaults() {
    let d = StickTableSpec { idle_timeout: Duration::from_secs(1800), capacity: 100_000 };
    assert_eq!(StickTableSpec::default(), d);
    assert_eq!(persistence("{ source = true }"), Some(Persistence::Source(d)));
    assert_eq!(
        persistence("{ header = \"X-User\", idle_timeout = \"90s\", capacity = 1 }"),
        Some(Persistence::Header {
            name: "x-user".into(),
            table: StickTableSpec { idle_timeout: Duration::from_secs(90), capacity: 1 }
        })
    );
    assert_eq!(
        persistence("{ source = true, capacity = 10000000 }"),
        Some(Persistence::Source(StickTableSpec { capacity: 10_000_000, ..d }))
    );
}

#[test]
fn cookie_learn_rdp_and_sni_persistence() {
    let d = StickTableSpec::default();
    assert_eq!(
        persistence("{ cookie = \"JSESSIONID\", mode = \"learn\", capacity = 50 }"),
        Some(Persistence::CookieLearn { name: "JSESSIONID".into(), table: StickTableSpec { capacity: 50, ..d } })
    );
    assert_eq!(
        persistence("{ cookie = \"SRV\", mode = \"insert\" }").map(|p| p.kind()),
        Some("cookie"),
        "insert is the default mode, and may be written"
    );
    // The layer-4 kinds, on the pools of services that can read their key.
    let l4 = |mode: &str, table: &str| {
        format!(
            "[[service]]\nname = \"l4\"\nmode = \"{mode}\"\nlisten = \"127.0.0.1:3389\"\npool = \"farm\"\n\n\
             [[pool]]\nname = \"farm\"\npersistence = {table}\nservers = [{{ address = \"127.0.0.1:1\" }}]\n"
        )
    };
    let pool = |src: String| parse_ok(&src).pools.remove(0).persistence;
    assert_eq!(pool(l4("tcp", "{ rdp_cookie = true, idle_timeout = \"8h\" }")).map(|p| p.kind()), Some("rdp_cookie"));
    assert_eq!(pool(l4("tls-passthrough", "{ sni = true }")), Some(Persistence::Sni(d)));
    assert_eq!(pool(l4("tcp", "{ source = true }")), Some(Persistence::Source(d)));

    // A kind the service cannot read is an error at the kind, naming the service.
    let cases = [
        (
            "tcp",
            "{ cookie = \"SRV\" }",
            "pool `farm` has `cookie` persistence, which a `tcp` service (`l4`) cannot use",
        ),
        (
            "tcp",
            "{ header = \"x-user\" }",
            "pool `farm` has `header` persistence, which a `tcp` service (`l4`) cannot use",
        ),
        ("tcp", "{ sni = true }", "pool `farm` has `sni` persistence, which a `tcp` service (`l4`) cannot use"),
        (
            "tls-passthrough",
            "{ rdp_cookie = true }",
            "pool `farm` has `rdp_cookie` persistence, which a `tls-passthrough` service (`l4`) cannot use",
        ),
        (
            "tls-passthrough",
            "{ cookie = \"J\", mode = \"learn\" }",
            "pool `farm` has `cookie-learn` persistence, which a `tls-passthrough` service (`l4`) cannot use",
        ),
    ];
    for (mode, table, message) in cases {
        assert_eq!(errors(&l4(mode, table)), [message], "{mode} {table}");
    }
    let http = with_tables("").replace("name = \"main\"\n", "name = \"main\"\npersistence = { rdp_cookie = true }\n");
    assert_eq!(errors(&http), ["pool `main` has `rdp_cookie` persistence, which an `http` service (`web`) cannot use"]);
    let d = parse(&l4("tcp", "{ sni = true }"), "f.toml").unwrap_err().to_string();
    assert!(d.starts_with("f.toml:9:23: error: pool `farm`"), "located at the kind: {d}");
    assert!(d.contains("hint: the server name is read from the ClientHello"), "{d}");
}

#[test]
fn persistence_errors() {
    let errs = |table: &str| {
        errors(&with_tables("").replace("name = \"main\"\n", &format!("name = \"main\"\npersistence = {table}\n")))
    };
    assert_eq!(errs("{ cookie = \"SRV\", mode = \"copy\" }"), ["unknown cookie persistence mode `copy`"]);
    assert_eq!(
        errs("{ cookie = \"SID\", mode = \"learn\", max_age = \"1h\" }"),
        ["`max_age` does not apply to `cookie learn` persistence"]
    );
    assert_eq!(errs("{ header = \"x\", mode = \"learn\" }"), ["`mode` does not apply to `header` persistence"]);
    assert_eq!(errs("{ rdp_cookie = false }"), ["`rdp_cookie = false` turns nothing on"]);
    assert_eq!(
        errs("{ sni = true, source = true }"),
        ["`persistence` takes only one kind, and `sni` is set before `source`"]
    );
    assert_eq!(errs("{ cookie = \"SRV\", capacity = 5 }"), ["`capacity` does not apply to `cookie` persistence"]);
    assert_eq!(errs("{ header = \"x\", max_age = \"1h\" }"), ["`max_age` does not apply to `header` persistence"]);
    assert_eq!(errs("{ source = false }"), ["`source = false` turns nothing on"]);
    assert_eq!(errs("{ cookie = \"a=b\" }"), ["`a=b` is not a valid cookie name"]);
    assert_eq!(errs("{ source = true, capacity = 10000001 }").len(), 1);
    assert_eq!(errs("{}"), ["`persistence` must name one of `cookie`, `source`, `header`, `rdp_cookie` or `sni`"]);
    assert_eq!(errs("{ header = \"\" }"), ["a header name must not be empty"]);
}

#[test]
fn health_checks_passive_checking_and_slow_start() {
    let c = parse_ok(
        "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:8080\"\npool = \"main\"\n\
         [[pool]]\nname = \"main\"\nslow_start = \"30s\"\npassive = {}\n\
         servers = [ { address = \"127.0.0.1:9000\", check_address = \"127.0.0.2:9100\", slow_start = \"0s\" },\n\
         { address = \"127.0.0.1:9001\", slow_start = \"1m\" }, { address = \"127.0.0.1:9002\" } ]\n\
         health_check = { type = \"http\", path = \"/healthz\", expect_status = [204, \"3xx\", \"401-403\"], interval = \"300ms\" }\n",
    );
    let pool = &c.pools[0];
    let slow: Vec<Duration> = pool.servers.iter().map(|s| s.slow_start).collect();
    assert_eq!(slow, [Duration::ZERO, Duration::from_secs(60), Duration::from_secs(30)], "\"0s\" turns it off");
    assert_eq!(pool.servers[0].check_addr, Some("127.0.0.2:9100".parse().unwrap()));
    assert_eq!(pool.servers[1].check_addr, None);
    assert_eq!(pool.passive, Some(Passive { failures: 3, eject: Duration::from_secs(10) }), "defaults");
    let check = pool.health_check.as_ref().unwrap();
    assert_eq!((check.interval, check.timeout), (Duration::from_millis(300), Duration::from_millis(150)));
    assert_eq!((check.rise, check.fall, check.port), (2, 2, None));
    let CheckKind::Http(http) = &check.kind else { panic!("{:?}", check.kind) };
    assert_eq!((http.method.as_str(), http.path.as_str(), http.host.as_deref()), ("GET", "/healthz", None));
    let accepted: Vec<u16> =
        [200, 204, 302, 399, 400, 401, 403, 404].into_iter().filter(|&s| http.accepts(s)).collect();
    assert_eq!(accepted, [204, 302, 399, 401, 403]);
}

/// A config whose pool `main` has `health_check = { CHECK }`.
fn with_check(check: &str) -> String {
    format!(
        "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:8080\"\npool = \"main\"\n\
         [[pool]]\nname = \"main\"\nservers = [ {{ address = \"127.0.0.1:9000\" }} ]\nhealth_check = {{ {check} }}\n"
    )
}

#[test]
fn grpc_health_checks_name_a_service_or_the_whole_server() {
    let kind = |check: &str| parse_ok(&with_check(check)).pools[0].health_check.clone().unwrap().kind;
    assert_eq!(kind("type = \"grpc\""), CheckKind::Grpc(GrpcCheck { service: String::new() }));
    assert_eq!(
        kind("type = \"grpc\", service = \"shop.v1.Orders\""),
        CheckKind::Grpc(GrpcCheck { service: "shop.v1.Orders".into() })
    );
    assert_eq!(
        errors(&with_check("type = \"grpc\", service = \"two words\"")),
        ["`service` must be a gRPC service name (visible ASCII, no spaces)"]
    );
    assert_eq!(
        errors(&with_check("type = \"grpc\", path = \"/healthz\", send = \"x\"")),
        [
            "`path` does not apply to a health check of type `grpc`",
            "`send` does not apply to a health check of type `grpc`"
        ]
    );
    for other in ["http", "tcp", "tls"] {
        assert_eq!(
            errors(&with_check(&format!("type = \"{other}\", service = \"a.B\""))),
            [format!("`service` does not apply to a health check of type `{other}`")],
        );
    }
    assert_eq!(
        errors(&with_check("type = \"udp\", send = \"x\", service = \"a.B\"")),
        ["`service` does not apply to a health check of type `udp`"]
    );
}
