//! Validation of the TLS and HTTP/2 keywords: a service's `tls` and `http2`,
//! a pool's `tls` and `protocol`.
//!
//! Cipher suites and key-exchange groups are checked against what rustls's
//! aws-lc-rs provider implements ([`cipher_suite`], [`kx_group`]), so a name
//! the engine could not use never passes `switchyard check`. The PEM files
//! are read in [`crate::pem`].
//!
//! Invariants of an accepted configuration: an `https` service has a
//! [`ServerTls`] with at least one certificate file, or with `acme` and no
//! file ([`crate::acme`]); its cipher list (when given)
//! has a suite for the lowest version it accepts; a pool's client certificate
//! has both a certificate and a key; `verify = false` comes without `ca`; a
//! pool with `tls` or `protocol` is used by no layer-4 service.

use std::ops::Range;

use rustls::crypto::aws_lc_rs;
use rustls::crypto::SupportedKxGroup;
use rustls::SupportedCipherSuite;

use crate::model::*;
use crate::pem::{ca_file, cert_key};
use crate::raw::*;
use crate::units::suggest;
use crate::validate::{broken, Ctx};

/// Key-exchange group names accepted in `groups`.
pub const GROUP_NAMES: &[&str] = &["x25519", "secp256r1", "secp384r1", "x25519mlkem768"];
const VERSIONS: &[&str] = &["1.2", "1.3"];
const PROTOCOLS: &[&str] = &["http1", "h2"];
/// `session_cache = true`: entries of the server-side session cache.
pub const DEFAULT_SESSION_CACHE: usize = 20_480;

/// The rustls cipher suite of this name (`TLS13_AES_128_GCM_SHA256`,
/// `TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`, ...), as [`ServerTls::ciphers`]
/// holds them.
pub fn cipher_suite(name: &str) -> Option<SupportedCipherSuite> {
    aws_lc_rs::ALL_CIPHER_SUITES.iter().copied().find(|s| s.suite().as_str() == Some(name))
}

/// The rustls key-exchange group of this name, as [`ServerTls::groups`] holds them.
pub fn kx_group(name: &str) -> Option<&'static dyn SupportedKxGroup> {
    Some(match name {
        "x25519" => aws_lc_rs::kx_group::X25519,
        "secp256r1" => aws_lc_rs::kx_group::SECP256R1,
        "secp384r1" => aws_lc_rs::kx_group::SECP384R1,
        "x25519mlkem768" => aws_lc_rs::kx_group::X25519MLKEM768,
        _ => return None,
    })
}

fn cipher_names() -> Vec<&'static str> {
    aws_lc_rs::ALL_CIPHER_SUITES.iter().filter_map(|s| s.suite().as_str()).collect()
}

/// Validates a service's `tls`.
pub(crate) fn validate_server_tls(cx: &mut Ctx<'_, '_>, raw: &S<RawServerTls>) -> Option<ServerTls> {
    let span = raw.span();
    let raw = raw.get_ref();
    let mut certificates = Vec::new();
    let mut complete = true;
    match (&raw.certificate, &raw.key) {
        (Some(c), Some(k)) => certificates.push(cert_key(cx, c, k)),
        (None, None) => {}
        (c, k) => complete &= pair_incomplete(cx, &raw.broken, c, k),
    }
    for entry in raw.certificates.iter().flat_map(|l| l.get_ref()) {
        let e = entry.get_ref();
        match (&e.certificate, &e.key) {
            (Some(c), Some(k)) => certificates.push(cert_key(cx, c, k)),
            (None, None) if e.broken.is_empty() => cx.r.error_hint(
                &entry.span(),
                "this `certificates` entry has neither `certificate` nor `key`",
                "write { certificate = \"site.crt\", key = \"site.key\" }",
            ),
            (c, k) => complete &= pair_incomplete(cx, &e.broken, c, k),
        }
    }
    let nothing_written = raw.certificate.is_none()
        && raw.key.is_none()
        && raw.certificates.as_ref().is_none_or(|l| l.get_ref().is_empty());
    let acme = raw.acme.as_ref().and_then(|a| crate::acme::validate_acme(cx, a));
    if let Some(a) = &raw.acme {
        if !nothing_written {
            cx.r.error_hint(
                &a.span(),
                "`acme` and certificate files in the same `tls`",
                "a service's certificates come either from files (certificate, key, certificates) or from ACME: remove one",
            );
            return None;
        }
        complete &= acme.is_some();
    } else if nothing_written && ["certificate", "key", "certificates", "acme"].iter().all(|k| !broken(&raw.broken, k))
    {
        cx.r.error_hint(
            &span,
            "`tls` has no certificate",
            "add certificate = \"site.crt\" and key = \"site.key\" (PEM files: the chain, leaf first, and its key), or acme = { directory = \"https://...\", domains = [\"www.example.com\"] } for certificates from ACME",
        );
        complete = false;
    }
    let min_version = raw.min_version.as_ref().and_then(|v| parse_version(cx, v)).unwrap_or(TlsVersion::V1_2);
    let ciphers = raw.ciphers.as_ref().map(|c| ciphers(cx, c, min_version)).unwrap_or_default();
    let groups = raw.groups.as_ref().map(|g| groups(cx, g)).unwrap_or_default();
    let session_cache = raw.session_cache.as_ref().map_or(DEFAULT_SESSION_CACHE, |v| match *v.get_ref() {
        RawCacheSize::Flag(true) => DEFAULT_SESSION_CACHE,
        RawCacheSize::Flag(false) => 0,
        RawCacheSize::Entries(n) => cx
            .int_in("session_cache", &S::new(v.span(), n), 0..=10_000_000)
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(DEFAULT_SESSION_CACHE),
    });
    let client_auth = raw.client_auth.as_ref().and_then(|a| client_auth(cx, a));
    let certificates: Option<Vec<CertKey>> = certificates.into_iter().collect();
    let certificates = certificates.filter(|c| complete && (acme.is_some() || !c.is_empty()))?;
    Some(ServerTls {
        certificates,
        acme,
        min_version,
        ciphers,
        groups,
        tickets: raw.tickets.as_ref().is_none_or(|t| *t.get_ref()),
        session_cache,
        client_auth,
    })
}

/// Reports a `certificate` without `key` or the reverse; returns false.
fn pair_incomplete(
    cx: &mut Ctx<'_, '_>,
    broken_keys: &[String],
    cert: &Option<S<String>>,
    key: &Option<S<String>>,
) -> bool {
    match (cert, key) {
        (Some(c), None) if !broken(broken_keys, "key") => cx.r.error_hint(
            &c.span(),
            "`certificate` without `key`",
            "add key = \"site.key\": the private key of the certificate's first (leaf) certificate",
        ),
        (None, Some(k)) if !broken(broken_keys, "certificate") => cx.r.error_hint(
            &k.span(),
            "`key` without `certificate`",
            "add certificate = \"site.crt\": the certificate chain, leaf first",
        ),
        _ => {}
    }
    false
}

fn parse_version(cx: &mut Ctx<'_, '_>, value: &S<String>) -> Option<TlsVersion> {
    match value.get_ref().trim_start_matches("TLSv").trim_start_matches("TLS") {
        "1.2" => Some(TlsVersion::V1_2),
        "1.3" => Some(TlsVersion::V1_3),
        "1.0" | "1.1" | "1" => {
            cx.r.error_hint(
                &value.span(),
                format!("TLS {} is not supported", value.get_ref()),
                "TLS 1.0 and 1.1 are obsolete (RFC 8996); the lowest version is \"1.2\"",
            );
            None
        }
        other => {
            let hint = suggest(other, VERSIONS, "versions are");
            cx.r.error_hint(&value.span(), format!("unknown TLS version `{}`", value.get_ref()), hint);
            None
        }
    }
}

fn ciphers(cx: &mut Ctx<'_, '_>, list: &S<Vec<S<String>>>, min: TlsVersion) -> Vec<String> {
    if list.get_ref().is_empty() {
        cx.r.error_hint(&list.span(), "`ciphers` is an empty list", "remove it to use the modern defaults");
        return Vec::new();
    }
    let known = cipher_names();
    let mut names: Vec<String> = Vec::new();
    let (mut tls12, mut tls13) = (None, None);
    let mut all_known = true;
    for item in list.get_ref() {
        let name = item.get_ref().trim().to_ascii_uppercase();
        let Some(suite) = cipher_suite(&name) else {
            // `closest` compares in lower case.
            let lower: Vec<String> = known.iter().map(|k| k.to_ascii_lowercase()).collect();
            let hint = match crate::units::closest(&name, lower.iter().map(String::as_str)) {
                Some(c) => format!("did you mean `{}`?", c.to_ascii_uppercase()),
                None => format!("cipher suites are: {}", known.join(", ")),
            };
            cx.r.error_hint(&item.span(), format!("unknown cipher suite `{}`", item.get_ref()), hint);
            all_known = false;
            continue;
        };
        if names.contains(&name) {
            cx.r.error(&item.span(), format!("cipher suite `{name}` is listed twice"));
            continue;
        }
        match suite {
            SupportedCipherSuite::Tls13(_) => tls13 = tls13.or(Some(item.span())),
            SupportedCipherSuite::Tls12(_) => tls12 = tls12.or(Some(item.span())),
        }
        names.push(name);
    }
    if all_known && !names.is_empty() {
        check_versions(cx, list.span(), min, tls12, tls13);
    }
    names
}

/// Whether the suites listed leave each accepted version something to use.
fn check_versions(
    cx: &mut Ctx<'_, '_>,
    span: Range<usize>,
    min: TlsVersion,
    tls12: Option<Range<usize>>,
    tls13: Option<Range<usize>>,
) {
    match (min, tls12, tls13) {
        (TlsVersion::V1_3, Some(_), None) => cx.r.error_hint(
            &span,
            "`ciphers` has no TLS 1.3 suite, but min_version is \"1.3\": no connection could be made",
            "add a TLS13_ suite such as TLS13_AES_128_GCM_SHA256, or set min_version = \"1.2\"",
        ),
        (TlsVersion::V1_3, Some(s12), Some(_)) => cx.r.warning(
            &s12,
            "TLS 1.2 suites are never used with min_version = \"1.3\"",
            Some("remove the TLS_ suites, or set min_version = \"1.2\"".to_string()),
        ),
        (TlsVersion::V1_2, None, Some(_)) => cx.r.warning(
            &span,
            "`ciphers` has no TLS 1.2 suite, so TLS 1.2 clients cannot connect",
            Some("set min_version = \"1.3\" to say so, or add a TLS 1.2 suite (TLS_ECDHE_...)".to_string()),
        ),
        _ => {}
    }
}

fn groups(cx: &mut Ctx<'_, '_>, list: &S<Vec<S<String>>>) -> Vec<String> {
    if list.get_ref().is_empty() {
        cx.r.error_hint(&list.span(), "`groups` is an empty list", "remove it to use the defaults");
        return Vec::new();
    }
    let mut names: Vec<String> = Vec::new();
    for item in list.get_ref() {
        let name = item.get_ref().trim().to_ascii_lowercase();
        if kx_group(&name).is_none() {
            let hint = suggest(&name, GROUP_NAMES, "groups are");
            cx.r.error_hint(&item.span(), format!("unknown key-exchange group `{}`", item.get_ref()), hint);
        } else if names.contains(&name) {
            cx.r.error(&item.span(), format!("group `{name}` is listed twice"));
        } else {
            names.push(name);
        }
    }
    names
}

fn client_auth(cx: &mut Ctx<'_, '_>, raw: &S<RawClientAuth>) -> Option<ClientAuth> {
    let span = raw.span();
    let raw = raw.get_ref();
    let Some(ca) = &raw.ca else {
        if !broken(&raw.broken, "ca") {
            cx.r.error_hint(
                &span,
                "`client_auth` has no `ca`",
                "add ca = \"clients-ca.crt\": the CA certificates client certificates must chain to",
            );
        }
        return None;
    };
    let ca = ca_file(cx, ca)?;
    Some(ClientAuth { ca, required: raw.required.as_ref().is_none_or(|r| *r.get_ref()) })
}

/// Validates a service's `http2`.
pub(crate) fn validate_http2(cx: &mut Ctx<'_, '_>, raw: &RawHttp2) -> Http2 {
    let d = Http2::default();
    let number = |cx: &mut Ctx<'_, '_>, key: &str, v: &Option<S<i64>>, max: i64, default: u32| {
        v.as_ref().and_then(|v| cx.int_in(key, v, 1..=max)).and_then(|n| u32::try_from(n).ok()).unwrap_or(default)
    };
    Http2 {
        enabled: raw.enabled.as_ref().map_or(d.enabled, |e| *e.get_ref()),
        max_concurrent_streams: number(cx, "max_concurrent_streams", &raw.max_concurrent_streams, 10_000, 100),
        max_resets: number(cx, "max_resets", &raw.max_resets, 100_000, 200),
        max_control_frames: number(cx, "max_control_frames", &raw.max_control_frames, 1_000_000, 1000),
    }
}

/// Validates a service's `http3`.
pub(crate) fn validate_http3(cx: &mut Ctx<'_, '_>, raw: &RawHttp3) -> Http3 {
    let d = Http3::default();
    let number = |cx: &mut Ctx<'_, '_>, key: &str, v: &Option<S<i64>>, max: i64, default: u32| {
        v.as_ref().and_then(|v| cx.int_in(key, v, 1..=max)).and_then(|n| u32::try_from(n).ok()).unwrap_or(default)
    };
    Http3 {
        enabled: raw.enabled.as_ref().map_or(d.enabled, |e| *e.get_ref()),
        max_concurrent_streams: number(cx, "max_concurrent_streams", &raw.max_concurrent_streams, 10_000, 100),
        max_resets: number(cx, "max_resets", &raw.max_resets, 100_000, 200),
        max_control_frames: number(cx, "max_control_frames", &raw.max_control_frames, 1_000_000, 1000),
        early_data: raw.early_data.as_ref().is_some_and(|e| *e.get_ref()),
        retry: raw.retry.as_ref().and_then(|v| quic_retry(cx, v)).unwrap_or(d.retry),
        retry_threshold: number(cx, "retry_threshold", &raw.retry_threshold, 1_000_000, d.retry_threshold),
    }
}

/// The values of `http3.retry`.
const RETRY_MODES: &[&str] = &["auto", "always", "never"];

fn quic_retry(cx: &mut Ctx<'_, '_>, value: &S<String>) -> Option<QuicRetry> {
    Some(match value.get_ref().as_str() {
        "auto" => QuicRetry::Auto,
        "always" => QuicRetry::Always,
        "never" => QuicRetry::Never,
        other => {
            let hint = suggest(other, RETRY_MODES, "modes are");
            cx.r.error_hint(&value.span(), format!("unknown `retry` mode `{other}`"), hint);
            return None;
        }
    })
}

/// Validates a pool's `tls`; `None` for `tls = false` and on errors.
pub(crate) fn validate_upstream_tls(cx: &mut Ctx<'_, '_>, raw: &S<RawUpstreamTls>) -> Option<UpstreamTls> {
    let raw = raw.get_ref();
    if raw.enabled.as_ref().is_some_and(|e| !*e.get_ref()) {
        return None;
    }
    let verify = raw.verify.as_ref().is_none_or(|v| *v.get_ref());
    let mut ok = true;
    let ca = match &raw.ca {
        Some(ca) if !verify => {
            cx.r.error_hint(
                &ca.span(),
                "`ca` with verify = false: nothing would check the servers' certificates against it",
                "remove `ca`, or remove verify = false",
            );
            ok = false;
            None
        }
        Some(ca) => {
            let file = ca_file(cx, ca);
            ok &= file.is_some();
            file
        }
        None => None,
    };
    let server_name = raw.server_name.as_ref().and_then(|n| {
        let name = n.get_ref().to_ascii_lowercase();
        let valid = !name.contains('*') && rustls::pki_types::ServerName::try_from(name.as_str()).is_ok();
        if !valid {
            ok = false;
            cx.r.error_hint(
                &n.span(),
                format!("`{}` is not a valid server name", n.get_ref()),
                "write the DNS name the servers' certificates are issued for (no wildcard), or an IP address",
            );
        }
        valid.then_some(name)
    });
    let client_cert = match (&raw.certificate, &raw.key) {
        (Some(c), Some(k)) => {
            let pair = cert_key(cx, c, k);
            ok &= pair.is_some();
            pair
        }
        (None, None) => None,
        (c, k) => {
            ok &= pair_incomplete(cx, &raw.broken, c, k);
            None
        }
    };
    ok.then_some(UpstreamTls { verify, ca, server_name, client_cert })
}

/// Parses a pool's `protocol`.
pub(crate) fn parse_protocol(cx: &mut Ctx<'_, '_>, value: &S<String>) -> UpstreamProtocol {
    match value.get_ref().as_str() {
        "http1" => UpstreamProtocol::Http1,
        "h2" => UpstreamProtocol::Http2,
        other => {
            let hint = match other.to_ascii_lowercase().as_str() {
                "http2" | "h2c" | "http/2" | "http/2.0" => "write \"h2\" (HTTP/2, over TLS or clear text)".to_string(),
                "http/1.1" | "http1.1" | "http/1" => "write \"http1\"".to_string(),
                _ => suggest(other, PROTOCOLS, "protocols are"),
            };
            cx.r.error_hint(&value.span(), format!("unknown protocol `{other}`"), hint);
            UpstreamProtocol::default()
        }
    }
}

/// Reports `tls` and `protocol` on pools used by layer-4 services (which
/// relay bytes, not HTTP requests), once per pool, naming the first such
/// service.
pub(crate) fn check_layer4_pools(cx: &mut Ctx<'_, '_>, raw_pools: &[S<RawPool>], services: &[Service]) {
    let mut reported: Vec<PoolId> = Vec::new();
    for service in services.iter().filter(|s| !matches!(s.mode, Mode::Http | Mode::Https)) {
        let ids = service.default_pool.iter().chain(service.sni_routes.iter().map(|r| &r.pool));
        for id in ids {
            let Some(raw) = raw_pools.get(id.0) else { continue };
            if reported.contains(id) {
                continue;
            }
            reported.push(*id);
            let raw = raw.get_ref();
            let tls = raw.tls.as_ref().filter(|t| t.get_ref().enabled.as_ref().is_none_or(|e| *e.get_ref()));
            let written = [
                ("tls", tls.map(S::span)),
                ("protocol", raw.protocol.as_ref().map(S::span)),
                ("queue", raw.queue.as_ref().map(S::span)),
                ("retries", raw.retries.as_ref().map(S::span)),
            ];
            for (key, span) in written {
                let Some(span) = span else { continue };
                let pool = raw.name.as_ref().map_or("", |n| n.get_ref().as_str());
                let mode = service.mode.name();
                cx.r.error_hint(
                    &span,
                    format!(
                        "pool `{pool}` is used by {mode} service `{}`, which does not support `{key}`",
                        service.name
                    ),
                    format!(
                        "a pool's `{key}` applies to HTTP requests (services of mode \"http\" and \"https\"): \
                         remove it, or give the {mode} service a pool of its own"
                    ),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_group_name_is_a_rustls_group() {
        for name in GROUP_NAMES {
            assert!(kx_group(name).is_some(), "{name}");
        }
    }

    #[test]
    fn cipher_names_are_rustls_names() {
        assert!(cipher_suite("TLS13_AES_128_GCM_SHA256").is_some());
        assert!(cipher_suite("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256").is_some());
        assert!(cipher_suite("TLS_RSA_WITH_AES_128_GCM_SHA256").is_none());
        assert_eq!(cipher_names().len(), aws_lc_rs::ALL_CIPHER_SUITES.len());
    }
}
