use std::time::SystemTime;

use super::*;

fn config(size: u64, max_object: u64) -> CacheConfig {
    CacheConfig { size, max_object, ..CacheConfig::default() }
}

fn entry(body: usize, vary: Vary) -> Entry {
    let headers = vec![("cache-control".to_string(), b"max-age=60".to_vec())];
    let now = SystemTime::now();
    Entry::new(200, headers, Bytes::from(vec![b'x'; body]), vary, now, now, &CacheConfig::default())
}

fn no_headers(_: &str) -> Option<Vec<u8>> {
    None
}

#[test]
fn bytes_stay_within_size_and_the_least_recently_used_go_first() {
    // One shard (size / max_object = 1): a strict LRU.
    let cache = Cache::new(&config(10_000, 10_000));
    for i in 0..100 {
        cache.insert(&format!("h/{i}"), entry(500, Vec::new()));
        if i > 0 {
            // Keep key 0 hot.
            assert!(matches!(cache.lookup("h/0", &no_headers), Found::Entry(_)), "hot key evicted at {i}");
        }
    }
    assert!(cache.stats.bytes.load(Ordering::Relaxed) <= 10_000);
    assert!(cache.stats.evictions.load(Ordering::Relaxed) > 0);
    assert!(matches!(cache.lookup("h/99", &no_headers), Found::Entry(_)));
}

#[test]
fn objects_over_max_object_are_not_stored() {
    let cache = Cache::new(&config(100_000, 1_000));
    cache.insert("big", entry(2_000, Vec::new()));
    assert!(matches!(cache.lookup("big", &no_headers), Found::Nothing));
}

#[test]
fn variants_are_selected_by_request_values() {
    let cache = Cache::new(&config(100_000, 10_000));
    let gzip = vary_values(b"Accept-Encoding", &|_| Some(b"gzip".to_vec()));
    cache.insert("k", entry(10, gzip));
    cache.insert("k", entry(20, vary_values(b"accept-encoding", &|_| None)));
    let Found::Entry(e) = cache.lookup("k", &|_| Some(b"gzip".to_vec())) else { panic!("gzip variant") };
    assert_eq!(e.body.len(), 10);
    let Found::Entry(e) = cache.lookup("k", &no_headers) else { panic!("identity variant") };
    assert_eq!(e.body.len(), 20);
    assert!(matches!(cache.lookup("k", &|_| Some(b"br".to_vec())), Found::Nothing));
}

#[test]
fn purge_by_key_and_prefix() {
    let cache = Cache::new(&config(100_000, 1_000));
    for k in ["a.test/x", "a.test/x/1", "a.test/y", "b.test/x"] {
        cache.insert(k, entry(10, Vec::new()));
    }
    assert_eq!(cache.purge("a.test/y", false), 1);
    assert_eq!(cache.purge("a.test/x", true), 2);
    assert_eq!(cache.purge("a.test/", true), 0);
    assert!(matches!(cache.lookup("b.test/x", &no_headers), Found::Entry(_)));
}

#[test]
fn one_fetch_per_key_and_waiters_wake_when_it_ends() {
    let cache = Cache::new(&config(100_000, 1_000));
    let Coalesce::Lead(fetch) = cache.coalesce("k") else { panic!("first miss leads") };
    let Coalesce::Wait(mut rx) = cache.coalesce("k") else { panic!("second miss waits") };
    assert!(matches!(cache.coalesce("other"), Coalesce::Lead(_)));
    cache.insert("k", entry(10, Vec::new()));
    drop(fetch);
    let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    assert!(rt.block_on(rx.changed()).is_err(), "the waiter wakes when the fetch ends");
    assert!(matches!(cache.lookup("k", &no_headers), Found::Entry(_)));
    assert!(matches!(cache.coalesce("k"), Coalesce::Lead(_)));
}

#[test]
fn keys_follow_the_configured_parts() {
    let d = CacheConfig::default().key;
    assert_eq!(key(&d, "http", "GET", "a.test", "/p", Some("x=1")), "a.test/p?x=1");
    assert_eq!(key(&d, "http", "HEAD", "a.test", "/p", None), "a.test/p");
    let parts = [CacheKeyPart::Scheme, CacheKeyPart::Host, CacheKeyPart::Path];
    assert_eq!(key(&parts, "https", "GET", "a.test", "/p", Some("x")), "https://a.test/p");
}

#[test]
fn interim_responses_before_the_final_one_are_never_stored() {
    let raw = b"HTTP/1.1 103 Early Hints\r\nlink: </a.css>; rel=preload\r\n\r\n\
                HTTP/1.1 102 Processing\r\n\r\n\
                HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncache-control: max-age=60\r\n\r\nok";
    let (status, headers, body) = parse_captured(raw).expect("the final response");
    assert_eq!((status, &body[..]), (200, &b"ok"[..]));
    assert_eq!(headers, vec![("cache-control".to_string(), b"max-age=60".to_vec())]);
    assert!(parse_captured(b"HTTP/1.1 103 Early Hints\r\n\r\n").is_none(), "no final response: nothing to store");
}

#[test]
fn captured_chunked_responses_are_decoded() {
    let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nETag: \"v1\"\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
    let (status, headers, body) = parse_captured(raw).expect("a complete response");
    assert_eq!(status, 200);
    assert_eq!(&body[..], b"abcde");
    assert_eq!(headers, vec![("etag".to_string(), b"\"v1\"".to_vec())]);
    assert!(parse_captured(&raw[..raw.len() - 3]).is_none(), "an incomplete body is not stored");
}

#[test]
fn client_conditionals_against_an_entry() {
    let now = SystemTime::now();
    let headers = vec![
        ("etag".to_string(), b"W/\"v1\"".to_vec()),
        ("last-modified".to_string(), b"Tue, 14 Nov 2023 22:13:20 GMT".to_vec()),
    ];
    let e = Entry::new(200, headers, Bytes::new(), Vec::new(), now, now, &CacheConfig::default());
    assert!(not_modified(&e, Some(b"\"v0\", \"v1\""), None), "weak comparison");
    assert!(not_modified(&e, Some(b"*"), None));
    assert!(!not_modified(&e, Some(b"\"v2\""), Some(b"Tue, 14 Nov 2023 22:13:20 GMT")), "If-None-Match wins");
    assert!(not_modified(&e, None, Some(b"Tue, 14 Nov 2023 22:13:20 GMT")));
    assert!(!not_modified(&e, None, Some(b"Tue, 14 Nov 2023 22:13:19 GMT")));
    assert!(!not_modified(&e, None, None));
}

#[test]
fn freshness_staleness_and_windows() {
    let now = SystemTime::now();
    let cc = |v: &str| vec![("cache-control".to_string(), v.as_bytes().to_vec())];
    let at = Instant::now();
    let e = Entry::new(
        200,
        cc("max-age=0, stale-if-error=60"),
        Bytes::new(),
        Vec::new(),
        now,
        now,
        &CacheConfig::default(),
    );
    assert!(!e.usable_fresh(at));
    assert!(e.within(e.directives.stale_if_error, at));
    assert!(!e.within(e.directives.stale_while_revalidate, at));
    let strict = Entry::new(
        200,
        cc("max-age=0, must-revalidate, stale-if-error=60"),
        Bytes::new(),
        Vec::new(),
        now,
        now,
        &CacheConfig::default(),
    );
    assert!(!strict.within(strict.directives.stale_if_error, at), "must-revalidate forbids stale");
    let fresh = Entry::new(200, cc("max-age=60"), Bytes::new(), Vec::new(), now, now, &CacheConfig::default());
    assert!(fresh.usable_fresh(at));
    let aged = vec![("cache-control".to_string(), b"max-age=60".to_vec()), ("age".to_string(), b"100".to_vec())];
    assert!(
        !Entry::new(200, aged, Bytes::new(), Vec::new(), now, now, &CacheConfig::default()).usable_fresh(at),
        "Age counts"
    );
    let revalidate =
        Entry::new(200, cc("max-age=60, no-cache"), Bytes::new(), Vec::new(), now, now, &CacheConfig::default());
    assert!(!revalidate.usable_fresh(at), "no-cache: always revalidated");
}

#[test]
fn a_304_refreshes_headers_and_keeps_the_body() {
    let now = SystemTime::now();
    let headers = vec![
        ("cache-control".to_string(), b"max-age=0".to_vec()),
        ("etag".to_string(), b"\"v1\"".to_vec()),
        ("x-kept".to_string(), b"1".to_vec()),
    ];
    let e = Entry::new(200, headers, Bytes::from_static(b"body"), Vec::new(), now, now, &CacheConfig::default());
    let update = vec![("cache-control".to_string(), b"max-age=60".to_vec())];
    let r = e.refreshed(&update, now, &CacheConfig::default());
    assert!(r.usable_fresh(Instant::now()));
    assert_eq!(&r.body[..], b"body");
    assert_eq!(policy::header(&r.headers, "x-kept"), Some(&b"1"[..]));
    assert_eq!(policy::headers(&r.headers, "cache-control").count(), 1);
}

#[test]
fn the_origin_age_counts_and_is_not_stored() {
    // RFC 9111 §4.2.3: an entry that arrived with `Age: 7200` is 7200 s old.
    let now = SystemTime::now();
    let headers = vec![("cache-control".to_string(), b"max-age=3600".to_vec()), ("age".to_string(), b"7200".to_vec())];
    let e = Entry::new(200, headers, Bytes::new(), Vec::new(), now, now, &CacheConfig::default());
    assert!(e.age(Instant::now()) >= Duration::from_secs(7200));
    assert!(!e.usable_fresh(Instant::now()));
    assert!(policy::header(&e.headers, "age").is_none(), "the served Age is computed, not the stored one");
    let mut out = Vec::new();
    hit_head(&mut switchyard_http::head_writer::Http1Head::new(&mut out), &e, e.age(Instant::now()), 200, false, false);
    let text = String::from_utf8(out).expect("ascii head");
    assert_eq!(text.matches("age: ").count(), 1, "{text}");
    assert!(text.contains("age: 7200\r\n"), "{text}");
    // A targeted field governs freshness when the configuration names it.
    let cdn = vec![
        ("cache-control".to_string(), b"max-age=0".to_vec()),
        ("cdn-cache-control".to_string(), b"max-age=60".to_vec()),
    ];
    let e = Entry::new(200, cdn.clone(), Bytes::new(), Vec::new(), now, now, &CacheConfig::default());
    assert!(e.usable_fresh(Instant::now()));
    let plain = CacheConfig { targeted: Vec::new(), ..CacheConfig::default() };
    assert!(!Entry::new(200, cdn, Bytes::new(), Vec::new(), now, now, &plain).usable_fresh(Instant::now()));
}
