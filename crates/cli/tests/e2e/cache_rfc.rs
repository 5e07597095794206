//! The cache against RFC 9111 and its companions, end to end through the binary and the
//! origin simulator (each response shaped by its query: `age`, `date_ago`, `cc`,
//! `cdn_cache`, `header`, `etag`, `hints`, `unsafe_status`, `delay_ms`). Each test says
//! what the client receives and whether the origin was reached:
//!
//! - the origin's `Age`, `Date` and the response delay make a response older (§4.2.3), and
//!   `Age` values of unusual forms are read as §5.1 and §1.2.2 say;
//! - `CDN-Cache-Control` and a configured targeted field win over `Cache-Control` (RFC 9213);
//! - any unsafe method invalidates, only after a non-error answer (§4.4), and so do the
//!   same-origin targets its answer names in `Location` and `Content-Location`;
//! - `Expires` in the obsolete date formats (RFC 9110 §5.6.7); 304 for a client's
//!   conditional request when the stored response lacks that validator (§4.3.2);
//!   `Vary`-selected headers compared after normalisation (§4.1);
//! - `Range` answered from a stored response: one range, several (multipart), 416, `If-Range`;
//! - partial responses (206, origin query `ranges=1`) kept and combined into a stored
//!   response when they share a strong validator (§3.3–3.4), and never otherwise;
//! - `stale-while-revalidate`: the stale entry at once, one refresh in the background;
//! - interim (1xx) responses are relayed on a miss, never stored or replayed by a hit.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, SystemTime};

use common::*;

/// A proxy with two workers and `cache` over `origin`.
fn start(origin: SocketAddr, cache: &str) -> Proxy {
    let listen = proxy_addr();
    let toml = simple_config(listen, &[origin], &format!("cache = {cache}")).replace("workers = 1", "workers = 2");
    Proxy::start(&toml, listen)
}

fn age(r: &Response) -> u64 {
    r.header("age").unwrap_or_else(|| panic!("no Age in {:?}", r.headers)).parse().expect("Age is a number")
}

#[test]
fn the_origin_age_date_and_delay_make_a_response_older() {
    let origin = Origin::start("o");
    let proxy = start(origin.addr, "true");
    let mut c = proxy.connect();

    // max-age=3600 arriving with Age: 7200 is stale at once: the next request goes to the origin.
    let first = c.get("/old?cache=3600&age=7200");
    assert_eq!(first.header("age"), Some("7200"), "a miss relays the origin's Age");
    c.get("/old?cache=3600&age=7200");
    assert_eq!(origin.requests(), 2, "a response older than its max-age is not served from the cache");

    // Age: 600 with max-age=3600: a hit whose Age starts at 600, not at 0.
    c.get("/young?cache=3600&age=600");
    let hit = c.get("/young?cache=3600&age=600");
    assert_eq!(origin.requests(), 3);
    assert!((600..3600).contains(&age(&hit)), "{:?}", hit.header("age"));

    // A Date an hour old (apparent age) counts the same way.
    c.get("/dated?cache=1800&date_ago=3600");
    c.get("/dated?cache=1800&date_ago=3600");
    assert_eq!(origin.requests(), 5, "Date an hour old, max-age half an hour: stale");
    c.get("/recent?cache=1800&date_ago=100");
    let hit = c.get("/recent?cache=1800&date_ago=100");
    assert_eq!(origin.requests(), 6);
    assert!(age(&hit) >= 100, "the hit is as old as its Date says: {:?}", hit.header("age"));

    // The response delay is added to Age (corrected_age_value): 3 s + 1.2 s > max-age 4.
    c.get("/slow?cache=4&age=3&delay_ms=1200");
    c.get("/slow?cache=4&age=3&delay_ms=1200");
    assert_eq!(origin.requests(), 8, "Age plus the time the response took is past max-age");
}

#[test]
fn age_values_of_unusual_forms() {
    let origin = Origin::start("o");
    let proxy = start(origin.addr, "true");
    let mut c = proxy.connect();
    // (query, served from the cache the second time?, least Age of that hit)
    let table: &[(&str, bool, u64)] = &[
        ("age=60s", true, 0),                   // not delta-seconds: ignored (RFC 9111 §5.1)
        ("age=-5", true, 0),                    // ignored
        ("age=30%2C%207200", true, 30),         // a list: its first member
        ("age=30&age=7200", true, 30),          // two field lines: the first
        ("age=99999999999999999999", false, 0), // past 2^31: 2^31 (§1.2.2), stale
        ("age=2147483648", false, 0),
    ];
    for (i, (query, hit, least)) in table.iter().enumerate() {
        let path = format!("/forms/{i}?cache=3600&{query}");
        c.get(&path);
        let before = origin.requests();
        let second = c.get(&path);
        assert_eq!(origin.requests() == before, *hit, "{query}: served from the cache?");
        if *hit {
            let a = age(&second);
            assert!(a >= *least && a < 3600, "{query}: Age {a}");
        }
    }
}

#[test]
fn targeted_fields_take_precedence_over_cache_control() {
    let origin = Origin::start("o");
    let proxy = start(origin.addr, "{ targeted = [\"Switchyard-Cache-Control\", \"CDN-Cache-Control\"] }");
    let mut c = proxy.connect();
    let twice = |c: &mut Client, path: &str| {
        let before = origin.requests();
        c.get(path);
        let r = c.get(path);
        (origin.requests() - before, r)
    };
    // CDN-Cache-Control: max-age=60 stores what Cache-Control: no-store would not.
    let (reached, hit) = twice(&mut c, "/cdn/store?cc=no-store&cdn_cache=max-age%3D60");
    assert_eq!(reached, 1, "stored by CDN-Cache-Control");
    assert_eq!(hit.header("cache-control"), Some("no-store"), "the fields reach the client unchanged");
    assert_eq!(hit.header("cdn-cache-control"), Some("max-age=60"));
    // ... and CDN-Cache-Control: no-store keeps out what Cache-Control would store.
    assert_eq!(twice(&mut c, "/cdn/nostore?cache=60&cdn_cache=no-store").0, 2);
    // An invalid targeted value (not a Structured Fields Dictionary) is skipped whole.
    assert_eq!(twice(&mut c, "/cdn/invalid?cache=60&cdn_cache=Max-Age%3D0").0, 1);
    // The configured field comes first in the list: it wins over CDN-Cache-Control.
    let mine = "/mine?cache=60&cdn_cache=max-age%3D60&header=Switchyard-Cache-Control%3Ano-store";
    assert_eq!(twice(&mut c, mine).0, 2);
    let mine = "/mine2?cc=no-store&cdn_cache=no-store&header=Switchyard-Cache-Control%3Amax-age%3D60";
    assert_eq!(twice(&mut c, mine).0, 1);
    // With a targeted field, Expires is ignored: `public` alone gives no freshness.
    let expires =
        "/cdn/expires?cc=no-store&cdn_cache=public&header=Expires%3ASun%2C%2031%20Dec%202060%2023%3A59%3A59%20GMT";
    assert_eq!(twice(&mut c, expires).0, 2);
}

#[test]
fn unsafe_methods_invalidate_only_after_a_non_error_answer() {
    let origin = Origin::start("o");
    let proxy = start(origin.addr, "true");
    let mut c = proxy.connect();
    let stored = |c: &mut Client, path: &str| {
        c.get(path);
        let before = origin.requests();
        c.get(path);
        assert_eq!(origin.requests(), before, "{path} is stored");
    };
    let reaches_origin = |c: &mut Client, path: &str| {
        let before = origin.requests();
        c.get(path);
        origin.requests() > before
    };
    // A method the proxy does not know is unsafe (RFC 9111 §4.4); a 2xx invalidates.
    let path = "/inv/a?cache=60&unsafe_status=204";
    stored(&mut c, path);
    assert_eq!(c.request("FROBNICATE", path, &[]).status, 204);
    assert!(reaches_origin(&mut c, path), "invalidated by FROBNICATE");
    // A 5xx to the unsafe request leaves the entry in place.
    let path = "/inv/b?cache=60&unsafe_status=500";
    stored(&mut c, path);
    assert_eq!(c.request("DELETE", path, &[]).status, 500);
    assert!(!reaches_origin(&mut c, path), "a failed DELETE changed nothing");
    // POST with a 3xx invalidates; safe methods (OPTIONS) do not.
    let path = "/inv/c?cache=60&unsafe_status=303";
    stored(&mut c, path);
    c.request("OPTIONS", path, &[]);
    assert!(!reaches_origin(&mut c, path), "OPTIONS is safe");
    assert_eq!(c.request("POST", path, &[("content-length", "0")]).status, 303);
    assert!(reaches_origin(&mut c, path), "invalidated by POST");
}

#[test]
fn location_and_content_location_on_the_same_origin_are_invalidated() {
    let origin = Origin::start("o");
    let proxy = start(origin.addr, "true");
    let mut c = proxy.connect();
    // `header=NAME:VALUE` on the origin's query, the value percent-encoded.
    let field = |name: &str, value: &str| {
        let value: String =
            value
                .bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() || b == b'.' {
                        char::from(b).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect();
        format!("header={name}%3A{value}")
    };
    let targets = ["/loc/a?cache=60", "/loc/b?cache=60", "/loc/c?cache=60", "/loc/d?cache=60", "/loc/e?cache=60"];
    for path in targets {
        c.get(path);
    }
    // The client's Host is `test`, its scheme http: these name entries on its origin ...
    let same = format!(
        "/act1?{}&{}",
        field("Location", "/loc/a?cache=60"),
        field("Content-Location", "http://TEST:80/loc/b?cache=60#top")
    );
    assert_eq!(c.request("POST", &same, &[("content-length", "0")]).status, 200);
    // ... these do not (another host, port or scheme), and an error answer invalidates nothing.
    let other = format!(
        "/act2?{}&{}",
        field("Location", "http://elsewhere/loc/c?cache=60"),
        field("Content-Location", "http://test:81/loc/d?cache=60")
    );
    c.request("PUT", &other, &[("content-length", "0")]);
    c.request(
        "POST",
        &format!("/act3?{}", field("Location", "https://test/loc/e?cache=60")),
        &[("content-length", "0")],
    );
    let failed = format!("/act4?unsafe_status=500&{}", field("Location", "/loc/c?cache=60"));
    assert_eq!(c.request("DELETE", &failed, &[]).status, 500);

    let before = origin.requests();
    let reached: Vec<&str> = targets
        .into_iter()
        .filter(|path| {
            let n = origin.requests();
            c.get(path);
            origin.requests() > n
        })
        .collect();
    assert_eq!(reached, ["/loc/a?cache=60", "/loc/b?cache=60"], "only the same-origin targets were invalidated");
    assert_eq!(origin.requests(), before + 2);
}

/// An IMF-fixdate `offset` seconds from now (negative: in the past).
fn http_date(offset: i64) -> String {
    let now = SystemTime::now();
    let at = if offset >= 0 {
        now + Duration::from_secs(offset.unsigned_abs())
    } else {
        now - Duration::from_secs(offset.unsigned_abs())
    };
    httpdate::fmt_http_date(at)
}

fn escaped(value: &str) -> String {
    value.replace('%', "%25").replace(' ', "%20").replace(',', "%2C").replace(':', "%3A")
}

#[test]
fn expires_in_the_obsolete_date_formats() {
    let origin = Origin::start("o");
    let proxy = start(origin.addr, "true");
    let mut c = proxy.connect();
    // (Expires value, fresh?)
    let table: &[(&str, bool)] = &[
        ("Fri, 31 Dec 2060 23:59:59 GMT", true),
        ("Friday, 31-Dec-60 23:59:59 GMT", true), // RFC 850: 60 is 2060 (50-year rule)
        ("Fri Dec 31 23:59:59 2060", true),       // ANSI C asctime()
        ("Sunday, 06-Nov-94 08:49:37 GMT", false),
        ("Sun Nov  6 08:49:37 1994", false),
        ("Friday, 31-Dec-99 23:59:59 GMT", false), // 99 is 1999, not 2099
        ("0", false),                              // invalid: already expired
    ];
    for (i, (expires, fresh)) in table.iter().enumerate() {
        let path = format!("/exp/{i}?cc=public&header=Expires%3A{}", escaped(expires));
        let first = c.get(&path);
        assert_eq!(first.header("expires"), Some(*expires));
        let before = origin.requests();
        c.get(&path);
        assert_eq!(origin.requests() == before, *fresh, "Expires: {expires}");
    }
}

#[test]
fn the_cache_answers_conditionals_without_that_validator() {
    let origin = Origin::start("o");
    let proxy = start(origin.addr, "true");
    let mut c = proxy.connect();
    // Stored without Last-Modified or Date: If-Modified-Since compares with the time it was stored.
    c.get("/cond/a?cache=60");
    let later = http_date(3600);
    let r = c.request("GET", "/cond/a?cache=60", &[("if-modified-since", &later)]);
    assert_eq!((r.status, r.body.len()), (304, 0), "stored before that date: 304 (RFC 9111 §4.3.2)");
    let r = c.request("GET", "/cond/a?cache=60", &[("if-modified-since", "Sun, 06 Nov 1994 08:49:37 GMT")]);
    assert_eq!(r.status, 200);
    // With a Date but no Last-Modified: the Date is the validator.
    c.get("/cond/b?cache=86400&date_ago=3600");
    let r = c.request("GET", "/cond/b?cache=86400&date_ago=3600", &[("if-modified-since", &http_date(-7200))]);
    assert_eq!(r.status, 200, "changed since then, as far as the stored Date says");
    let r = c.request("GET", "/cond/b?cache=86400&date_ago=3600", &[("if-modified-since", &http_date(-1800))]);
    assert_eq!(r.status, 304);
    // If-None-Match: * matches any stored response, ETag or not; a tag needs the ETag.
    assert_eq!(c.request("GET", "/cond/a?cache=60", &[("if-none-match", "*")]).status, 304);
    assert_eq!(c.request("GET", "/cond/a?cache=60", &[("if-none-match", "\"x\"")]).status, 200);
    assert_eq!(origin.requests(), 2, "every answer came from the cache");
}

#[test]
fn vary_matches_normalised_request_headers() {
    let origin = Origin::start("o");
    let proxy = start(origin.addr, "true");
    let mut c = proxy.connect();
    let path = "/vary?cache=60&header=Vary%3AAccept-Language";
    let get = |c: &mut Client, value: Option<&str>| {
        let before = origin.requests();
        let headers: Vec<(&str, &str)> = value.map(|v| ("accept-language", v)).into_iter().collect();
        c.request("GET", path, &headers);
        origin.requests() > before
    };
    assert!(get(&mut c, Some("fr-CH, fr;q=0.9")));
    assert!(!get(&mut c, Some("FR-ch,fr ; q=0.9")), "case and whitespace do not make another variant");
    assert!(get(&mut c, Some("de")));
    assert!(get(&mut c, None), "an absent header is its own variant");
    assert!(!get(&mut c, None));
    assert!(get(&mut c, Some("")), "an empty header is not an absent one");
}

#[test]
fn ranges_are_answered_from_a_stored_response() {
    let origin = Origin::start("o");
    let proxy = start(origin.addr, "true");
    let mut c = proxy.connect();
    let path = "/range?cache=60&size=1000&etag=v1";
    let full = c.get(path).body;
    assert_eq!(full.len(), 1000);
    let ranged = |c: &mut Client, headers: &[(&str, &str)]| {
        let mut h = vec![];
        h.extend_from_slice(headers);
        c.request("GET", path, &h)
    };

    let r = ranged(&mut c, &[("range", "bytes=0-99")]);
    assert_eq!((r.status, r.header("content-range")), (206, Some("bytes 0-99/1000")));
    assert_eq!(r.body, full[..100]);
    let r = ranged(&mut c, &[("range", "bytes=-100")]);
    assert_eq!((r.status, r.header("content-range")), (206, Some("bytes 900-999/1000")));
    assert_eq!(r.body, full[900..]);

    // Several ranges: multipart/byteranges, each part with its Content-Range.
    let r = ranged(&mut c, &[("range", "bytes=0-9, 500-509")]);
    assert_eq!(r.status, 206);
    let ct = r.header("content-type").expect("content-type").to_string();
    let boundary = ct.strip_prefix("multipart/byteranges; boundary=").expect("multipart").to_string();
    let parts = multipart(&r.body, &boundary);
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[0], ("bytes 0-9/1000".to_string(), full[..10].to_vec()));
    assert_eq!(parts[1], ("bytes 500-509/1000".to_string(), full[500..510].to_vec()));

    let r = ranged(&mut c, &[("range", "bytes=2000-")]);
    assert_eq!((r.status, r.header("content-range")), (416, Some("bytes */1000")));
    // If-Range: the stored strong ETag lets the range through; another tag gets the whole.
    let r = ranged(&mut c, &[("range", "bytes=0-9"), ("if-range", "\"v1\"")]);
    assert_eq!((r.status, r.body.len()), (206, 10));
    let r = ranged(&mut c, &[("range", "bytes=0-9"), ("if-range", "\"v0\"")]);
    assert_eq!((r.status, r.body.len()), (200, 1000));
    // A Range the server cannot read as bytes is ignored: the whole response.
    let r = ranged(&mut c, &[("range", "bytes=9-1")]);
    assert_eq!((r.status, r.body.len()), (200, 1000));
    assert_eq!(origin.requests(), 1, "every range came from the stored response");

    // only-if-cached with nothing stored: 504, even for a range.
    let r =
        c.request("GET", "/range2?cache=60&size=1000", &[("range", "bytes=0-9"), ("cache-control", "only-if-cached")]);
    assert_eq!(r.status, 504);
    // Nothing stored for the key: the range request goes to the origin; this origin
    // ignores Range and answers the whole 200, which is stored like any other.
    let whole = c.request("GET", "/range2?cache=60&size=1000", &[("range", "bytes=0-9")]);
    assert_eq!((whole.status, whole.body.len()), (200, 1000));
    c.get("/range2?cache=60&size=1000");
    assert_eq!(origin.requests(), 2);
}

#[test]
fn partial_responses_are_combined_into_a_stored_response() {
    let origin = Origin::start("o");
    let proxy = start(origin.addr, "true");
    let mut c = proxy.connect();
    let range = |c: &mut Client, path: &str, r: &str| c.request("GET", path, &[("range", r)]);

    // Three 206s with one strong ETag: 0-399, 600-, then 300-700 which joins them.
    let path = "/parts?cache=60&size=1000&etag=v1&ranges=1";
    let a = range(&mut c, path, "bytes=0-399");
    assert_eq!((a.status, a.header("content-range"), a.body.len()), (206, Some("bytes 0-399/1000"), 400));
    let b = range(&mut c, path, "bytes=600-");
    assert_eq!((b.status, b.header("content-range"), b.body.len()), (206, Some("bytes 600-999/1000"), 400));
    // A range inside the pieces still goes to the origin: an incomplete response answers nothing.
    range(&mut c, path, "bytes=0-9");
    assert_eq!(origin.requests(), 3);
    let full = c.get(path);
    assert_eq!((full.status, origin.requests()), (200, 4), "not complete yet: the whole GET is a miss");
    // That whole 200 is stored now; pieces are combined on a fresh key below.
    let path = "/parts2?cache=60&size=1000&etag=v1&ranges=1";
    let a = range(&mut c, path, "bytes=0-399");
    let b = range(&mut c, path, "bytes=600-");
    let m = range(&mut c, path, "bytes=300-700");
    assert_eq!((m.status, m.header("content-range")), (206, Some("bytes 300-700/1000")));
    assert_eq!(origin.requests(), 7);
    let whole = c.get(path);
    assert_eq!((whole.status, whole.body.len()), (200, 1000));
    assert_eq!(origin.requests(), 7, "the combined pieces answer a whole GET");
    assert!(whole.header("age").is_some() && whole.header("content-range").is_none(), "{:?}", whole.headers);
    assert_eq!(whole.header("etag"), Some("\"v1\""));
    assert_eq!(whole.body, full.body, "the same bytes the origin sends whole");
    assert_eq!(
        (&whole.body[..400], &whole.body[600..], &whole.body[300..701]),
        (&a.body[..], &b.body[..], &m.body[..])
    );
    // ... and ranges, like any stored response.
    let r = range(&mut c, path, "bytes=100-199");
    assert_eq!((r.status, r.header("content-range")), (206, Some("bytes 100-199/1000")));
    assert_eq!(r.body, full.body[100..200]);
    assert_eq!(origin.requests(), 7);

    // A strong Last-Modified (an hour before Date) identifies the representation as well.
    let modified = escaped(&http_date(-3600));
    let path = format!("/lm?cache=60&size=100&ranges=1&date_ago=0&header=Last-Modified%3A{modified}");
    range(&mut c, &path, "bytes=0-49");
    range(&mut c, &path, "bytes=50-99");
    assert_eq!(c.get(&path).body.len(), 100);
    assert_eq!(origin.requests(), 9, "combined: the whole GET was a hit");

    // Never combined: a weak ETag, no validator, a Last-Modified without a Date to
    // show it strong, a response the cache may not store.
    for path in [
        "/weak?cache=60&size=100&ranges=1&header=ETag%3AW%2F%22w%22".to_string(),
        "/none?cache=60&size=100&ranges=1".to_string(),
        format!("/lm-nodate?cache=60&size=100&ranges=1&header=Last-Modified%3A{modified}"),
        "/nostore?size=100&ranges=1&etag=v1".to_string(),
    ] {
        let before = origin.requests();
        assert_eq!(range(&mut c, &path, "bytes=0-49").status, 206, "{path}");
        range(&mut c, &path, "bytes=50-99");
        assert_eq!(c.get(&path).status, 200);
        assert_eq!(origin.requests(), before + 3, "{path}: the pieces were not combined");
    }
}

/// The parts of a multipart/byteranges body: (Content-Range, data).
fn multipart(body: &[u8], boundary: &str) -> Vec<(String, Vec<u8>)> {
    let delimiter = format!("--{boundary}");
    let text = body;
    let mut parts = Vec::new();
    let mut at = 0;
    while let Some(start) = find(&text[at..], delimiter.as_bytes()).map(|i| at + i + delimiter.len()) {
        if text[start..].starts_with(b"--") {
            break;
        }
        let head_end = find(&text[start..], b"\r\n\r\n").expect("part head") + start;
        let head = String::from_utf8_lossy(&text[start..head_end]).to_ascii_lowercase();
        let range = head
            .lines()
            .find_map(|l| l.strip_prefix("content-range: "))
            .expect("a part has a Content-Range")
            .to_string();
        let data_start = head_end + 4;
        let data_end = find(&text[data_start..], format!("\r\n{delimiter}").as_bytes()).expect("next delimiter");
        parts.push((range, text[data_start..data_start + data_end].to_vec()));
        at = data_start + data_end;
    }
    parts
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[test]
fn stale_while_revalidate_answers_at_once_and_refreshes_once_in_the_background() {
    let origin = Origin::start("o");
    let proxy = start(origin.addr, "true");
    // The origin takes 3 s per answer, so every response arrives 3 s old (§4.2.3: the
    // response delay counts): fresh for 3 s more, then 60 s of stale-while-revalidate.
    let path = "/swr?cc=max-age%3D6%2C%20stale-while-revalidate%3D60&etag=v1&delay_ms=3000&size=300";
    let first = proxy.connect().get(path);
    assert_eq!(origin.requests(), 1);
    thread::sleep(Duration::from_millis(3300));
    // Ten clients on two workers find it stale at once.
    let addr = proxy.addr;
    let threads: Vec<_> = (0..10).map(|_| thread::spawn(move || Client::connect(addr).get(path))).collect();
    for t in threads {
        let r = t.join().expect("client");
        assert_eq!((r.status, &r.body), (200, &first.body));
        // A revalidation in the foreground would have waited 3 s for a refreshed entry
        // (Age about 3); the stale one is older than its max-age.
        assert!(age(&r) >= 6, "the stale entry, at once: Age {:?}", r.header("age"));
    }
    // One refresh reached the origin, with the entry's validator (a 304), and the entry
    // is fresh again.
    let refreshed = wait_for("the background refresh", || {
        let r = proxy.connect().get(path);
        (age(&r) < 6).then_some(r)
    });
    assert_eq!((refreshed.status, &refreshed.body), (200, &first.body));
    assert_eq!(origin.requests(), 2, "one background refresh for all the stale hits");
}

#[test]
fn interim_responses_are_relayed_on_a_miss_and_never_replayed() {
    let origin = Origin::start("o");
    let proxy = start(origin.addr, "true");
    let mut stream = TcpStream::connect(proxy.addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut exchange = || {
        stream.write_all(b"GET /hints?cache=60&size=5&hints=1 HTTP/1.1\r\nhost: test\r\n\r\n").expect("send");
        let mut statuses = Vec::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).expect("status line");
            let status: u16 = line.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status");
            statuses.push(status);
            let mut length = 0;
            loop {
                let mut l = String::new();
                reader.read_line(&mut l).expect("field line");
                if l == "\r\n" {
                    break;
                }
                if let Some(v) = l.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().expect("length");
                }
            }
            if status >= 200 {
                let mut body = vec![0; length];
                reader.read_exact(&mut body).expect("body");
                return statuses;
            }
        }
    };
    assert_eq!(exchange(), [103, 200], "the miss relays the origin's 103");
    assert_eq!(exchange(), [200], "the hit has no interim response");
    assert_eq!(origin.requests(), 1, "and came from the cache");
}
