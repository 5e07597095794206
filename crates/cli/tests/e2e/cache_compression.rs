//! Compression and the cache on one service: the cache stores what the client got after
//! compression, one variant per negotiated encoding, so a hit is served encoded without
//! touching the origin (and without compressing again), and every client gets an encoding
//! it accepts.

use crate::common;

use std::io::Read;

use common::{proxy_addr, simple_config, Client, Origin, Proxy, Response};

const PATH: &str = "/page.html?cache=60&compressible=1&size=20000";

fn decoded(r: &Response) -> Vec<u8> {
    let mut out = Vec::new();
    match r.header("content-encoding") {
        None => out = r.body.clone(),
        Some("gzip") => {
            flate2::read::GzDecoder::new(&r.body[..]).read_to_end(&mut out).expect("gunzip");
        }
        Some("br") => {
            brotli::Decompressor::new(&r.body[..], 4096).read_to_end(&mut out).expect("brotli decode");
        }
        Some(other) => panic!("unexpected encoding {other}"),
    }
    out
}

fn get(proxy: &Proxy, accept: Option<&str>) -> Response {
    let headers: Vec<(&str, &str)> = accept.map(|a| ("accept-encoding", a)).into_iter().collect();
    let r = Client::connect(proxy.addr).request("GET", PATH, &headers);
    assert_eq!(r.status, 200, "{:?}", r.headers);
    r
}

#[test]
fn each_encoding_is_a_cached_variant_served_without_the_origin() {
    let origin = Origin::start("o");
    let want = Client::connect(origin.addr).get(PATH).body;
    let before = origin.requests();
    let listen = proxy_addr();
    let extra = "compression = { algorithms = [\"gzip\", \"br\"] }\ncache = true";
    let proxy = Proxy::start(&simple_config(listen, &[origin.addr], extra), listen);

    // Misses: one origin request per encoding the clients negotiate.
    let gzip = get(&proxy, Some("gzip"));
    assert_eq!(gzip.header("content-encoding"), Some("gzip"));
    assert!(decoded(&gzip) == want, "gzip variant decodes to the origin's bytes");
    let br = get(&proxy, Some("br"));
    assert_eq!(br.header("content-encoding"), Some("br"));
    assert!(decoded(&br) == want, "br variant decodes to the origin's bytes");
    let plain = get(&proxy, None);
    assert_eq!(plain.header("content-encoding"), None, "a client that accepts nothing gets identity");
    assert!(plain.body == want);
    assert_eq!(origin.requests() - before, 3, "three variants, three fetches");

    // Hits: each client gets its own variant from the cache; the origin sees nothing.
    for _ in 0..3 {
        for (accept, encoding) in [(Some("gzip"), Some("gzip")), (Some("br;q=1, gzip;q=0.5"), Some("br")), (None, None)]
        {
            let hit = get(&proxy, accept);
            assert_eq!(hit.header("content-encoding"), encoding, "{accept:?}: {:?}", hit.headers);
            assert!(hit.header("age").is_some(), "a hit carries Age: {:?}", hit.headers);
            assert!(hit.header("vary").unwrap_or("").to_ascii_lowercase().contains("accept-encoding"));
            assert!(decoded(&hit) == want, "{accept:?}: the cached variant decodes to the origin's bytes");
        }
    }
    assert_eq!(origin.requests() - before, 3, "hits never reach the origin");
}
