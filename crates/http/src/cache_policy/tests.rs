//! Table tests of the policy, each rule with its RFC section.

use super::*;

fn h(pairs: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
    pairs.iter().map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())).collect()
}

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

/// `Tue, 14 Nov 2023 22:13:20 GMT`
const T0: u64 = 1_700_000_000;

fn cc(value: &str) -> Control {
    Control { directives: Directives::parse([value.as_bytes()].into_iter()), targeted: false }
}

#[test]
fn directives_are_read_from_every_value() {
    let d = Directives::parse(
        [&b"public, max-age=60"[..], b"s-maxage=\"120\", stale-if-error=30, Must-Revalidate"].into_iter(),
    );
    assert_eq!(d.max_age, Some(60));
    assert_eq!(d.s_maxage, Some(120));
    assert_eq!(d.stale_if_error, Some(30));
    assert!(d.public && d.must_revalidate && !d.no_store);
    assert_eq!(Directives::parse([&b"max-age=junk"[..]].into_iter()).max_age, Some(0));
}

#[test]
fn delta_seconds_follow_section_1_2_2() {
    let table: &[(&str, Option<u64>)] = &[
        ("0", Some(0)),
        ("60", Some(60)),
        ("2147483647", Some(2_147_483_647)),
        ("2147483648", Some(DELTA_MAX)),
        ("99999999999999999999999", Some(DELTA_MAX)),
        ("-1", None),
        ("+5", None),
        ("5s", None),
        ("1.5", None),
        ("", None),
        ("1 0", None),
    ];
    for (text, expected) in table {
        assert_eq!(delta_seconds(text.as_bytes()), *expected, "{text:?}");
    }
    // §4.2.1: a directive given twice counts by its first occurrence.
    let d = Directives::parse([&b"max-age=10"[..], b"max-age=1000"].into_iter());
    assert_eq!(d.max_age, Some(10));
    let d = Directives::parse([&b"max-age=99999999999999999999"[..]].into_iter());
    assert_eq!(d.max_age, Some(DELTA_MAX));
}

#[test]
fn s_maxage_wins_then_max_age_then_expires() {
    let now = at(T0);
    let c = cc("max-age=10, s-maxage=20");
    assert_eq!(freshness(&c, &[], now, false), Some(Duration::from_secs(20)));
    let none = Control::default();
    let hs = h(&[("date", "Tue, 14 Nov 2023 22:13:20 GMT"), ("expires", "Tue, 14 Nov 2023 22:14:20 GMT")]);
    assert_eq!(freshness(&none, &hs, now, false), Some(Duration::from_secs(60)));
    let bad = h(&[("expires", "0")]);
    assert_eq!(freshness(&none, &bad, now, false), Some(Duration::ZERO));
    let lm = h(&[("date", "Tue, 14 Nov 2023 22:13:20 GMT"), ("last-modified", "Tue, 14 Nov 2023 22:11:40 GMT")]);
    assert_eq!(freshness(&none, &lm, now, false), None);
    assert_eq!(freshness(&none, &lm, now, true), Some(Duration::from_secs(10)));
}

#[test]
fn expires_in_the_obsolete_formats() {
    // RFC 9110 §5.6.7: a recipient accepts RFC 850 and asctime dates.
    let none = Control::default();
    let table: &[(&str, u64)] = &[
        ("Tue, 14 Nov 2023 22:14:20 GMT", 60),
        ("Tuesday, 14-Nov-23 22:15:20 GMT", 120),
        ("Tue Nov 14 22:16:20 2023", 180),
        ("Tue, 14 Nov 2023 22:12:20 GMT", 0), // before Date: already stale
        ("Mon, 14 Nov 2023 22:14:20 GMT", 0), // wrong weekday: invalid, stale
    ];
    for (expires, lifetime) in table {
        let hs = h(&[("date", "Tue, 14 Nov 2023 22:13:20 GMT"), ("expires", expires)]);
        assert_eq!(freshness(&none, &hs, at(T0), false), Some(Duration::from_secs(*lifetime)), "{expires}");
    }
    // Without Date, Expires counts from the receipt.
    let hs = h(&[("expires", "Tuesday, 14-Nov-23 22:14:20 GMT")]);
    assert_eq!(freshness(&none, &hs, at(T0), false), Some(Duration::from_secs(60)));
}

#[test]
fn age_values_of_every_form() {
    // §5.1: the first member of a list, an invalid value ignored; §1.2.2: at most 2^31.
    let table: &[(&[(&str, &str)], u64)] = &[
        (&[("age", "7200")], 7200),
        (&[("age", " 30 ")], 30),
        (&[("age", "30, 60")], 30),
        (&[("age", "30"), ("age", "60")], 30),
        (&[("age", "99999999999999999999")], DELTA_MAX),
        (&[("age", "2147483648")], DELTA_MAX),
        (&[("age", "60s")], 0),
        (&[("age", "-60")], 0),
        (&[("age", "1.5")], 0),
        (&[("age", "")], 0),
        (&[], 0),
    ];
    for (headers, expected) in table {
        assert_eq!(age_value(&h(headers)), Duration::from_secs(*expected), "{headers:?}");
    }
}

#[test]
fn age_takes_the_larger_estimate() {
    // §4.2.3: corrected_initial_age = max(apparent_age, age_value + response_delay).
    let t0 = at(T0);
    let hs = h(&[("age", "5"), ("date", "Tue, 14 Nov 2023 22:13:18 GMT")]);
    assert_eq!(initial_age(&hs, t0, t0 + Duration::from_secs(1)), Duration::from_secs(6));
    let hs = h(&[("date", "Tue, 14 Nov 2023 22:13:00 GMT")]);
    assert_eq!(initial_age(&hs, t0, t0), Duration::from_secs(20));
    // A Date in the future (a fast origin clock) gives no negative age.
    let hs = h(&[("date", "Tue, 14 Nov 2023 23:00:00 GMT"), ("age", "3")]);
    assert_eq!(initial_age(&hs, t0, t0 + Duration::from_secs(2)), Duration::from_secs(5));
    // The response delay counts even without Age.
    assert_eq!(initial_age(&[], t0, t0 + Duration::from_secs(4)), Duration::from_secs(4));
    let hs = h(&[("age", "99999999999")]);
    assert_eq!(initial_age(&hs, t0, t0 + Duration::from_secs(4)), Duration::from_secs(DELTA_MAX));
}

#[test]
fn a_targeted_field_replaces_cache_control_and_expires() {
    let cdn = ["cdn-cache-control".to_string()];
    let mine = ["switchyard-cache-control".to_string(), "cdn-cache-control".to_string()];
    let hs = h(&[
        ("cache-control", "no-store"),
        ("expires", "Tue, 14 Nov 2023 22:14:20 GMT"),
        ("date", "Tue, 14 Nov 2023 22:13:20 GMT"),
        ("cdn-cache-control", "max-age=600"),
        ("switchyard-cache-control", "max-age=30"),
    ]);
    let c = control(&hs, &cdn);
    assert!(c.targeted && !c.directives.no_store);
    assert_eq!(freshness(&c, &hs, at(T0), false), Some(Duration::from_secs(600)));
    assert!(storable(200, &c, &hs, false, false));
    assert_eq!(control(&hs, &mine).directives.max_age, Some(30), "the first listed field wins");
    // No targeted field configured: Cache-Control governs.
    let c = control(&hs, &[]);
    assert!(!c.targeted && c.directives.no_store);
    assert!(!storable(200, &c, &hs, false, false));
    // An invalid targeted field is skipped: the next one, then Cache-Control.
    let hs =
        h(&[("cache-control", "max-age=5"), ("switchyard-cache-control", "Max-Age=30"), ("cdn-cache-control", "")]);
    let c = control(&hs, &mine);
    assert!(!c.targeted);
    assert_eq!(c.directives.max_age, Some(5));
    // Targeted without freshness: Expires is ignored, not a lifetime.
    let hs = h(&[("expires", "Tue, 14 Nov 2023 22:14:20 GMT"), ("cdn-cache-control", "public")]);
    let c = control(&hs, &cdn);
    assert_eq!(freshness(&c, &hs, at(T0), false), None);
    assert!(storable(200, &c, &hs, false, false), "public makes it storable (§3)");
    let c = control(&h(&[("cdn-cache-control", "no-store"), ("cache-control", "max-age=60")]), &cdn);
    assert!(c.directives.no_store);
}

#[test]
fn what_a_shared_cache_may_store() {
    assert!(storable(200, &cc("max-age=5"), &[], false, false));
    assert!(!storable(200, &cc("max-age=5, private"), &[], false, false));
    assert!(!storable(200, &cc("no-store, max-age=5"), &[], false, false));
    assert!(!storable(200, &cc(""), &[], false, false));
    assert!(storable(200, &cc(""), &h(&[("etag", "\"a\"")]), false, false));
    assert!(!storable(200, &cc("max-age=5"), &h(&[("set-cookie", "a=b")]), false, false));
    assert!(!storable(200, &cc("max-age=5"), &h(&[("vary", "accept, *")]), false, false));
    assert!(!storable(200, &cc("max-age=5"), &[], true, false));
    assert!(storable(200, &cc("s-maxage=5"), &[], true, false));
    assert!(!storable(206, &cc("max-age=5"), &[], false, false));
    assert!(!storable(103, &cc("max-age=5"), &[], false, false), "1xx are never stored");
    assert!(storable(302, &cc("max-age=5"), &[], false, false));
    assert!(!storable(302, &cc("public"), &[], false, false));
}

#[test]
fn unsafe_methods_invalidate_after_a_non_error() {
    // RFC 9110 §9.2.1 safe methods; RFC 9111 §4.4 for every other one.
    for m in ["GET", "HEAD", "OPTIONS", "TRACE"] {
        assert!(safe_method(m.as_bytes()), "{m}");
    }
    for m in ["POST", "PUT", "DELETE", "PATCH", "PURGE", "PROPFIND", "MKCOL", "get"] {
        assert!(!safe_method(m.as_bytes()), "{m}");
    }
    let table: &[(u16, bool)] = &[(200, true), (204, true), (301, true), (304, true), (404, false), (500, false)];
    for (status, expected) in table {
        assert_eq!(invalidates(*status), *expected, "{status}");
    }
}

#[test]
fn conditional_requests_the_cache_answers() {
    let received = at(T0);
    let etag = h(&[("etag", "\"v1\"")]);
    let lm = h(&[("last-modified", "Tue, 14 Nov 2023 22:00:00 GMT"), ("date", "Tue, 14 Nov 2023 22:13:00 GMT")]);
    let date_only = h(&[("date", "Tue, 14 Nov 2023 22:13:00 GMT")]);
    type Case<'a> = (&'a [(String, Vec<u8>)], Option<&'a str>, Option<&'a str>, bool);
    let table: &[Case<'_>] = &[
        (&etag, Some("\"v1\""), None, true),
        (&etag, Some("W/\"v1\""), None, true),
        (&etag, Some("\"v0\", \"v1\""), None, true),
        (&etag, Some("\"v2\""), None, false),
        (&etag, Some("*"), None, true),
        (&[], Some("*"), None, true),
        (&[], Some("\"v1\""), None, false),
        // If-None-Match wins over If-Modified-Since (RFC 9110 §13.2.2).
        (&etag, Some("\"v2\""), Some("Tue, 14 Nov 2030 00:00:00 GMT"), false),
        (&lm, None, Some("Tue, 14 Nov 2023 22:00:00 GMT"), true),
        (&lm, None, Some("Tue, 14 Nov 2023 21:59:59 GMT"), false),
        // No Last-Modified: the stored Date, then the receipt time (RFC 9111 §4.3.2).
        (&date_only, None, Some("Tue, 14 Nov 2023 22:13:00 GMT"), true),
        (&date_only, None, Some("Tue, 14 Nov 2023 22:12:59 GMT"), false),
        (&[], None, Some("Tue, 14 Nov 2023 22:13:20 GMT"), true),
        (&[], None, Some("Tue, 14 Nov 2023 22:13:19 GMT"), false),
        (&[], None, Some("Tuesday, 14-Nov-23 22:13:20 GMT"), true),
        (&lm, None, Some("yesterday"), false),
        (&lm, None, None, false),
    ];
    for (stored, inm, ims, expected) in table {
        let got = not_modified(stored, received, inm.map(str::as_bytes), ims.map(str::as_bytes));
        assert_eq!(got, *expected, "{stored:?} {inm:?} {ims:?}");
    }
}

#[test]
fn vary_selected_values_are_normalised() {
    // RFC 9111 §4.1: whitespace, line combination and case where the syntax allows.
    let v = |name: &str, lines: &[&str]| selecting_value(name, lines.iter().map(|l| l.as_bytes()));
    assert_eq!(v("accept-language", &[]), None, "absent");
    assert_eq!(v("accept-language", &[""]), Some(Vec::new()), "present and empty is not absent");
    let same: &[(&str, &[&str], &[&str])] = &[
        ("accept-language", &["fr-CH, fr;q=0.9"], &["fr-ch,fr;q=0.9"]),
        ("accept-language", &["fr-CH ,  fr ; q=0.9"], &["FR-ch", "fr;q=0.9"]),
        ("accept", &["text/html;level=1, */*; q=0.1"], &["TEXT/HTML ; level=1,*/*;q=0.1"]),
        ("x-device", &["  mobile "], &["mobile"]),
        ("x-device", &["a", "b"], &["a,b"]),
    ];
    for (name, a, b) in same {
        assert_eq!(v(name, a), v(name, b), "{name}: {a:?} vs {b:?}");
    }
    let different: &[(&str, &[&str], &[&str])] = &[
        ("accept-language", &["fr"], &["de"]),
        ("accept-language", &["fr, de"], &["de, fr"]),
        ("x-device", &["Mobile"], &["mobile"]),
        ("accept", &["text/html;x=\"A\""], &["text/html;x=\"a\""]),
    ];
    for (name, a, b) in different {
        assert_ne!(v(name, a), v(name, b), "{name}: {a:?} vs {b:?}");
    }
}

#[test]
fn accept_encoding_is_normalised() {
    assert_eq!(normalise_accept_encoding(b"gzip, BR"), b"br,gzip");
    assert_eq!(normalise_accept_encoding(b"br,gzip;q=0.5, zstd;q=0"), b"br,gzip");
    assert_eq!(normalise_accept_encoding(b""), b"");
}
