//! A service's `cache` and a rule's `cache = false`: defaults, sizes, key parts, and the
//! diagnostics `check` gives.

#![allow(clippy::unwrap_used)]

use switchyard_config::*;

const POOL: &str = "\n[[pool]]\nname = \"main\"\nservers = [ { address = \"127.0.0.1:9000\" } ]\n";

fn source(extra: &str, mode: &str) -> String {
    format!(
        "[[service]]\nname = \"web\"\nmode = \"{mode}\"\nlisten = \"127.0.0.1:8080\"\npool = \"main\"\n{extra}\n{POOL}"
    )
}

fn service(extra: &str) -> Service {
    match parse(&source(extra, "http"), "t.toml") {
        Ok(mut c) => c.services.remove(0),
        Err(d) => panic!("refused:\n{d}"),
    }
}

fn errors(extra: &str, mode: &str) -> Vec<String> {
    parse(&source(extra, mode), "t.toml").unwrap_err().errors().map(|d| d.message.clone()).collect()
}

#[test]
fn cache_defaults_and_settings() {
    assert_eq!(service("").cache, None);
    assert_eq!(service("cache = false").cache, None);
    let d = service("cache = true").cache.unwrap();
    assert_eq!(d, Cache::default());
    assert_eq!((d.size, d.max_object, d.heuristic), (256 << 20, 8 << 20, false));
    assert_eq!(d.key, [CacheKeyPart::Host, CacheKeyPart::Path, CacheKeyPart::Query]);
    let c = service(
        "cache = { size = \"1MiB\", max_object = 4096, key = [\"scheme\", \"host\", \"path\"], heuristic = true }",
    )
    .cache
    .unwrap();
    assert_eq!((c.size, c.max_object, c.heuristic), (1 << 20, 4096, true));
    assert_eq!(c.key, [CacheKeyPart::Scheme, CacheKeyPart::Host, CacheKeyPart::Path]);
}

#[test]
fn rules_can_turn_the_cache_off() {
    let s = service("cache = true\nrules = [ { path_prefix = \"/api/\", cache = false } ]");
    assert!(s.rules[0].edits.no_cache);
    assert!(s.rules[0].action.is_none(), "evaluation continues");
    let e = errors("rules = [ { path_prefix = \"/api/\", cache = true } ]", "http");
    assert!(e.iter().any(|m| m.contains("only turn the cache off")), "{e:?}");
}

#[test]
fn cache_diagnostics() {
    let e = errors("cache = { size = \"1MiB\", max_object = \"2MiB\" }", "http");
    assert!(e.iter().any(|m| m.contains("`max_object` (2097152 bytes) is larger than the cache `size`")), "{e:?}");
    let e = errors("cache = { size = \"12 parsecs\" }", "http");
    assert_eq!(e.len(), 1, "{e:?}");
    let e = errors("cache = { key = [\"host\", \"paht\"] }", "http");
    assert!(e.iter().any(|m| m.contains("unknown cache key part `paht`")), "{e:?}");
    let e = errors("cache = { key = [] }", "http");
    assert!(e.iter().any(|m| m.contains("the cache `key` is empty")), "{e:?}");
    let e = errors("cache = { sise = \"1MiB\" }", "http");
    assert!(e.iter().any(|m| m.contains("sise")), "{e:?}");
    let e = errors("cache = true", "tcp");
    assert!(e.iter().any(|m| m.contains("cache")), "{e:?}");
}

#[test]
fn a_changed_cache_is_a_changed_service() {
    let a = parse(&source("cache = true", "http"), "t.toml").unwrap();
    let b = parse(&source("cache = { size = \"1MiB\" }", "http"), "t.toml").unwrap();
    assert!(!diff(&a, &b).is_empty());
    assert!(diff(&a, &a.clone()).is_empty());
}

#[test]
fn targeted_fields_are_field_names() {
    assert_eq!(service("cache = true").cache.unwrap().targeted, ["cdn-cache-control"]);
    let c = service("cache = { targeted = [\"Switchyard-Cache-Control\", \"CDN-Cache-Control\"] }").cache.unwrap();
    assert_eq!(c.targeted, ["switchyard-cache-control", "cdn-cache-control"]);
    assert!(service("cache = { targeted = [] }").cache.unwrap().targeted.is_empty());
    let e = errors("cache = { targeted = [\"CDN Cache Control\"] }", "http");
    assert!(e.iter().any(|m| m.contains("`CDN Cache Control` is not a header field name")), "{e:?}");
    let e = errors("cache = { targeted = [\"Cache-Control\"] }", "http");
    assert!(e.iter().any(|m| m.contains("cannot be a targeted cache-control field")), "{e:?}");
    // One name may be written without the array, as for the other string lists.
    assert_eq!(service("cache = { targeted = \"X-Cache-Control\" }").cache.unwrap().targeted, ["x-cache-control"]);
    let e = errors("cache = { targeted = [\"CDN-Cache-Control\", 5] }", "http");
    assert!(!e.is_empty());
    // The location and the hint, as `switchyard check` prints them.
    let d = parse(&source("cache = { targeted = [\"a b\"] }", "http"), "t.toml").unwrap_err();
    let text = d.to_string();
    assert!(text.contains("t.toml:6:") && text.contains("hint"), "{text}");
}
