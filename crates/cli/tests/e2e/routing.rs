//! Routing end to end: the `.png` content-switching rule, weighted balancing, backup
//! servers, rule conditions and actions, header edits, and forwarding headers.

use crate::common;

use common::{dead_addr, proxy_addr, simple_config, Origin, Proxy, Response};

/// The values of request header `name` as the origin received it (from `/__origin/request`).
fn seen(r: &Response, name: &str) -> Vec<String> {
    assert_eq!(r.status, 200, "{}", r.text());
    let json = r.json();
    let headers = json["headers"].as_array().unwrap_or_else(|| panic!("no headers in {json}"));
    headers
        .iter()
        .filter(|pair| pair[0].as_str().is_some_and(|n| n.eq_ignore_ascii_case(name)))
        .map(|pair| pair[1].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn png_rule_sends_images_to_their_pool() {
    let main = Origin::start("main");
    let images = Origin::start("images");
    let listen = proxy_addr();
    let config = format!(
        "{}\n[[pool]]\nname = \"images\"\nservers = [{{ address = \"{}\" }}]\n",
        simple_config(listen, &[main.addr], "rules = [{ path_suffix = \".png\", pool = \"images\" }]"),
        images.addr
    );
    let proxy = Proxy::start(&config, listen);
    let mut c = proxy.connect();
    for (path, origin) in [
        ("/a.png", "images"),
        ("/index.html", "main"),
        ("/x/y.png?q=1", "images"),
        ("/a.png.txt", "main"),
        ("/", "main"),
    ] {
        let r = c.get(path);
        assert_eq!((r.status, r.origin()), (200, origin), "{path}");
    }
    assert_eq!((main.requests(), images.requests()), (3, 2));
}

#[test]
fn weights_3_to_1_split_requests_3_to_1() {
    let heavy = Origin::start("heavy");
    let light = Origin::start("light");
    let listen = proxy_addr();
    let config = format!(
        "workers = 1\n[[service]]\nname = \"web\"\nlisten = [\"{listen}\"]\npool = \"main\"\n\n\
         [[pool]]\nname = \"main\"\nservers = [{{ address = \"{}\", weight = 3 }}, {{ address = \"{}\", weight = 1 }}]\n",
        heavy.addr, light.addr
    );
    let proxy = Proxy::start(&config, listen);
    let mut c = proxy.connect();
    let (mut h, mut l) = (0u32, 0u32);
    for _ in 0..400 {
        let r = c.get("/");
        assert_eq!(r.status, 200);
        match r.origin() {
            "heavy" => h += 1,
            "light" => l += 1,
            other => panic!("unexpected origin {other:?}"),
        }
    }
    assert!((270..=330).contains(&h) && h + l == 400, "heavy {h}, light {l}: expected about 300:100");
    assert_eq!((heavy.requests(), light.requests()), (u64::from(h), u64::from(l)));
}

#[test]
fn backup_is_used_only_when_primaries_are_down() {
    // Primaries up: the backup sees nothing.
    let primary = Origin::start("primary");
    let backup = Origin::start("backup");
    let listen = proxy_addr();
    let config = format!(
        "workers = 1\n[[service]]\nname = \"web\"\nlisten = [\"{listen}\"]\npool = \"main\"\n\n\
         [[pool]]\nname = \"main\"\nservers = [{{ address = \"{}\" }}, {{ address = \"{}\", backup = true }}]\n",
        primary.addr, backup.addr
    );
    let proxy = Proxy::start(&config, listen);
    let mut c = proxy.connect();
    for _ in 0..20 {
        assert_eq!(c.get("/").origin(), "primary");
    }
    assert_eq!(backup.requests(), 0);
    drop(c);
    drop(proxy);

    // The only primary refuses connections: the backup answers.
    let listen = proxy_addr();
    let config = format!(
        "workers = 1\n[[service]]\nname = \"web\"\nlisten = [\"{listen}\"]\npool = \"main\"\n\n\
         [[pool]]\nname = \"main\"\nservers = [{{ address = \"{}\" }}, {{ address = \"{}\", backup = true }}]\n",
        dead_addr(),
        backup.addr
    );
    let proxy = Proxy::start(&config, listen);
    let mut c = proxy.connect();
    for i in 0..10 {
        let r = c.get("/");
        assert_eq!((r.status, r.origin()), (200, "backup"), "request {i}: {}", r.text());
    }
}

/// (method, target, headers, expected `respond` body or "" for "reaches the pool").
type Case = (&'static str, &'static str, &'static [(&'static str, &'static str)], &'static str);

#[test]
fn rule_conditions_host_path_method_header_query() {
    let origin = Origin::start("origin");
    let listen = proxy_addr();
    let rules = r#"rules = [
  { host = "a.example", respond = "host" },
  { host_suffix = ".b.example", respond = "host_suffix" },
  { path = "/exact", respond = "path" },
  { path_prefix = "/pre/", respond = "path_prefix" },
  { path_regex = "^/re/[0-9]+$", respond = "path_regex" },
  { method = ["DELETE", "PUT"], respond = "method" },
  { header = { name = "x-tenant", value = "blue" }, respond = "header_value" },
  { header = { name = "x-flag" }, respond = "header_present" },
  { query = { name = "debug", value = "1" }, respond = "query" },
  { path = "/both", method = "POST", respond = "both" },
]"#;
    let proxy = Proxy::start(&simple_config(listen, &[origin.addr], rules), listen);
    let mut c = proxy.connect();
    let cases: &[Case] = &[
        ("GET", "/", &[("host", "A.Example:8080")], "host"),
        ("GET", "/", &[("host", "x.b.example")], "host_suffix"),
        ("GET", "/exact", &[], "path"),
        ("GET", "/exact?x=1", &[], "path"),
        ("GET", "/exact/more", &[], ""),
        ("GET", "/pre/x", &[], "path_prefix"),
        ("GET", "/re/123", &[], "path_regex"),
        ("GET", "/re/12a", &[], ""),
        ("DELETE", "/", &[], "method"),
        ("GET", "/", &[("x-tenant", "blue")], "header_value"),
        ("GET", "/", &[("x-tenant", "green")], ""),
        ("GET", "/", &[("X-Flag", "")], "header_present"),
        ("GET", "/?a=2&debug=1", &[], "query"),
        ("GET", "/?debug=0", &[], ""),
        ("POST", "/both", &[("content-length", "0")], "both"),
        ("GET", "/both", &[], ""),
    ];
    let mut proxied = 0;
    for (method, path, headers, expect) in cases {
        let r = c.request(method, path, headers);
        assert_eq!(r.status, 200, "{method} {path} {headers:?}");
        if expect.is_empty() {
            assert_eq!(r.origin(), "origin", "{method} {path} {headers:?} should reach the pool: {}", r.text());
            proxied += 1;
        } else {
            assert_eq!(r.text(), *expect, "{method} {path} {headers:?}");
            assert_eq!(r.header("x-origin"), None, "answered by the proxy");
        }
    }
    assert_eq!(origin.requests(), proxied);
}

#[test]
fn redirect_respond_and_deny_actions() {
    let origin = Origin::start("origin");
    let listen = proxy_addr();
    let rules = r#"rules = [
  { path = "/r301", redirect = "https://example.com/301", status = 301 },
  { path = "/r302", redirect = "/302" },
  { path = "/r307", redirect = "/307", status = 307 },
  { path = "/r308", redirect = "https://example.com/308", status = 308 },
  { path = "/teapot", respond = "short and stout", status = 418 },
  { path = "/json", respond = "{\"ok\":true}", content_type = "application/json" },
  { path_prefix = "/admin", deny = true },
  { path_prefix = "/slow-down", deny = true, status = 429 },
]"#;
    let proxy = Proxy::start(&simple_config(listen, &[origin.addr], rules), listen);
    let mut c = proxy.connect();
    for (path, status, location) in [
        ("/r301", 301, "https://example.com/301"),
        ("/r302", 302, "/302"),
        ("/r307", 307, "/307"),
        ("/r308", 308, "https://example.com/308"),
    ] {
        let r = c.get(path);
        assert_eq!(r.status, status, "{path}");
        assert_eq!(r.header("location"), Some(location), "{path}");
    }
    let r = c.get("/teapot");
    assert_eq!((r.status, r.text().as_str()), (418, "short and stout"));
    assert!(r.header("content-type").is_some_and(|t| t.starts_with("text/plain")), "{:?}", r.headers);
    let r = c.get("/json");
    assert_eq!((r.status, r.text().as_str()), (200, "{\"ok\":true}"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(c.get("/admin/users").status, 403);
    assert_eq!(c.get("/slow-down").status, 429);
    // The connection survived every local answer, and nothing reached the origin.
    assert_eq!(c.get("/").origin(), "origin");
    assert_eq!(origin.requests(), 1);
}

#[test]
fn request_and_response_header_edits() {
    let origin = Origin::start("origin");
    let listen = proxy_addr();
    let rules = r#"rules = [
  { path_prefix = "/__origin/", set_request_headers = { "x-set" = "new" }, add_request_headers = { "x-add" = "two" }, remove_request_headers = ["x-remove"] },
  { set_response_headers = { "x-resp-set" = "yes", "cache-control" = "private" }, add_response_headers = { "x-resp-add" = "1" }, remove_response_headers = ["content-type"] },
]"#;
    let proxy = Proxy::start(&simple_config(listen, &[origin.addr], rules), listen);
    let mut c = proxy.connect();
    let r = c.request(
        "GET",
        "/__origin/request",
        &[("x-set", "old"), ("x-add", "one"), ("x-remove", "gone"), ("x-keep", "kept")],
    );
    assert_eq!(seen(&r, "x-set"), ["new"]);
    assert_eq!(seen(&r, "x-add"), ["one", "two"]);
    assert!(seen(&r, "x-remove").is_empty());
    assert_eq!(seen(&r, "x-keep"), ["kept"]);

    let r = c.get("/anything");
    assert_eq!(r.origin(), "origin");
    assert_eq!(r.header("x-resp-set"), Some("yes"));
    assert_eq!(r.headers_named("cache-control"), ["private"]);
    assert_eq!(r.header("x-resp-add"), Some("1"));
    assert_eq!(r.header("content-type"), None);
}

#[test]
fn forwarding_headers() {
    let origin = Origin::start("origin");
    let listen = proxy_addr();
    let proxy = Proxy::start(&simple_config(listen, &[origin.addr], "forwarded = true"), listen);
    let mut c = proxy.connect();

    let r = c.request("GET", "/__origin/request", &[("x-forwarded-for", "203.0.113.9")]);
    assert_eq!(seen(&r, "x-forwarded-for").join(", "), "203.0.113.9, 127.0.0.1", "appended, existing value kept");
    assert_eq!(seen(&r, "x-forwarded-proto"), ["http"]);
    let forwarded = seen(&r, "forwarded").join(", ");
    assert!(forwarded.contains("for=") && forwarded.contains("127.0.0.1"), "{forwarded:?}");
    assert!(forwarded.contains("proto=http"), "{forwarded:?}");

    let r = c.get("/__origin/request");
    assert_eq!(seen(&r, "x-forwarded-for"), ["127.0.0.1"]);

    // Switched off: nothing added.
    let listen = proxy_addr();
    let extra = "x_forwarded_for = false\nx_forwarded_proto = false";
    let proxy = Proxy::start(&simple_config(listen, &[origin.addr], extra), listen);
    let r = proxy.get("/__origin/request");
    assert!(seen(&r, "x-forwarded-for").is_empty());
    assert!(seen(&r, "x-forwarded-proto").is_empty());
    assert!(seen(&r, "forwarded").is_empty(), "forwarded is off by default");
}
