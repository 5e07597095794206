//! The ACME thread: one current-thread runtime, one task per managed
//! certificate ([`drive`]).
//!
//! A task first installs the certificate stored on disk when it is still
//! for the configured domains, then loops: wait until the next attempt is
//! due, attempt, record the outcome. An attempt is due
//! - at once when there is no certificate;
//! - for a renewal, in the middle of the window the server suggests (ARI,
//!   RFC 9773; asked again when its Retry-After passes), else at two thirds
//!   of the certificate's lifetime;
//! - after a failure, after a back-off of 5 s doubling up to an hour.
//!
//! A task ends when a reload retires its [`Managed`] (checked at least
//! every second while waiting), or when the process stops.
//!
//! A name issued on demand has a task of its own ([`drive_on_demand`]):
//! the `ask` endpoint first, then the stored certificate or one order; a
//! refusal or a failed first order ends it (the name is forgotten, see
//! [`super::on_demand`]); after that it renews like the others.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use instant_acme::{Account, CertificateIdentifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use tokio::sync::watch;

use super::on_demand::{self, OnDemand, Phase};
use super::order::{self, Issued};
use super::store::{self, Paths};
use super::{CertInfo, Challenges, Managed, Registry};

/// First back-off after a failed attempt; it doubles with each failure.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(5);
/// Longest back-off.
pub const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// Bounds on how long an ARI answer is trusted before it is asked again.
const ARI_RECHECK: (Duration, Duration) = (Duration::from_secs(60), Duration::from_secs(6 * 3600));
/// Longest single sleep, so a retired certificate's task notices soon.
const TICK: Duration = Duration::from_secs(1);

/// Starts the ACME thread for the certificates of `registry`.
pub fn spawn(registry: Arc<Registry>, stop: watch::Receiver<bool>) -> std::io::Result<JoinHandle<()>> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    std::thread::Builder::new().name("switchyard-acme".into()).spawn(move || runtime.block_on(run(registry, stop)))
}

async fn run(registry: Arc<Registry>, mut stop: watch::Receiver<bool>) {
    loop {
        for (managed, on_demand) in registry.unstarted() {
            match on_demand {
                Some(od) => tokio::spawn(drive_on_demand(managed, od, registry.challenges.clone())),
                None => tokio::spawn(drive(managed, registry.challenges.clone())),
            };
        }
        tokio::select! {
            _ = stop.wait_for(|stopped| *stopped) => return,
            () = registry.added.notified() => {}
        }
    }
}

/// A certificate being served, with what renewal needs.
struct Current {
    info: CertInfo,
    leaf: CertificateDer<'static>,
}

/// Drives one service's certificate until it retires.
pub async fn drive(managed: Arc<Managed>, challenges: Arc<Challenges>) {
    if managed.settings.domains.is_empty() {
        return; // Only names issued on demand, each driven by its own task.
    }
    let paths = Paths::of(&managed.settings);
    let current = stored(&managed, &paths);
    renew(managed, challenges, paths, current, None).await;
}

/// Drives a name issued on demand: the `ask` endpoint, then the stored
/// certificate or a new order (within `max_orders`), then renewals. A
/// refusal or a failed first order forgets the name ([`OnDemand::refuse`]).
pub async fn drive_on_demand(managed: Arc<Managed>, od: Arc<OnDemand>, challenges: Arc<Challenges>) {
    let Some(name) = managed.settings.domains.first().cloned() else { return };
    let Some(limits) = od.settings.on_demand.clone() else { return };
    if let Some(url) = &limits.ask {
        if let Err(why) = on_demand::ask(url, &name, limits.ask_timeout).await {
            od.refuse(&name, "denied", why, true);
            return;
        }
    }
    if managed.retired() {
        return;
    }
    let paths = Paths::of(&managed.settings);
    let mut account = None;
    let current = match stored(&managed, &paths) {
        Some(current) => {
            od.counters.count("loaded");
            current
        }
        None if !od.take_order() => {
            let why = format!("max_orders ({}) reached in the last {:?}", limits.max_orders, limits.order_period);
            od.refuse(&name, "limited", why, true);
            return;
        }
        None => match attempt(&managed, &paths, &mut account, &challenges, None).await {
            Ok((cert, fresh)) => {
                managed.counters.issued.fetch_add(1, Ordering::Relaxed);
                od.counters.count("issued");
                tracing::info!(service = %managed.service, name = %name, serial = %fresh.info.serial,
                    not_after = %httpdate::fmt_http_date(fresh.info.not_after),
                    "ACME certificate issued on demand and installed");
                managed.install(cert, fresh.info.clone());
                fresh
            }
            Err(e) => {
                managed.counters.failed.fetch_add(1, Ordering::Relaxed);
                od.refuse(&name, "failed", e, true);
                return;
            }
        },
    };
    managed.phase.send_replace(Phase::Ready);
    renew(managed, challenges, paths, Some(current), account).await;
}

/// The stored certificate, installed, when there is one for the domains.
fn stored(managed: &Managed, paths: &Paths) -> Option<Current> {
    match load(managed, paths) {
        Ok(Some((cert, current))) => {
            tracing::info!(service = %managed.service, serial = %current.info.serial,
                "ACME certificate read from {}", paths.cert_dir.display());
            managed.install(cert, current.info.clone());
            Some(current)
        }
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(service = %managed.service, error = %e, "stored ACME certificate not used");
            None
        }
    }
}

/// Issues (when `current` is `None`) and renews a certificate until it retires.
async fn renew(
    managed: Arc<Managed>,
    challenges: Arc<Challenges>,
    paths: Paths,
    mut current: Option<Current>,
    mut account: Option<Account>,
) {
    let mut failures = 0u32;
    loop {
        let (due, recheck, ari) = match (&current, failures) {
            (_, n) if n > 0 => (SystemTime::now() + backoff(n), None, false),
            (None, _) => (SystemTime::now(), None, false),
            (Some(c), _) => renewal_time(&managed, &paths, &mut account, c).await,
        };
        managed.update(|s| {
            s.next_attempt = Some(due);
            s.ari = ari;
        });
        let wake = recheck.map_or(due, |r| r.min(due));
        if !sleep_until(&managed, wake).await {
            return;
        }
        if SystemTime::now() < due {
            continue; // ARI asked again: the window may have moved.
        }
        let replaces = current.as_ref().filter(|_| ari && failures == 0).and_then(|c| identifier(&c.leaf));
        match attempt(&managed, &paths, &mut account, &challenges, replaces).await {
            Ok((cert, fresh)) => {
                failures = 0;
                managed.counters.issued.fetch_add(1, Ordering::Relaxed);
                tracing::info!(service = %managed.service, serial = %fresh.info.serial,
                    domains = ?managed.settings.domains, not_after = %httpdate::fmt_http_date(fresh.info.not_after),
                    "ACME certificate issued and installed");
                managed.install(cert, fresh.info.clone());
                managed.update(|s| s.last_error = None);
                current = Some(fresh);
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                managed.counters.failed.fetch_add(1, Ordering::Relaxed);
                let retry = backoff(failures);
                tracing::warn!(service = %managed.service, attempt = failures, retry_in_s = retry.as_secs(),
                    error = %e, "ACME certificate order failed; will retry");
                managed.update(|s| s.last_error = Some(e));
            }
        }
        managed.update(|s| s.failures = failures);
    }
}

/// The back-off after `failures` consecutive failures.
pub fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(20);
    FIRST_BACKOFF.saturating_mul(1 << doublings).min(MAX_BACKOFF)
}

/// Sleeps until `until`, in ticks; false when the certificate retired meanwhile.
async fn sleep_until(managed: &Managed, until: SystemTime) -> bool {
    loop {
        if managed.retired() {
            return false;
        }
        let Ok(left) = until.duration_since(SystemTime::now()) else { return true };
        if left.is_zero() {
            return true;
        }
        tokio::time::sleep(left.min(TICK)).await;
    }
}

/// When to renew `current`: (due, when to ask ARI again, whether ARI said).
async fn renewal_time(
    managed: &Managed,
    paths: &Paths,
    account: &mut Option<Account>,
    current: &Current,
) -> (SystemTime, Option<SystemTime>, bool) {
    let fallback = two_thirds(&current.info);
    if account.is_none() {
        *account = order::account(&managed.settings, paths).await.ok();
    }
    let (Some(acc), Some(id)) = (account.as_ref(), identifier(&current.leaf)) else {
        return (fallback, None, false);
    };
    match acc.renewal_info(&id).await {
        Ok((info, retry_after)) => {
            let start = unix_time(info.suggested_window.start.unix_timestamp());
            let end = unix_time(info.suggested_window.end.unix_timestamp());
            let middle = start + end.duration_since(start).unwrap_or_default() / 2;
            let recheck = retry_after.clamp(ARI_RECHECK.0, ARI_RECHECK.1);
            (middle, Some(SystemTime::now() + recheck), true)
        }
        Err(e) => {
            tracing::debug!(service = %managed.service, error = %e, "no ACME renewal information; renewing at 2/3 of the lifetime");
            (fallback, None, false)
        }
    }
}

fn unix_time(secs: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).unwrap_or(0))
}

/// Two thirds of the way through the certificate's validity.
pub fn two_thirds(info: &CertInfo) -> SystemTime {
    let life = info.not_after.duration_since(info.not_before).unwrap_or_default();
    info.not_before + life * 2 / 3
}

/// The ARI identifier of a certificate (authority key identifier and serial).
fn identifier(leaf: &CertificateDer<'static>) -> Option<CertificateIdentifier<'static>> {
    CertificateIdentifier::try_from(leaf).ok().map(CertificateIdentifier::into_owned)
}

/// One issuance: the account (once), the order, then the files on disk.
async fn attempt(
    managed: &Managed,
    paths: &Paths,
    account: &mut Option<Account>,
    challenges: &Arc<Challenges>,
    replaces: Option<CertificateIdentifier<'static>>,
) -> Result<(Arc<CertifiedKey>, Current), String> {
    store::private_dir(&paths.root).map_err(|e| format!("storage {}: {e}", paths.root.display()))?;
    if account.is_none() {
        *account = Some(order::account(&managed.settings, paths).await?);
    }
    let Some(acc) = account.as_ref() else { return Err("no account".into()) };
    let Issued { chain_pem, key_pem } = order::issue(acc, &managed.settings, challenges, replaces).await?;
    let loaded = parse(chain_pem.as_bytes(), key_pem.as_bytes(), &managed.settings.domains)?;
    let write = |path: std::path::PathBuf, pem: &str| {
        store::write_private(&path, pem.as_bytes()).map_err(|e| format!("cannot write {}: {e}", path.display()))
    };
    write(paths.key(), &key_pem)?;
    write(paths.chain(), &chain_pem)?;
    Ok(loaded)
}

/// The stored certificate, when there is one for the configured domains.
fn load(managed: &Managed, paths: &Paths) -> Result<Option<(Arc<CertifiedKey>, Current)>, String> {
    let read = |p: std::path::PathBuf| store::read(&p).map_err(|e| format!("{}: {e}", p.display()));
    let (Some(chain), Some(key)) = (read(paths.chain())?, read(paths.key())?) else { return Ok(None) };
    parse(&chain, &key, &managed.settings.domains).map(Some)
}

/// A chain and key from PEM, checked to be valid for every one of `domains`.
fn parse(chain_pem: &[u8], key_pem: &[u8], domains: &[String]) -> Result<(Arc<CertifiedKey>, Current), String> {
    let chain = CertificateDer::pem_slice_iter(chain_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("certificate chain: {e}"))?;
    let leaf = chain.first().cloned().ok_or("no certificate in the chain")?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| format!("key: {e}"))?;
    let (info, names) = describe(&leaf)?;
    if let Some(missing) = domains.iter().find(|d| !names.contains(d)) {
        return Err(format!("the certificate is not for {missing}"));
    }
    let cert = order::certified(chain, key)?;
    Ok((cert, Current { info, leaf }))
}

/// Serial, validity and DNS names of a certificate.
fn describe(der: &[u8]) -> Result<(CertInfo, Vec<String>), String> {
    use x509_parser::extensions::GeneralName;
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, cert) = X509Certificate::from_der(der).map_err(|e| format!("certificate: {e}"))?;
    let time = |t: x509_parser::time::ASN1Time| unix_time(t.timestamp());
    let validity = cert.validity();
    let names = cert
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|san| {
            san.value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    GeneralName::DNSName(d) => Some(d.to_ascii_lowercase()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    let serial = cert.raw_serial().iter().map(|b| format!("{b:02x}")).collect();
    Ok((CertInfo { serial, not_before: time(validity.not_before), not_after: time(validity.not_after) }, names))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_an_hour() {
        assert_eq!(backoff(1), Duration::from_secs(5));
        assert_eq!(backoff(2), Duration::from_secs(10));
        assert_eq!(backoff(4), Duration::from_secs(40));
        assert_eq!(backoff(30), MAX_BACKOFF);
    }

    #[test]
    fn renewal_at_two_thirds() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(900);
        let info = CertInfo { serial: "1".into(), not_before: start, not_after: start + Duration::from_secs(90) };
        assert_eq!(two_thirds(&info), start + Duration::from_secs(60));
    }

    #[test]
    fn a_stored_certificate_for_other_names_is_not_used() {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["a.example".to_string()])
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        let (chain, key) = (cert.pem(), key.serialize_pem());
        let ok = parse(chain.as_bytes(), key.as_bytes(), &["a.example".to_string()]);
        assert!(ok.is_ok_and(|(_, c)| !c.info.serial.is_empty()));
        let other = parse(chain.as_bytes(), key.as_bytes(), &["a.example".to_string(), "b.example".to_string()]);
        assert!(other.is_err_and(|e| e.contains("b.example")));
    }

    #[test]
    fn the_alpn_certificate_carries_the_acme_identifier() {
        let cert = order::alpn_certificate("a.example", &[7u8; 32]).expect("challenge certificate");
        let der = cert.cert.first().expect("leaf");
        let (_, names) = describe(der).expect("parse");
        assert_eq!(names, vec!["a.example".to_string()]);
        use x509_parser::prelude::{FromDer, X509Certificate};
        let (_, parsed) = X509Certificate::from_der(der).expect("parse");
        let ext = parsed
            .extensions()
            .iter()
            .find(|e| e.oid.to_id_string() == "1.3.6.1.5.5.7.1.31")
            .expect("acmeIdentifier extension");
        assert!(ext.critical);
        // An OCTET STRING of the 32-byte digest.
        assert_eq!(ext.value, &[&[0x04, 32][..], &[7u8; 32][..]].concat()[..]);
    }
}
