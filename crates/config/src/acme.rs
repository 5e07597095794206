//! Validation of a service's `tls.acme`: certificates from an ACME server
//! (RFC 8555) instead of files.
//!
//! Invariants of an accepted [`Acme`]: `directory` is an `https://` URL
//! (RFC 8555 6.1 requires HTTPS); at least one
//! domain (none needed with `on_demand`, [`crate::on_demand`]), each a DNS name (wildcards are refused: neither challenge type
//! switchyard answers can prove them); contacts are `mailto:` URLs; the
//! storage path is resolved against the configuration file's directory.

use std::path::PathBuf;

use crate::model::*;
use crate::pem::ca_file;
use crate::raw::*;
use crate::units::suggest;
use crate::validate::{broken, Ctx};

/// Where account, keys and certificates live when `storage` is not written.
pub const DEFAULT_STORAGE: &str = "/var/lib/switchyard/acme";
const CHALLENGES: &[&str] = &["http-01", "tls-alpn-01"];

/// Validates `acme`; `None` on errors.
pub(crate) fn validate_acme(cx: &mut Ctx<'_, '_>, raw: &S<RawAcme>) -> Option<Acme> {
    let span = raw.span();
    let raw = raw.get_ref();
    let mut ok = true;
    let directory = match &raw.directory {
        Some(d) => directory(cx, d),
        None => {
            if !broken(&raw.broken, "directory") {
                cx.r.error_hint(
                    &span,
                    "`acme` has no `directory`",
                    "add directory = \"https://acme-v02.api.letsencrypt.org/directory\" (the ACME server's directory URL)",
                );
            }
            None
        }
    };
    let on_demand = raw.on_demand.as_ref().map(|o| crate::on_demand::validate_on_demand(cx, o));
    ok &= on_demand.as_ref().is_none_or(Option::is_some);
    let on_demand = on_demand.flatten();
    let domains = match &raw.domains {
        // With on-demand issuance, the configured names are optional.
        Some(list) if raw.on_demand.is_some() && list.get_ref().is_empty() => Some(Vec::new()),
        Some(list) => domains(cx, list),
        None if raw.on_demand.is_some() => Some(Vec::new()),
        None => {
            if !broken(&raw.broken, "domains") {
                cx.r.error_hint(&span, "`acme` has no `domains`", "add domains = [\"www.example.com\"]");
            }
            None
        }
    };
    let contact = raw.contact.as_ref().map_or(Some(Vec::new()), |c| contact(cx, c));
    let challenge = raw.challenge.as_ref().map_or(Some(AcmeChallenge::Http01), |c| challenge(cx, c));
    let storage = match &raw.storage {
        Some(s) if s.get_ref().is_empty() => {
            cx.r.error(&s.span(), "`storage` must not be empty");
            None
        }
        Some(s) => Some(cx.files.base.join(s.get_ref())),
        None => Some(PathBuf::from(DEFAULT_STORAGE)),
    };
    let ca_roots = match &raw.ca_roots {
        Some(path) => {
            let file = ca_file(cx, path);
            ok &= file.is_some();
            file
        }
        None => None,
    };
    let profile = raw.profile.as_ref().and_then(|p| {
        let name = p.get_ref();
        let valid = !name.is_empty() && name.bytes().all(|b| b.is_ascii_graphic());
        if !valid {
            cx.r.error_hint(
                &p.span(),
                format!("`{name}` is not a profile name"),
                "write the name the ACME server's directory lists under meta.profiles, such as \"shortlived\"",
            );
        }
        valid.then(|| name.clone())
    });
    ok &= raw.profile.is_none() || profile.is_some();
    let acme = Acme {
        directory: directory?,
        contact: contact?,
        domains: domains?,
        challenge: challenge?,
        storage: storage?,
        ca_roots,
        profile,
        on_demand,
    };
    ok.then_some(acme)
}

fn directory(cx: &mut Ctx<'_, '_>, value: &S<String>) -> Option<String> {
    let url = value.get_ref().trim();
    let host = url.get(..8).filter(|s| s.eq_ignore_ascii_case("https://")).map(|_| &url[8..]);
    let host = host.map(|rest| rest.split(['/', '?', '#']).next().unwrap_or(""));
    if host.is_none_or(str::is_empty) {
        cx.r.error_hint(
            &value.span(),
            format!("`{url}` is not an ACME directory URL"),
            "write the https:// URL of the server's directory, such as \"https://acme-v02.api.letsencrypt.org/directory\"",
        );
        return None;
    }
    Some(url.to_string())
}

fn domains(cx: &mut Ctx<'_, '_>, list: &S<Vec<S<String>>>) -> Option<Vec<String>> {
    if list.get_ref().is_empty() {
        cx.r.error_hint(
            &list.span(),
            "`domains` is an empty list",
            "write at least one name: domains = [\"www.example.com\"]",
        );
        return None;
    }
    let mut names: Vec<String> = Vec::new();
    let mut ok = true;
    for item in list.get_ref() {
        let name = item.get_ref().trim().trim_end_matches('.').to_ascii_lowercase();
        if name.starts_with("*.") {
            cx.r.error_hint(
                &item.span(),
                format!(
                    "`{}`: wildcard names need the dns-01 challenge, which switchyard does not answer",
                    item.get_ref()
                ),
                "list each name, or use certificate files for a wildcard",
            );
            ok = false;
        } else if !is_dns_name(&name) {
            cx.r.error_hint(
                &item.span(),
                format!("`{}` is not a DNS name", item.get_ref()),
                "write a name such as \"www.example.com\"",
            );
            ok = false;
        } else if names.contains(&name) {
            cx.r.error(&item.span(), format!("domain `{name}` is listed twice"));
            ok = false;
        } else {
            names.push(name);
        }
    }
    ok.then_some(names)
}

/// A DNS name of at least two labels, each 1 to 63 letters, digits or
/// hyphens, not starting or ending with a hyphen; not an IP address; at
/// most 253 bytes. Expects lower case without a trailing dot.
pub fn is_dns_name(name: &str) -> bool {
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    name.len() <= 253 && name.contains('.') && name.split('.').all(label) && name.parse::<std::net::IpAddr>().is_err()
}

fn contact(cx: &mut Ctx<'_, '_>, list: &S<Vec<S<String>>>) -> Option<Vec<String>> {
    let mut ok = true;
    let mut out = Vec::new();
    for item in list.get_ref() {
        let value = item.get_ref().trim();
        let address = value.strip_prefix("mailto:").filter(|a| a.contains('@') && !a.contains(char::is_whitespace));
        if address.is_none() {
            let hint = if value.contains('@') && !value.contains(':') {
                format!("write \"mailto:{value}\"")
            } else {
                "write a mailto: URL such as \"mailto:admin@example.com\"".to_string()
            };
            cx.r.error_hint(&item.span(), format!("`{value}` is not a contact URL"), hint);
            ok = false;
        }
        out.push(value.to_string());
    }
    ok.then_some(out)
}

fn challenge(cx: &mut Ctx<'_, '_>, value: &S<String>) -> Option<AcmeChallenge> {
    match value.get_ref().to_ascii_lowercase().as_str() {
        "http-01" => Some(AcmeChallenge::Http01),
        "tls-alpn-01" => Some(AcmeChallenge::TlsAlpn01),
        "dns-01" => {
            cx.r.error_hint(
                &value.span(),
                "the dns-01 challenge is not supported",
                "use \"http-01\" (an `http` service answers on port 80) or \"tls-alpn-01\" (this service answers)",
            );
            None
        }
        other => {
            let hint = suggest(other, CHALLENGES, "challenges are");
            cx.r.error_hint(&value.span(), format!("unknown challenge `{}`", value.get_ref()), hint);
            None
        }
    }
}

/// Warns about an `http-01` account when no `http` service could answer its
/// challenges (the ACME server asks on port 80 of the domain).
pub(crate) fn check_http01_listener(cx: &mut Ctx<'_, '_>, raw: &[S<RawService>], services: &[Service]) {
    if services.iter().any(|s| s.mode == Mode::Http) {
        return;
    }
    for (service, raw) in services.iter().zip(raw) {
        let http01 =
            service.tls.as_ref().and_then(|t| t.acme.as_ref()).is_some_and(|a| a.challenge == AcmeChallenge::Http01);
        let span = raw.get_ref().tls.as_ref().map(S::span);
        if let (true, Some(span)) = (http01, span) {
            cx.r.warning(
                &span,
                format!(
                    "service `{}` gets its certificate by http-01, but no `http` service could answer the challenge",
                    service.name
                ),
                Some(
                    "add an `http` service listening on port 80 of the domains, or use challenge = \"tls-alpn-01\""
                        .to_string(),
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_names() {
        assert!(is_dns_name("a.example"));
        assert!(is_dns_name("x-1.b.example.com"));
        assert!(!is_dns_name("localhost"));
        assert!(!is_dns_name("-a.example"));
        assert!(!is_dns_name("a..example"));
        assert!(!is_dns_name("127.0.0.1"));
        assert!(!is_dns_name("a_b.example"));
    }
}
