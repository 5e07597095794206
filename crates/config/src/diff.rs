//! What changed between two configurations: the input of a reload.
//!
//! Identity is the name. A service or pool with the same name in both
//! configurations is the same object, changed or unchanged; a renamed one is
//! removed and added. Servers are identified by name within their pool; when
//! a pool has two servers of the same name (a warning, not an error), the
//! n-th of that name in the old pool pairs with the n-th in the new one.
//!
//! "Changed" means any field differs, with one exception: pool references
//! ([`PoolId`], an index) compare by the name of the pool they point to, so
//! inserting or reordering pools changes no service that still names the same
//! pools. TLS settings compare by the contents of the PEM files read at
//! validation ([`crate::PemFile`]), not only their paths: a certificate
//! renewed in place changes its service (or pool), so a reload picks it up.
//! Lists keep file order: the new file's for added, changed and
//! unchanged, the old file's for removed.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;

use crate::model::{Action, Config, PoolId, Rule, Service};

/// What happened to the named objects of one kind (services or pools).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Only in the new configuration.
    pub added: Vec<String>,
    /// Only in the old configuration.
    pub removed: Vec<String>,
    /// In both, with some field different.
    pub changed: Vec<String>,
    /// In both, identical.
    pub unchanged: Vec<String>,
}

impl Changes {
    /// True when nothing was added, removed or changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// The servers of one changed pool that were added, removed or changed.
///
/// All three lists can be empty for a changed pool: its own settings
/// changed, or its servers were only reordered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolChange {
    /// The pool's name.
    pub pool: String,
    /// Servers only in the new pool.
    pub added: Vec<String>,
    /// Servers only in the old pool.
    pub removed: Vec<String>,
    /// Servers in both whose address, weight, backup flag or limit differs.
    pub changed: Vec<String>,
}

/// The difference between two configurations; see [`diff`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diff {
    /// Services by name.
    pub services: Changes,
    /// Pools by name.
    pub pools: Changes,
    /// One entry per changed pool, in the order of `pools.changed`.
    pub servers: Vec<PoolChange>,
    /// Listener addresses of the new configuration that no service had before.
    pub listeners_added: Vec<SocketAddr>,
    /// Listener addresses of the old configuration that no service has now.
    pub listeners_removed: Vec<SocketAddr>,
    /// `workers` differs; it cannot change without a restart.
    pub workers_changed: bool,
    /// `drain_timeout` differs.
    pub drain_timeout_changed: bool,
    /// `[admin]` differs (added, removed, or a different listener or tokens).
    pub admin_changed: bool,
    /// `[access_log]` differs.
    pub access_log_changed: bool,
    /// `[event_log]` differs; it takes effect at the next start.
    pub event_log_changed: bool,
    /// `[cluster]` differs (peers, key, queue...).
    pub cluster_changed: bool,
    /// `[tracing]` differs (added, removed, or any of its settings).
    pub tracing_changed: bool,
}

impl Diff {
    /// True when the two configurations mean the same thing.
    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
            && self.pools.is_empty()
            && self.listeners_added.is_empty()
            && self.listeners_removed.is_empty()
            && !self.workers_changed
            && !self.drain_timeout_changed
            && !self.admin_changed
            && !self.access_log_changed
            && !self.event_log_changed
            && !self.cluster_changed
            && !self.tracing_changed
    }

    /// True when part of the change can only take effect after a restart
    /// (today: `workers` and `[event_log]`).
    pub fn needs_restart(&self) -> bool {
        self.workers_changed || self.event_log_changed
    }
}

/// One line, for logs and the admin API, e.g.
/// `services: +1 -0 ~2 =3; pools: +0 -1 ~1 =2; listeners: +1 -0`,
/// followed by `; workers changed (restart needed)` and the like for each
/// top-level setting that changed.
impl fmt::Display for Diff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let counts = |c: &Changes| {
            format!("+{} -{} ~{} ={}", c.added.len(), c.removed.len(), c.changed.len(), c.unchanged.len())
        };
        write!(
            f,
            "services: {}; pools: {}; listeners: +{} -{}",
            counts(&self.services),
            counts(&self.pools),
            self.listeners_added.len(),
            self.listeners_removed.len()
        )?;
        let flags = [
            (self.workers_changed, "workers changed (restart needed)"),
            (self.drain_timeout_changed, "drain_timeout changed"),
            (self.admin_changed, "admin changed"),
            (self.access_log_changed, "access_log changed"),
            (self.event_log_changed, "event_log changed (restart needed)"),
            (self.cluster_changed, "cluster changed"),
            (self.tracing_changed, "tracing changed"),
        ];
        for (_, text) in flags.iter().filter(|(set, _)| *set) {
            write!(f, "; {text}")?;
        }
        Ok(())
    }
}

/// What changed from `old` to `new` (see the module documentation for what
/// identity and "changed" mean).
pub fn diff(old: &Config, new: &Config) -> Diff {
    let services = compare(&old.services, &new.services, |s| &s.name, |a, b| same_service(old, a, new, b));
    let pools = compare(&old.pools, &new.pools, |p| &p.name, |a, b| a == b);
    let servers = pools
        .changed
        .iter()
        .filter_map(|name| {
            let a = old.pools.iter().find(|p| &p.name == name)?;
            let b = new.pools.iter().find(|p| &p.name == name)?;
            let c = compare(&a.servers, &b.servers, |s| &s.name, |x, y| x == y);
            Some(PoolChange { pool: name.clone(), added: c.added, removed: c.removed, changed: c.changed })
        })
        .collect();
    let all = |c: &Config| c.services.iter().flat_map(|s| s.listeners.iter().copied()).collect::<Vec<_>>();
    let (old_listeners, new_listeners) = (all(old), all(new));
    Diff {
        services,
        pools,
        servers,
        listeners_added: new_listeners.iter().filter(|a| !old_listeners.contains(a)).copied().collect(),
        listeners_removed: old_listeners.iter().filter(|a| !new_listeners.contains(a)).copied().collect(),
        workers_changed: old.workers != new.workers,
        drain_timeout_changed: old.drain_timeout != new.drain_timeout,
        admin_changed: old.admin != new.admin,
        access_log_changed: old.access_log != new.access_log,
        event_log_changed: old.event_log != new.event_log,
        cluster_changed: old.cluster != new.cluster,
        tracing_changed: old.tracing != new.tracing,
    }
}

/// Pairs `old` and `new` items by (name, occurrence of that name) and sorts
/// them into the four lists.
fn compare<T>(old: &[T], new: &[T], name: impl Fn(&T) -> &String, same: impl Fn(&T, &T) -> bool) -> Changes {
    let keyed = |items: &[T]| -> Vec<(String, usize)> {
        let mut seen: HashMap<&str, usize> = HashMap::new();
        items
            .iter()
            .map(|item| {
                let n = name(item);
                let count = seen.entry(n.as_str()).or_default();
                *count += 1;
                (n.clone(), *count)
            })
            .collect()
    };
    let (old_keys, new_keys) = (keyed(old), keyed(new));
    let old_index: HashMap<&(String, usize), usize> = old_keys.iter().enumerate().map(|(i, k)| (k, i)).collect();
    let mut changes = Changes::default();
    for (j, key) in new_keys.iter().enumerate() {
        match old_index.get(key) {
            None => changes.added.push(key.0.clone()),
            Some(&i) if same(&old[i], &new[j]) => changes.unchanged.push(key.0.clone()),
            Some(_) => changes.changed.push(key.0.clone()),
        }
    }
    let new_set: std::collections::HashSet<&(String, usize)> = new_keys.iter().collect();
    changes.removed = old_keys.iter().filter(|k| !new_set.contains(k)).map(|k| k.0.clone()).collect();
    changes
}

/// Field-by-field equality with pool references compared by pool name. The
/// destructuring is exhaustive on purpose: a new field of [`Service`] or
/// [`Rule`] does not compile until it is compared here.
fn same_service(old_cfg: &Config, a: &Service, new_cfg: &Config, b: &Service) -> bool {
    let Service {
        name,
        mode,
        listeners,
        default_pool,
        rules,
        timeouts,
        limits,
        forwarded,
        l4,
        accept_proxy,
        sni_routes,
        tls,
        http2,
        http3,
        compression,
        cache,
        protection,
    } = a;
    let pool_a = |id: &PoolId| old_cfg.pools.get(id.0).map(|p| &p.name);
    let pool_b = |id: &PoolId| new_cfg.pools.get(id.0).map(|p| &p.name);
    *name == b.name
        && *mode == b.mode
        && *listeners == b.listeners
        && default_pool.as_ref().map(pool_a) == b.default_pool.as_ref().map(pool_b)
        && rules.len() == b.rules.len()
        && rules.iter().zip(&b.rules).all(|(x, y)| {
            let Rule { name, conditions, edits, action } = x;
            let same_action = match (action, &y.action) {
                (Some(Action::Pool(p)), Some(Action::Pool(q))) => pool_a(p) == pool_b(q),
                (p, q) => p == q,
            };
            *name == y.name && *conditions == y.conditions && *edits == y.edits && same_action
        })
        && *timeouts == b.timeouts
        && *limits == b.limits
        && *forwarded == b.forwarded
        && *l4 == b.l4
        && *accept_proxy == b.accept_proxy
        && *tls == b.tls
        && *http2 == b.http2
        && *http3 == b.http3
        && *compression == b.compression
        && *cache == b.cache
        && *protection == b.protection
        && sni_routes.len() == b.sni_routes.len()
        && sni_routes
            .iter()
            .zip(&b.sni_routes)
            .all(|(x, y)| x.pattern == y.pattern && pool_a(&x.pool) == pool_b(&y.pool))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[[service]]
name = "web"
listen = "127.0.0.1:8080"
pool = "main"
rules = [ { path_suffix = ".png", pool = "images" } ]

[[pool]]
name = "main"
servers = [ { address = "127.0.0.1:9001", name = "a" }, { address = "127.0.0.1:9002", name = "b" } ]

[[pool]]
name = "images"
servers = [ { address = "127.0.0.1:9101" } ]
"#;

    fn config(src: &str) -> Config {
        crate::parse(src, "t.toml").unwrap()
    }

    fn diff_from_base(new: &str) -> Diff {
        diff(&config(BASE), &config(new))
    }

    #[test]
    fn identical_configs_give_an_empty_diff() {
        let d = diff_from_base(BASE);
        assert!(d.is_empty(), "{d:?}");
        assert!(!d.needs_restart());
        assert_eq!(d.services.unchanged, ["web"]);
        assert_eq!(d.pools.unchanged, ["main", "images"]);
        assert_eq!(d.to_string(), "services: +0 -0 ~0 =1; pools: +0 -0 ~0 =2; listeners: +0 -0");
    }

    #[test]
    fn a_changed_rule_changes_its_service() {
        let d = diff_from_base(&BASE.replace(".png", ".jpg"));
        assert_eq!(d.services.changed, ["web"]);
        assert!(d.pools.is_empty());
        assert!(!d.is_empty());
        assert_eq!(d.to_string(), "services: +0 -0 ~1 =0; pools: +0 -0 ~0 =2; listeners: +0 -0");
    }

    #[test]
    fn regex_rules_compare_by_pattern() {
        let with = |re: &str| BASE.replace(r#"path_suffix = ".png""#, &format!(r#"path_regex = "{re}""#));
        assert!(diff(&config(&with("^/a")), &config(&with("^/a"))).is_empty());
        assert_eq!(diff(&config(&with("^/a")), &config(&with("^/b"))).services.changed, ["web"]);
    }

    #[test]
    fn a_server_weight_change_lists_that_server() {
        let d = diff_from_base(&BASE.replace(r#"name = "b" }"#, r#"name = "b", weight = 5 }"#));
        assert!(d.services.is_empty());
        assert_eq!(d.pools.changed, ["main"]);
        assert_eq!(d.pools.unchanged, ["images"]);
        let want = PoolChange { pool: "main".into(), changed: vec!["b".into()], ..PoolChange::default() };
        assert_eq!(d.servers, [want]);
    }

    #[test]
    fn servers_added_and_removed() {
        let d = diff_from_base(&BASE.replace(r#"name = "a" }"#, r#"name = "c" }"#));
        assert_eq!(d.servers.len(), 1);
        assert_eq!(
            (d.servers[0].added.as_slice(), d.servers[0].removed.as_slice()),
            (&["c".to_string()][..], &["a".to_string()][..])
        );
    }

    #[test]
    fn a_rename_is_an_addition_and_a_removal() {
        let d = diff_from_base(&BASE.replace(r#"name = "web""#, r#"name = "site""#));
        assert_eq!(
            (d.services.added.as_slice(), d.services.removed.as_slice()),
            (&["site".to_string()][..], &["web".to_string()][..])
        );
        assert!(d.services.changed.is_empty() && d.services.unchanged.is_empty());
        // The listener moved from one service to the other: as an address, it stayed.
        assert!(d.listeners_added.is_empty() && d.listeners_removed.is_empty());
    }

    #[test]
    fn reordering_pools_changes_no_service() {
        let (main, images) = BASE.split_at(BASE.find("[[pool]]\nname = \"images\"").unwrap());
        let (service, main) = main.split_at(main.find("[[pool]]").unwrap());
        let reordered = format!("{service}{images}\n{main}");
        let d = diff_from_base(&reordered);
        assert!(d.is_empty(), "{d}");
        assert_ne!(config(BASE), config(&reordered), "structural equality does see the indices");
    }

    #[test]
    fn listeners_and_top_level_settings() {
        let new = format!(
            "workers = 2\ndrain_timeout = \"5s\"\n[admin]\n[access_log]\n{}",
            BASE.replace(r#"listen = "127.0.0.1:8080""#, r#"listen = ["127.0.0.1:8081", "[::1]:8080"]"#)
        );
        let d = diff_from_base(&new);
        assert_eq!(d.listeners_added, ["127.0.0.1:8081".parse::<SocketAddr>().unwrap(), "[::1]:8080".parse().unwrap()]);
        assert_eq!(d.listeners_removed, ["127.0.0.1:8080".parse::<SocketAddr>().unwrap()]);
        assert!(d.workers_changed && d.drain_timeout_changed && d.admin_changed && d.access_log_changed);
        assert!(d.needs_restart());
        assert_eq!(
            d.to_string(),
            "services: +0 -0 ~1 =0; pools: +0 -0 ~0 =2; listeners: +2 -1; workers changed (restart needed); \
             drain_timeout changed; admin changed; access_log changed"
        );
    }

    #[test]
    fn persistence_changes_its_pool() {
        let new = BASE.replace("name = \"images\"\n", "name = \"images\"\npersistence = { cookie = \"SRV\" }\n");
        let d = diff_from_base(&new);
        assert_eq!(d.pools.changed, ["images"]);
        assert_eq!(d.servers, [PoolChange { pool: "images".into(), ..PoolChange::default() }]);
    }

    #[test]
    fn servers_with_the_same_name_pair_in_order() {
        let dup = |w: u32| BASE.replace(r#"name = "b" }"#, &format!(r#"name = "a", weight = {w} }}"#));
        let d = diff(&config(&dup(1)), &config(&dup(2)));
        assert_eq!(d.servers[0].changed, ["a"]);
        assert!(d.servers[0].added.is_empty() && d.servers[0].removed.is_empty());
    }
}
