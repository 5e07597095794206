//! Persistence end to end: an inserted cookie brings a client back to its
//! server, a forged one does not, and a source stick table survives reloads.

mod common;

use std::net::SocketAddr;

use common::*;

fn config(listen: SocketAddr, a: SocketAddr, b: SocketAddr, persistence: &str, marker: &str) -> String {
    format!(
        "workers = 2\n\n[[service]]\nname = \"web\"\nlisten = \"{listen}\"\npool = \"main\"\n\
         rules = [{{ path_prefix = \"/\", set_response_headers = {{ x-marker = \"{marker}\" }} }}]\n\n\
         [[pool]]\nname = \"main\"\npersistence = {persistence}\n\
         servers = [{{ address = \"{a}\", name = \"server-a\" }}, {{ address = \"{b}\", name = \"server-b\" }}]\n"
    )
}

fn cookie_of(response: &Response) -> Option<String> {
    let value = response.header("set-cookie")?;
    value.split(';').next().map(str::to_string)
}

#[test]
fn an_inserted_cookie_brings_the_client_back_to_its_server() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let listen = proxy_addr();
    let proxy = Proxy::start(&config(listen, a.addr, b.addr, "{ cookie = \"SRV\" }", "1"), listen);

    let first = proxy.get("/");
    let cookie = cookie_of(&first).expect("the first response sets the persistence cookie");
    assert!(cookie.starts_with("SRV="), "{cookie}");
    let set_cookie = first.header("set-cookie").unwrap_or_default();
    assert!(set_cookie.contains("Path=/") && set_cookie.contains("HttpOnly"), "{set_cookie}");
    let token = &cookie["SRV=".len()..];
    assert!(!token.contains("server") && !token.contains("127.0.0.1"), "the cookie must not name the server");

    // Round robin alone would alternate; the cookie pins every request, on
    // new connections (possibly other workers) too.
    for _ in 0..10 {
        let again = Client::connect(listen).request("GET", "/", &[("cookie", &format!("theme=dark; {cookie}"))]);
        assert_eq!(again.origin(), first.origin());
        assert!(again.header("set-cookie").is_none(), "a valid cookie is not set again");
    }
    // A forged or stale value is ignored and replaced.
    let forged = Client::connect(listen).request("GET", "/", &[("cookie", "SRV=AAAAAAAAAAAAAAAA")]);
    assert_eq!(forged.status, 200);
    assert!(cookie_of(&forged).is_some(), "a forged cookie gets a real one");
}

#[test]
fn a_source_stick_table_survives_reloads() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let listen = proxy_addr();
    let persistence = "{ source = true, idle_timeout = \"10m\" }";
    let file = write_temp("persist-reload", "switchyard.toml", &config(listen, a.addr, b.addr, persistence, "1"));
    let proxy = Proxy::run_file_with(&file, listen, 2);

    let first = proxy.get("/").origin().to_string();
    for _ in 0..6 {
        assert_eq!(proxy.get("/").origin(), first, "source persistence pins the client");
    }
    for round in 1..=3 {
        std::fs::write(&file, config(listen, a.addr, b.addr, persistence, &format!("{round}x"))).expect("rewrite");
        proxy.reload(round);
        for _ in 0..4 {
            let response = proxy.get("/");
            assert_eq!(response.header("x-marker"), Some(format!("{round}x").as_str()), "reload {round} applied");
            assert_eq!(response.origin(), first, "the stick table survived reload {round}");
        }
    }
}
