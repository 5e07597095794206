//! Certificates from an ACME server (RFC 8555) for `https` services whose
//! `tls` has `acme` instead of certificate files.
//!
//! - [`Registry`]: the process's managed certificates, one [`Managed`] per
//!   service, and the challenge answers being offered ([`Challenges`]). It
//!   is carried from generation to generation, so a reload that keeps a
//!   service's `acme` settings keeps its certificate and its renewal task.
//! - [`resolve`]: the rustls certificate resolver of such a service: the
//!   current certificate, swapped in place ([`arc_swap`]) when a new one is
//!   issued — no reload, no connection dropped — or, for a ClientHello that
//!   offers only ALPN `acme-tls/1`, the tls-alpn-01 challenge certificate
//!   (RFC 8737). Before the first certificate, handshakes are refused.
//! - [`store`]: account credentials, keys and certificates on disk
//!   (directories 0700, files 0600), reused on restart.
//! - [`order`]: one issuance with `instant-acme`: order, challenges,
//!   finalisation with a fresh key, the chain.
//! - [`manager`]: one thread, one task per managed certificate: load from
//!   disk, issue when missing, renew when due (ARI's window where the server
//!   offers RFC 9773 renewal information, else at two thirds of the
//!   lifetime), retry failures with exponential back-off.
//! - [`on_demand`]: certificates ordered at the first handshake for a name
//!   (`on_demand`), behind an allow check; each such name is a [`Managed`]
//!   of its own (a *child* of the service's), renewed like the others.
//!
//! http-01 answers are given by the `http` services' HTTP/1.1 codec before
//! routing ([`Challenges::http01`]).
//!
//! Invariants: nothing here imports the generation or the TLS terminator
//! (they import this); no peer input can panic it; a failed issuance leaves
//! the current certificate in place.

pub mod manager;
pub mod on_demand;
pub mod order;
pub mod resolve;
pub mod store;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use arc_swap::ArcSwapOption;
use rustls::sign::CertifiedKey;
use switchyard_config::Acme;
use tokio::sync::{watch, Notify};

use self::on_demand::{OnDemand, Phase};

/// The path prefix of http-01 challenge requests (RFC 8555 8.3).
pub const HTTP01_PREFIX: &str = "/.well-known/acme-challenge/";

/// A certificate is "expiring" (a warning in the API) when less than this
/// share of its lifetime is left: past the renewal point with some margin.
const EXPIRING_SHARE: f64 = 0.2;

/// Locks a mutex, taking over its data when a panicking holder poisoned it
/// (the data here are plain maps and status records).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Challenge answers currently offered, for every managed certificate.
#[derive(Debug, Default)]
pub struct Challenges {
    /// http-01: token → key authorization.
    http: Mutex<HashMap<String, String>>,
    /// tls-alpn-01: domain (lower case) → the self-signed challenge certificate.
    alpn: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

impl Challenges {
    /// The http-01 answer for a request path, when it asks for a token being
    /// validated.
    pub fn http01(&self, path: &str) -> Option<String> {
        let token = path.strip_prefix(HTTP01_PREFIX)?;
        lock(&self.http).get(token).cloned()
    }

    /// The tls-alpn-01 certificate for `domain`.
    pub fn alpn01(&self, domain: &str) -> Option<Arc<CertifiedKey>> {
        lock(&self.alpn).get(&domain.trim_end_matches('.').to_ascii_lowercase()).cloned()
    }

    pub(crate) fn offer_http01(&self, token: &str, key_authorization: &str) {
        lock(&self.http).insert(token.to_string(), key_authorization.to_string());
    }

    pub(crate) fn offer_alpn01(&self, domain: &str, cert: Arc<CertifiedKey>) {
        lock(&self.alpn).insert(domain.to_ascii_lowercase(), cert);
    }

    pub(crate) fn withdraw_http01(&self, token: &str) {
        lock(&self.http).remove(token);
    }

    pub(crate) fn withdraw_alpn01(&self, domain: &str) {
        lock(&self.alpn).remove(&domain.to_ascii_lowercase());
    }
}

/// What a managed certificate is doing, for logs, metrics and the API.
#[derive(Debug, Clone, Default)]
pub struct Status {
    /// The current certificate: serial (hex), validity, and where it came from.
    pub current: Option<CertInfo>,
    /// When the next issuance or renewal attempt is due.
    pub next_attempt: Option<SystemTime>,
    /// Consecutive failed attempts (0 after a success).
    pub failures: u32,
    /// The last failure's reason, kept until a success.
    pub last_error: Option<String>,
    /// Whether the renewal time came from the server's renewal information (ARI).
    pub ari: bool,
}

/// Facts about an issued certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    /// Serial number, lower-case hex.
    pub serial: String,
    /// Start of validity.
    pub not_before: SystemTime,
    /// End of validity.
    pub not_after: SystemTime,
}

impl CertInfo {
    /// Whether less than a fifth of the lifetime is left at `now` (or it expired).
    pub fn expiring(&self, now: SystemTime) -> bool {
        let life = self.not_after.duration_since(self.not_before).unwrap_or_default();
        let left = self.not_after.duration_since(now).unwrap_or_default();
        left.as_secs_f64() < life.as_secs_f64() * EXPIRING_SHARE
    }
}

/// Counters of one managed certificate, read by the metrics exposition.
#[derive(Debug, Default)]
pub struct Counters {
    /// Certificates issued (first issuance and renewals).
    pub issued: AtomicU64,
    /// Failed attempts.
    pub failed: AtomicU64,
}

/// One service's certificate from ACME.
#[derive(Debug)]
pub struct Managed {
    /// The service it serves.
    pub service: String,
    /// Its settings; a reload that changes them replaces the [`Managed`].
    pub settings: Acme,
    /// The certificate handshakes get; `None` until the first is issued.
    pub(crate) cert: ArcSwapOption<CertifiedKey>,
    status: Mutex<Status>,
    /// Issuance counters.
    pub counters: Counters,
    /// Set when a reload removed or replaced it: its task ends.
    retired: AtomicBool,
    /// Set once a task drives it.
    started: AtomicBool,
    /// The names issued on demand, with `on_demand` settings.
    pub on_demand: Option<Arc<OnDemand>>,
    /// Whether it is one name issued on demand (a child of a service's).
    pub child: bool,
    /// Where a child's first certificate stands (handshakes wait on it).
    pub(crate) phase: watch::Sender<Phase>,
}

impl Managed {
    fn new(service: &str, settings: &Acme, added: &Arc<Notify>) -> Self {
        let on_demand = settings.on_demand.as_ref().map(|_| Arc::new(OnDemand::new(service, settings, added.clone())));
        Managed {
            service: service.to_string(),
            settings: settings.clone(),
            cert: ArcSwapOption::empty(),
            status: Mutex::new(Status::default()),
            counters: Counters::default(),
            retired: AtomicBool::new(false),
            started: AtomicBool::new(false),
            on_demand,
            child: false,
            phase: watch::Sender::new(Phase::Pending),
        }
    }

    /// The certificate of `name`, issued on demand for `service` with the
    /// service's `parent` settings.
    pub(crate) fn child(service: &str, parent: &Acme, name: &str) -> Self {
        let settings = Acme { domains: vec![name.to_string()], on_demand: None, ..parent.clone() };
        Managed { child: true, ..Managed::new(service, &settings, &Arc::new(Notify::new())) }
    }

    /// Marks it driven; true the first time.
    pub(crate) fn start(&self) -> bool {
        !self.started.swap(true, Ordering::AcqRel)
    }

    /// Stops its task, and its children's.
    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::Release);
        if let Some(od) = &self.on_demand {
            od.retire_all();
        }
    }

    /// A copy of the current status.
    pub fn status(&self) -> Status {
        lock(&self.status).clone()
    }

    pub(crate) fn update(&self, f: impl FnOnce(&mut Status)) {
        f(&mut lock(&self.status));
    }

    /// Whether a certificate is being served.
    pub fn has_certificate(&self) -> bool {
        self.cert.load().is_some()
    }

    /// Installs `cert` for the next handshakes (connections already
    /// established keep theirs).
    pub(crate) fn install(&self, cert: Arc<CertifiedKey>, info: CertInfo) {
        self.cert.store(Some(cert));
        self.update(|s| s.current = Some(info));
    }

    pub(crate) fn retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }
}

/// The process's managed certificates and challenge answers.
#[derive(Debug, Default)]
pub struct Registry {
    /// Answers offered while an order is validated.
    pub challenges: Arc<Challenges>,
    managed: Mutex<Vec<Arc<Managed>>>,
    /// Woken when a generation (or a handshake, on demand) adds a
    /// certificate to manage.
    pub(crate) added: Arc<Notify>,
}

impl Registry {
    /// The managed certificate of `service` with `settings`: the existing one
    /// when the settings are unchanged, else a new one (the old one retires).
    pub fn managed(&self, service: &str, settings: &Acme) -> Arc<Managed> {
        let mut all = lock(&self.managed);
        if let Some(m) = all.iter().find(|m| m.service == service && m.settings == *settings && !m.retired()) {
            return m.clone();
        }
        for old in all.iter().filter(|m| m.service == service) {
            old.retire();
        }
        all.retain(|m| m.service != service);
        let m = Arc::new(Managed::new(service, settings, &self.added));
        all.push(m.clone());
        self.added.notify_one();
        m
    }

    /// Retires every managed certificate whose service is not in `services`
    /// (a reload removed it, or it no longer uses ACME).
    pub fn keep_only(&self, services: &[&str]) {
        let mut all = lock(&self.managed);
        for m in all.iter().filter(|m| !services.contains(&m.service.as_str())) {
            m.retire();
        }
        all.retain(|m| !m.retired());
    }

    /// Every service's managed certificate, in the order they were added
    /// (the names issued on demand are their [`Managed::on_demand`]'s).
    pub fn all(&self) -> Vec<Arc<Managed>> {
        lock(&self.managed).clone()
    }

    /// Those no task drives yet, services' and names issued on demand
    /// (with their service's on-demand state); marks them driven.
    pub(crate) fn unstarted(&self) -> Vec<(Arc<Managed>, Option<Arc<OnDemand>>)> {
        let all = self.all();
        let mut out: Vec<_> = all.iter().filter(|m| m.start()).map(|m| (m.clone(), None)).collect();
        for od in all.iter().filter_map(|m| m.on_demand.as_ref()) {
            out.extend(od.unstarted().into_iter().map(|c| (c, Some(od.clone()))));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn settings(domain: &str) -> Acme {
        Acme {
            directory: "https://acme.test/directory".into(),
            contact: vec![],
            domains: vec![domain.into()],
            challenge: switchyard_config::AcmeChallenge::Http01,
            storage: "/nonexistent".into(),
            ca_roots: None,
            profile: None,
            on_demand: None,
        }
    }

    #[test]
    fn a_reload_keeps_unchanged_settings_and_replaces_changed_ones() {
        let r = Registry::default();
        let a = r.managed("web", &settings("a.example"));
        assert!(Arc::ptr_eq(&a, &r.managed("web", &settings("a.example"))));
        let b = r.managed("web", &settings("b.example"));
        assert!(a.retired() && !b.retired());
        r.keep_only(&[]);
        assert!(b.retired() && r.all().is_empty());
    }

    #[test]
    fn http01_answers_only_offered_tokens() {
        let c = Challenges::default();
        c.offer_http01("tok", "tok.thumb");
        assert_eq!(c.http01("/.well-known/acme-challenge/tok").as_deref(), Some("tok.thumb"));
        assert_eq!(c.http01("/.well-known/acme-challenge/other"), None);
        assert_eq!(c.http01("/tok"), None);
        c.withdraw_http01("tok");
        assert_eq!(c.http01("/.well-known/acme-challenge/tok"), None);
    }

    #[test]
    fn expiring_is_the_last_fifth() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let info = CertInfo { serial: "1".into(), not_before: start, not_after: start + Duration::from_secs(100) };
        assert!(!info.expiring(start + Duration::from_secs(79)));
        assert!(info.expiring(start + Duration::from_secs(81)));
        assert!(info.expiring(start + Duration::from_secs(500)));
    }
}
