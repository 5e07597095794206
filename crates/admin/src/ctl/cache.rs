//! `switchyard ctl cache`: the response caches — every service's counters,
//! a service's keys (all, or by prefix) with each stored response's age,
//! freshness left, size and hits, one key in detail, and purges.

use std::fmt::Write as _;

use clap::Subcommand;
use ureq::http::Method;

use super::client::{encode_query_value, Client};
use super::table::{bytes, Align, Table};
use super::{encode_path_segment, render, CtlArgs, CtlError};
use crate::backend::{CacheEntriesView, CacheEntryView, CacheView};

/// `switchyard ctl cache` commands; without one, every cache's counters.
#[derive(Debug, Clone, Subcommand)]
pub enum CacheCommand {
    /// A service's cache keys, sorted, each stored response with its age,
    /// freshness left, size and hits.
    List {
        /// Service name.
        service: String,
        /// Only keys starting with this (e.g. `example.com/assets/`).
        #[arg(long)]
        prefix: Option<String>,
        /// Keys to list.
        #[arg(long, default_value_t = crate::DEFAULT_CACHE_LIMIT)]
        limit: usize,
    },
    /// One key in detail: every variant with the request values that select it.
    Show {
        /// Service name.
        service: String,
        /// Cache key, e.g. `example.com/path?query` (with the default key parts).
        key: String,
    },
    /// Remove a key (or, with --prefix, every key starting with it).
    Purge {
        /// Service name.
        service: String,
        /// Cache key.
        key: Option<String>,
        /// Remove every key starting with this instead.
        #[arg(long, conflicts_with = "key")]
        prefix: Option<String>,
    },
}

/// Runs `ctl cache [COMMAND]`.
pub(super) fn run(client: &Client, args: &CtlArgs, command: Option<&CacheCommand>) -> Result<String, CtlError> {
    match command {
        None => {
            let path = "/api/v1/cache";
            let answer = client.call(Method::GET, path, None)?;
            render(args, path, &answer, |v: serde_json::Value| {
                let caches: Vec<CacheView> = serde_json::from_value(v["caches"].clone()).unwrap_or_default();
                render_caches(&caches)
            })
        }
        Some(CacheCommand::List { service, prefix, limit }) => {
            let prefix = encode_query_value(prefix.as_deref().unwrap_or(""));
            let path = format!("/api/v1/cache/{}/entries?prefix={prefix}&limit={limit}", encode_path_segment(service));
            let answer = client.call(Method::GET, &path, None)?;
            render(args, &path, &answer, |v: CacheEntriesView| render_keys(&v))
        }
        Some(CacheCommand::Show { service, key }) => {
            let query = encode_query_value(key);
            let path = format!("/api/v1/cache/{}/entries?key={query}", encode_path_segment(service));
            let answer = client.call(Method::GET, &path, None)?;
            let view: CacheEntriesView = serde_json::from_str(&answer)
                .map_err(|e| CtlError::Protocol { url: path.clone(), reason: format!("invalid JSON: {e}") })?;
            if view.keys.is_empty() {
                return Err(CtlError::Usage(format!("service {service}: no key `{key}` in the cache")));
            }
            render(args, &path, &answer, |v: CacheEntriesView| render_key(&v))
        }
        Some(CacheCommand::Purge { service, key, prefix }) => {
            super::purge(client, args, service, key.as_deref(), prefix.as_deref())
        }
    }
}

/// `ctl cache`: one row per service with a cache.
pub fn render_caches(caches: &[CacheView]) -> String {
    use Align::{Left as L, Right as R};
    if caches.is_empty() {
        return "no service has a cache\n".to_string();
    }
    let mut t = Table::new(&[
        ("SERVICE", L),
        ("KEYS", R),
        ("STORED", R),
        ("SIZE", R),
        ("HIT RATIO", R),
        ("HITS", R),
        ("MISSES", R),
        ("STALE", R),
        ("REVALIDATED", R),
        ("SERVED", R),
        ("PIECES", R),
        ("EVICTIONS", R),
    ]);
    for c in caches {
        t.row(vec![
            c.service.clone(),
            c.keys.to_string(),
            bytes(c.bytes),
            bytes(c.size),
            c.hit_ratio().map_or_else(|| "-".to_string(), |r| format!("{:.1}%", r * 100.0)),
            c.hits.to_string(),
            c.misses.to_string(),
            c.stale.to_string(),
            c.revalidated.to_string(),
            bytes(c.served_bytes),
            c.pieces.to_string(),
            c.evictions.to_string(),
        ]);
    }
    t.render()
}

/// `ctl cache list`: one row per stored response (a key with several
/// variants has several rows), and one per incomplete response.
pub fn render_keys(v: &CacheEntriesView) -> String {
    use Align::{Left as L, Right as R};
    let mut out = format!("service {}: {} keys", v.service, v.matched);
    if (v.keys.len() as u64) < v.matched {
        let _ = write!(out, ", showing {}", v.keys.len());
    }
    out.push('\n');
    if v.keys.is_empty() {
        return out;
    }
    let mut t = Table::new(&[("KEY", L), ("STATUS", R), ("AGE", R), ("FRESH FOR", R), ("SIZE", R), ("HITS", R)]);
    for k in &v.keys {
        for e in &k.variants {
            t.row(vec![
                k.key.clone(),
                e.status.to_string(),
                seconds(e.age_s as f64),
                freshness(e),
                bytes(e.size),
                e.hits.to_string(),
            ]);
        }
        if let Some(p) = &k.partial {
            let held = format!("{} of {}", bytes(p.held), bytes(p.length));
            t.row(vec![k.key.clone(), "206".into(), "-".into(), "partial".into(), held, "-".into()]);
        }
    }
    out.push_str(&t.render());
    out
}

/// `ctl cache show`: each variant of one key as a block of fields.
pub fn render_key(v: &CacheEntriesView) -> String {
    let mut out = String::new();
    for k in &v.keys {
        let _ = writeln!(out, "key {} (service {}): {} variant(s)", k.key, v.service, k.variants.len());
        for e in &k.variants {
            let mut t = Table::new(&[("", Align::Left), ("", Align::Left)]);
            t.row(vec!["status".into(), e.status.to_string()]);
            t.row(vec!["age".into(), seconds(e.age_s as f64)]);
            t.row(vec!["fresh for".into(), freshness(e)]);
            t.row(vec!["size".into(), format!("{} ({} stored)", bytes(e.size), bytes(e.stored_bytes))]);
            t.row(vec!["hits".into(), e.hits.to_string()]);
            for (name, value) in &e.vary {
                t.row(vec![format!("vary {name}"), value.clone().unwrap_or_else(|| "(absent)".into())]);
            }
            out.push('\n');
            t.render().lines().skip(1).for_each(|l| out.push_str(&format!("  {l}\n")));
        }
        if let Some(p) = &k.partial {
            let _ = writeln!(out, "\n  incomplete response: {} of {} held", bytes(p.held), bytes(p.length));
        }
    }
    out
}

/// `12s`, `3m 4s`, `2h 5m`, `3d 4h`.
fn seconds(s: f64) -> String {
    let s = s.max(0.0) as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// Freshness left, or how long it has been stale.
fn freshness(e: &CacheEntryView) -> String {
    if e.fresh_for_s > 0.0 {
        seconds(e.fresh_for_s)
    } else {
        format!("stale {}", seconds(-e.fresh_for_s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{CacheKeyView, CachePartialView};

    #[test]
    fn keys_render_one_row_per_stored_response() {
        let entry = |status, age_s, fresh_for_s, hits| CacheEntryView {
            status,
            age_s,
            fresh_for_s,
            size: 2048,
            stored_bytes: 2300,
            hits,
            ..CacheEntryView::default()
        };
        let view = CacheEntriesView {
            service: "web".into(),
            matched: 3,
            keys: vec![
                CacheKeyView { key: "a.test/x".into(), variants: vec![entry(200, 5, 55.0, 7)], partial: None },
                CacheKeyView {
                    key: "a.test/y".into(),
                    variants: vec![entry(404, 90, -30.0, 0)],
                    partial: Some(CachePartialView { held: 1024, length: 4096 }),
                },
            ],
        };
        let text = render_keys(&view);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "service web: 3 keys, showing 2");
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            ["KEY", "STATUS", "AGE", "FRESH", "FOR", "SIZE", "HITS"]
        );
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            ["a.test/x", "200", "5s", "55s", "2.0", "KiB", "7"]
        );
        assert_eq!(
            lines[3].split_whitespace().collect::<Vec<_>>(),
            ["a.test/y", "404", "1m", "30s", "stale", "30s", "2.0", "KiB", "0"]
        );
        assert!(lines[4].contains("partial") && lines[4].contains("1.0 KiB of 4.0 KiB"), "{}", lines[4]);
        assert_eq!(lines.len(), 5);
    }

    #[test]
    fn caches_render_their_hit_ratio() {
        let view = CacheView { service: "web".into(), hits: 3, stale: 0, misses: 1, ..CacheView::default() };
        let text = render_caches(&[view]);
        assert!(text.lines().nth(1).is_some_and(|l| l.contains("75.0%")), "{text}");
        let idle = render_caches(&[CacheView { service: "idle".into(), ..CacheView::default() }]);
        // idle, 0 keys, "0 B", "0 B", then the ratio.
        assert!(idle.lines().nth(1).is_some_and(|l| l.split_whitespace().nth(6) == Some("-")), "{idle}");
    }
}
