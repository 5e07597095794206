//! On-demand issuance (`tls.acme.on_demand`): a certificate ordered at the
//! first handshake for a name that has none, behind an allow check.
//!
//! At a handshake, [`OnDemand::admit`] decides from memory alone, without
//! I/O, what the handshake does:
//! - a name with a certificate, a configured name, no name: nothing to wait for;
//! - a name that is not a DNS name (an IP address, a wildcard, too long),
//!   one refused a moment ago (the deny cache, `deny_for`), one outside
//!   `allow`, or one beyond the limits (`max_certificates`, `max_pending`):
//!   refused at once, counted;
//! - otherwise the name gets a [`Managed`] of its own (its *child*), and the
//!   handshake waits on it, up to `wait`. Handshakes for a name being
//!   decided wait on the same child: one `ask`, one order.
//!
//! The child's task on the ACME thread ([`super::manager`]) asks the `ask`
//! endpoint ([`ask`]: `GET <ask>?domain=<name>`, only a 2xx allows, an error or
//! a timeout refuses), then takes the certificate stored on disk or orders
//! one (within `max_orders` per `order_period`), and renews it like any
//! other. A refused or failed name is forgotten (its child removed) and
//! remembered in the deny cache for `deny_for`.
//!
//! Invariants: the deny cache, the order window and the list of recent
//! refusals are bounded; no client input is sent anywhere but as a
//! validated DNS name; nothing here blocks a worker.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rustls::sign::CertifiedKey;
use switchyard_config::{is_dns_name, Acme};
use tokio::sync::{watch, Notify};

use super::{lock, Managed};

/// Names remembered as refused at most (the oldest are forgotten first).
pub const MAX_DENIED: usize = 10_000;
/// Recent refusals kept for the admin API.
pub const RECENT: usize = 16;

/// Where a name being decided stands; handshakes wait while `Pending`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Being asked about or ordered.
    Pending,
    /// Its certificate is installed.
    Ready,
    /// Refused or failed: the handshake goes on without it.
    Refused,
}

/// What a handshake does about its server name.
#[derive(Debug)]
pub enum Admission {
    /// Nothing to wait for (a certificate exists, or the name is configured).
    Known,
    /// Wait for the name's certificate.
    Wait(watch::Receiver<Phase>),
    /// No certificate for this name; the reason is a metrics label.
    Refused(&'static str),
}

/// Outcomes counted per service (`switchyard_acme_on_demand_total`).
pub const RESULTS: [&str; 8] = ["issued", "loaded", "denied", "cached", "invalid", "limited", "failed", "timeout"];

/// Counters of on-demand decisions, indexed like [`RESULTS`].
#[derive(Debug, Default)]
pub struct Counters([AtomicU64; RESULTS.len()]);

impl Counters {
    /// Counts one `result` (one of [`RESULTS`]).
    pub fn count(&self, result: &str) {
        if let Some(i) = RESULTS.iter().position(|r| *r == result) {
            self.0[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Every result with its count, in [`RESULTS`] order.
    pub fn all(&self) -> Vec<(&'static str, u64)> {
        RESULTS.iter().zip(&self.0).map(|(r, n)| (*r, n.load(Ordering::Relaxed))).collect()
    }
}

/// A refusal shown in the admin API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The name refused.
    pub name: String,
    /// Why: `denied`, `limited`, `failed` and the detail.
    pub reason: String,
    /// When.
    pub at: SystemTime,
}

/// The on-demand state of one service's ACME certificates.
#[derive(Debug)]
pub struct OnDemand {
    /// The parent's settings (`on_demand` is `Some`).
    pub settings: Acme,
    /// The service.
    pub service: String,
    children: Mutex<HashMap<String, Arc<Managed>>>,
    denied: Mutex<DenyCache>,
    orders: Mutex<OrderWindow>,
    recent: Mutex<VecDeque<Refusal>>,
    /// Decisions by result.
    pub counters: Counters,
    /// Wakes the ACME thread when a child is added.
    added: Arc<Notify>,
}

impl OnDemand {
    /// The state of a service whose `acme` is `settings` (with `on_demand`).
    pub fn new(service: &str, settings: &Acme, added: Arc<Notify>) -> Self {
        OnDemand {
            settings: settings.clone(),
            service: service.to_string(),
            children: Mutex::default(),
            denied: Mutex::default(),
            orders: Mutex::default(),
            recent: Mutex::default(),
            counters: Counters::default(),
            added,
        }
    }

    fn limits(&self) -> &switchyard_config::OnDemand {
        self.settings.on_demand.as_ref().unwrap_or(&FALLBACK)
    }

    /// How long a handshake waits for a certificate being issued.
    pub fn wait(&self) -> Duration {
        self.limits().wait
    }

    /// Decides what a handshake for `server_name` does (no I/O).
    pub fn admit(&self, server_name: &str) -> Admission {
        let Some(name) = valid_name(server_name) else {
            self.counters.count("invalid");
            return Admission::Refused("invalid");
        };
        if self.settings.domains.contains(&name) {
            return Admission::Known;
        }
        let limits = self.limits();
        let mut children = lock(&self.children);
        if let Some(child) = children.get(&name) {
            return match child.has_certificate() {
                true => Admission::Known,
                false => Admission::Wait(child.phase.subscribe()),
            };
        }
        let now = Instant::now();
        if lock(&self.denied).denied(&name, now) {
            self.counters.count("cached");
            return Admission::Refused("cached");
        }
        if !limits.allow.is_empty() && !allowed(&name, &limits.allow) {
            drop(children);
            // Quietly (debug): a flood of random names must not flood the log.
            self.refuse(&name, "denied", "not in `allow`".into(), false);
            return Admission::Refused("denied");
        }
        let pending = children.values().filter(|c| !c.has_certificate()).count();
        if children.len() >= limits.max_certificates || pending >= limits.max_pending {
            drop(children);
            self.counters.count("limited");
            let why = if pending >= limits.max_pending { "max_pending" } else { "max_certificates" };
            tracing::debug!(service = %self.service, name = %name, limit = why, "on-demand certificate refused: limit reached");
            self.remember(&name, format!("limited: {why} reached"));
            return Admission::Refused("limited");
        }
        let child = Arc::new(Managed::child(&self.service, &self.settings, &name));
        let waiting = child.phase.subscribe();
        children.insert(name, child);
        self.added.notify_one();
        Admission::Wait(waiting)
    }

    /// The on-demand certificate of `server_name`, when one is installed.
    pub fn certificate(&self, server_name: &str) -> Option<Arc<CertifiedKey>> {
        let name = server_name.trim_end_matches('.').to_ascii_lowercase();
        lock(&self.children).get(&name).and_then(|c| c.cert.load_full())
    }

    /// The children: names with a certificate or being decided.
    pub fn children(&self) -> Vec<Arc<Managed>> {
        let mut all: Vec<_> = lock(&self.children).values().cloned().collect();
        all.sort_by(|a, b| a.settings.domains.cmp(&b.settings.domains));
        all
    }

    /// Recent refusals, oldest first.
    pub fn recent(&self) -> Vec<Refusal> {
        lock(&self.recent).iter().cloned().collect()
    }

    /// Takes a slot in the order window; false when `max_orders` were
    /// placed in the last `order_period`.
    pub(crate) fn take_order(&self) -> bool {
        let limits = self.limits();
        lock(&self.orders).take(Instant::now(), limits.max_orders as usize, limits.order_period)
    }

    /// Forgets `name`'s child (it retires) and remembers the refusal:
    /// counted under `result`, in the deny cache for `deny_for`, logged (at
    /// debug level unless `loud`).
    pub(crate) fn refuse(&self, name: &str, result: &'static str, why: String, loud: bool) {
        if let Some(child) = lock(&self.children).remove(name) {
            child.retire();
            child.phase.send_replace(Phase::Refused);
        }
        lock(&self.denied).deny(name, Instant::now() + self.limits().deny_for);
        self.counters.count(result);
        match (result, loud) {
            ("failed", _) => {
                tracing::warn!(service = %self.service, name, error = %why, "on-demand certificate order failed")
            }
            (_, true) => tracing::info!(service = %self.service, name, reason = %why, "on-demand certificate refused"),
            (_, false) => {
                tracing::debug!(service = %self.service, name, reason = %why, "on-demand certificate refused")
            }
        }
        self.remember(name, format!("{result}: {why}"));
    }

    fn remember(&self, name: &str, reason: String) {
        let mut recent = lock(&self.recent);
        if recent.len() == RECENT {
            recent.pop_front();
        }
        recent.push_back(Refusal { name: name.to_string(), reason, at: SystemTime::now() });
    }

    /// Retires every child (the parent retired).
    pub(crate) fn retire_all(&self) {
        for (_, child) in lock(&self.children).drain() {
            child.retire();
            child.phase.send_replace(Phase::Refused);
        }
    }

    /// Children no task drives yet; marks them driven.
    pub(crate) fn unstarted(&self) -> Vec<Arc<Managed>> {
        lock(&self.children).values().filter(|c| c.start()).cloned().collect()
    }
}

/// Used only if a parent without `on_demand` settings got an [`OnDemand`]
/// (never): refuses everything beyond nothing.
static FALLBACK: switchyard_config::OnDemand = switchyard_config::OnDemand {
    ask: None,
    allow: Vec::new(),
    max_certificates: 0,
    max_pending: 0,
    max_orders: 0,
    order_period: Duration::from_secs(1),
    deny_for: Duration::from_secs(1),
    ask_timeout: Duration::from_secs(1),
    wait: Duration::ZERO,
};

/// A server name as a certificate name: lower case, without the final dot;
/// `None` unless it is a DNS name of at least two labels (no IP address, no
/// wildcard, no underscore, at most 253 bytes).
pub fn valid_name(server_name: &str) -> Option<String> {
    if server_name.len() > 254 {
        return None;
    }
    let name = server_name.strip_suffix('.').unwrap_or(server_name).to_ascii_lowercase();
    is_dns_name(&name).then_some(name)
}

/// Whether `name` is in `allow`: listed, or one label below a `*.` pattern.
pub fn allowed(name: &str, allow: &[String]) -> bool {
    let parent = name.split_once('.').map(|(_, rest)| rest);
    allow.iter().any(|pattern| match pattern.strip_prefix("*.") {
        Some(suffix) => parent == Some(suffix),
        None => pattern == name,
    })
}

/// Names refused recently, each until its expiry. Expiries are pushed in
/// time order (one `deny_for` per service), so the oldest entry is at the
/// front; at [`MAX_DENIED`] the oldest is forgotten.
#[derive(Debug, Default)]
pub struct DenyCache {
    until: HashMap<String, Instant>,
    order: VecDeque<(String, Instant)>,
}

impl DenyCache {
    /// Remembers `name` as refused until `until`.
    pub fn deny(&mut self, name: &str, until: Instant) {
        self.expire(Instant::now());
        while self.until.len() >= MAX_DENIED {
            self.pop();
        }
        self.until.insert(name.to_string(), until);
        self.order.push_back((name.to_string(), until));
    }

    /// Whether `name` is refused at `now`.
    pub fn denied(&mut self, name: &str, now: Instant) -> bool {
        self.expire(now);
        self.until.get(name).is_some_and(|until| *until > now)
    }

    /// Names remembered.
    pub fn len(&self) -> usize {
        self.until.len()
    }

    /// Whether none is remembered.
    pub fn is_empty(&self) -> bool {
        self.until.is_empty()
    }

    fn expire(&mut self, now: Instant) {
        while self.order.front().is_some_and(|(_, until)| *until <= now) {
            self.pop();
        }
    }

    /// Forgets the oldest entry (unless its name was refused again later).
    fn pop(&mut self) {
        let Some((name, until)) = self.order.pop_front() else {
            self.until.clear();
            return;
        };
        if self.until.get(&name) == Some(&until) {
            self.until.remove(&name);
        }
    }
}

/// Start times of the orders placed in the last period.
#[derive(Debug, Default)]
pub struct OrderWindow(VecDeque<Instant>);

impl OrderWindow {
    /// Takes a slot at `now` when fewer than `max` were taken in `period`.
    pub fn take(&mut self, now: Instant, max: usize, period: Duration) -> bool {
        while self.0.front().is_some_and(|t| now.saturating_duration_since(*t) >= period) {
            self.0.pop_front();
        }
        if self.0.len() >= max {
            return false;
        }
        self.0.push_back(now);
        true
    }
}

/// Asks the `ask` endpoint about `name` (a validated DNS name): `Ok` for a
/// 2xx answer, else the reason. Runs on the blocking pool, bounded by `timeout`.
pub async fn ask(url: &str, name: &str, timeout: Duration) -> Result<(), String> {
    let separator = if url.contains('?') { '&' } else { '?' };
    let target = format!("{url}{separator}domain={name}");
    let call = tokio::task::spawn_blocking(move || {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .max_redirects(0)
            .build()
            .new_agent();
        match agent.get(&target).call() {
            Ok(response) if response.status().is_success() => Ok(()),
            Ok(response) => Err(format!("the ask endpoint answered {}", response.status().as_u16())),
            Err(e) => Err(format!("the ask endpoint failed: {e}")),
        }
    });
    match tokio::time::timeout(timeout + Duration::from_millis(500), call).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => Err(format!("the ask endpoint failed: {e}")),
        Err(_) => Err("the ask endpoint did not answer in time".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_are_checked_before_anything_is_asked() {
        assert_eq!(valid_name("Shop.Example.TEST.").as_deref(), Some("shop.example.test"));
        assert_eq!(valid_name("a-1.b.example").as_deref(), Some("a-1.b.example"));
        for bad in [
            "localhost",
            "127.0.0.1",
            "10.0.0.1.",
            "*.example.test",
            "a_b.example.test",
            "-a.example.test",
            "a..example.test",
            "",
            ".",
            "a.example.test..",
            "a b.example.test",
            "a.example.test/x",
            "a.example.test?domain=x",
        ] {
            assert_eq!(valid_name(bad), None, "{bad}");
        }
        let label = "a".repeat(63);
        assert!(valid_name(&format!("{label}.example")).is_some());
        assert_eq!(valid_name(&format!("{}a.example", label)), None, "a 64-byte label");
        let long = [label.as_str(); 4].join(".");
        assert_eq!(long.len(), 255);
        assert_eq!(valid_name(&long), None, "longer than 253 bytes");
    }

    #[test]
    fn allow_patterns_match_one_label() {
        let allow = vec!["*.example.test".to_string(), "shop.example.net".to_string()];
        assert!(allowed("a.example.test", &allow));
        assert!(allowed("shop.example.net", &allow));
        assert!(!allowed("example.test", &allow));
        assert!(!allowed("a.b.example.test", &allow));
        assert!(!allowed("www.shop.example.net", &allow));
        assert!(!allowed("aexample.test", &allow));
    }

    #[test]
    fn the_deny_cache_forgets_after_its_time_and_is_bounded() {
        let mut cache = DenyCache::default();
        let now = Instant::now();
        let later = now + Duration::from_secs(60);
        cache.deny("a.example", later);
        assert!(cache.denied("a.example", now));
        assert!(!cache.denied("b.example", now));
        assert!(!cache.denied("a.example", later + Duration::from_millis(1)));
        assert!(cache.is_empty());
        // Refused again: the second expiry counts, not the first.
        cache.deny("a.example", now + Duration::from_secs(10));
        cache.deny("a.example", now + Duration::from_secs(20));
        assert!(cache.denied("a.example", now + Duration::from_secs(15)));
        assert!(!cache.denied("a.example", now + Duration::from_secs(21)));
        // A flood of names keeps at most MAX_DENIED, the newest.
        for i in 0..MAX_DENIED + 500 {
            cache.deny(&format!("n{i}.example"), later + Duration::from_millis(i as u64));
        }
        assert_eq!(cache.len(), MAX_DENIED);
        assert!(!cache.denied("n0.example", now));
        assert!(cache.denied(&format!("n{}.example", MAX_DENIED + 499), now));
    }

    #[test]
    fn the_order_window_allows_max_per_period() {
        let mut window = OrderWindow::default();
        let now = Instant::now();
        let period = Duration::from_secs(60);
        assert!(window.take(now, 2, period));
        assert!(window.take(now + Duration::from_secs(1), 2, period));
        assert!(!window.take(now + Duration::from_secs(2), 2, period));
        assert!(window.take(now + Duration::from_secs(60), 2, period));
        assert!(!window.take(now + Duration::from_secs(60), 2, period));
    }

    fn settings(on_demand: switchyard_config::OnDemand) -> Acme {
        Acme {
            directory: "https://acme.test/directory".into(),
            contact: vec![],
            domains: vec!["configured.example".into()],
            challenge: switchyard_config::AcmeChallenge::Http01,
            storage: "/nonexistent".into(),
            ca_roots: None,
            profile: None,
            on_demand: Some(on_demand),
        }
    }

    fn limits() -> switchyard_config::OnDemand {
        switchyard_config::OnDemand {
            ask: None,
            allow: vec!["*.example.test".into()],
            max_certificates: 3,
            max_pending: 2,
            max_orders: 10,
            order_period: Duration::from_secs(60),
            deny_for: Duration::from_secs(60),
            ask_timeout: Duration::from_secs(1),
            wait: Duration::from_secs(1),
        }
    }

    #[test]
    fn admission_shares_one_child_per_name_and_refuses_from_memory() {
        let od = OnDemand::new("web", &settings(limits()), Arc::new(Notify::new()));
        assert!(matches!(od.admit("configured.example"), Admission::Known));
        assert!(matches!(od.admit("10.1.2.3"), Admission::Refused("invalid")));
        assert!(matches!(od.admit("*.example.test"), Admission::Refused("invalid")));
        let Admission::Wait(first) = od.admit("a.example.test") else { panic!("a new allowed name waits") };
        let Admission::Wait(_) = od.admit("A.Example.Test.") else { panic!("the same name waits on the same child") };
        assert_eq!(od.children().len(), 1);
        // Outside `allow`: refused, then answered from the deny cache.
        assert!(matches!(od.admit("a.example.net"), Admission::Refused("denied")));
        assert!(matches!(od.admit("a.example.net"), Admission::Refused("cached")));
        // max_pending = 2: a third name being decided at once is refused.
        assert!(matches!(od.admit("b.example.test"), Admission::Wait(_)));
        assert!(matches!(od.admit("c.example.test"), Admission::Refused("limited")));
        // A refusal wakes the waiters and forgets the child.
        od.refuse("a.example.test", "denied", "the ask endpoint answered 403".into(), true);
        assert_eq!(*first.borrow(), Phase::Refused);
        assert!(matches!(od.admit("a.example.test"), Admission::Refused("cached")));
        let counts: HashMap<_, _> = od.counters.all().into_iter().collect();
        assert_eq!((counts["invalid"], counts["denied"], counts["cached"], counts["limited"]), (2, 2, 2, 1));
        assert_eq!(od.recent().len(), 3);
    }
}
