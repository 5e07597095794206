//! Validation of the operations tables: `[admin]`, `[access_log]` and
//! `[event_log]`.
//!
//! Invariants of an accepted [`Admin`]: its listener is on a loopback address
//! (127.0.0.0/8 or ::1) or it has at least one token, because the admin API
//! can change servers and reload; every token is non-empty, visible ASCII
//! (it travels in an `Authorization` header) and listed once; its address
//! neither equals nor overlaps a service listener ([`overlaps`]). Secrets
//! never appear in diagnostics: a duplicate is located by line only.
//!
//! The access log's verdict depends on the text alone. A directory that does
//! not exist on this machine is only a warning: `switchyard check` often runs
//! somewhere else (CI, a laptop) than the host that will write the log, and
//! the engine reports the real failure when it opens the file.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::model::{AccessLog, Admin, AdminToken, EventLog, LogFormat, LogTarget, Role};
use crate::raw::{RawAccessLog, RawAdmin, RawAdminToken, RawEventLog, S};
use crate::syslog::{validate_syslog, ACCESS_FACILITY, EVENT_FACILITY};
use crate::units::{parse_socket_addr, suggest};
use crate::validate::{broken, overlaps, Ctx, Listener};

const ROLES: &[&str] = &["admin", "read-only"];
const FORMATS: &[&str] = &["json", "combined"];

/// Validates `[admin]`; `listeners` are the service listeners, to which the
/// admin address must not be equal or overlap.
pub(crate) fn validate_admin(cx: &mut Ctx<'_, '_>, raw: &S<RawAdmin>, listeners: &[Listener]) -> Admin {
    let table_span = raw.span();
    let raw = raw.get_ref();
    // `None` when the address is unusable: nothing more can be said about it.
    let (listen, span) = match &raw.listen {
        None if broken(&raw.broken, "listen") => (None, table_span),
        None => (Some(Admin::DEFAULT_LISTEN), table_span),
        Some(l) => match parse_socket_addr(l.get_ref()) {
            Ok(addr) => (Some(addr), l.span()),
            Err(p) => {
                cx.problem(&l.span(), p);
                (None, l.span())
            }
        },
    };
    let tokens = raw.tokens.as_ref().map(|t| validate_tokens(cx, t.get_ref())).unwrap_or_default();
    let Some(listen) = listen else {
        return Admin { listen: Admin::DEFAULT_LISTEN, tokens };
    };
    let no_tokens = match &raw.tokens {
        None => !broken(&raw.broken, "tokens"),
        Some(list) => list.get_ref().is_empty(),
    };
    if no_tokens && !is_loopback(listen.ip()) {
        cx.r.error_hint(
            &span,
            format!("the admin listener `{listen}` is not on a loopback address and has no tokens"),
            "anyone who reaches it could change servers and reload: add tokens = [ { token = \"SECRET\" } ], \
             or listen on 127.0.0.1",
        );
    }
    // The admin API is TCP: a UDP service may share its address.
    let clash = listeners.iter().find(|l| !l.udp && overlaps(&l.addr, &listen));
    if let Some(Listener { addr: other, span: other_span, service, .. }) = clash {
        let line = cx.r.line_of(other_span);
        if *other == listen {
            cx.r.error_hint(
                &span,
                format!("admin listener `{listen}` is already used by service `{service}` (line {line})"),
                format!("the admin API needs an address of its own (the default is {})", Admin::DEFAULT_LISTEN),
            );
        } else {
            cx.r.error_hint(
                &span,
                format!("admin listener `{listen}` overlaps `{other}` of service `{service}` (line {line})"),
                format!("a wildcard address covers every address of its family on port {}", listen.port()),
            );
        }
    }
    Admin { listen, tokens }
}

/// 127.0.0.0/8 and ::1, also written IPv4-mapped (`::ffff:127.0.0.1`).
fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

fn validate_tokens(cx: &mut Ctx<'_, '_>, raw: &[S<RawAdminToken>]) -> Vec<AdminToken> {
    let mut tokens: Vec<AdminToken> = Vec::new();
    let mut lines: Vec<usize> = Vec::new();
    for entry in raw {
        let t = entry.get_ref();
        let role = t.role.as_ref().map_or(Some(Role::Admin), |r| parse_role(cx, r));
        let Some(secret) = &t.token else {
            if !broken(&t.broken, "token") {
                cx.r.error_hint(
                    &entry.span(),
                    "this admin token has no `token`",
                    "add token = \"SECRET\", the value clients send as `Authorization: Bearer SECRET`",
                );
            }
            continue;
        };
        let text = secret.get_ref();
        if text.is_empty() {
            cx.r.error_hint(
                &secret.span(),
                "an admin token must not be empty",
                "use a long random string, e.g. the output of `openssl rand -hex 32`",
            );
            continue;
        }
        if !text.bytes().all(|b| b.is_ascii_graphic()) {
            cx.r.error_hint(
                &secret.span(),
                "an admin token must be visible ASCII characters, without spaces",
                "it is sent in an `Authorization: Bearer` header; `openssl rand -hex 32` makes a good one",
            );
            continue;
        }
        if let Some(i) = tokens.iter().position(|other| &other.secret == text) {
            cx.r.error_hint(
                &secret.span(),
                format!("this admin token is listed twice (first at line {})", lines[i]),
                "list each token once, with the role it needs",
            );
            continue;
        }
        tokens.push(AdminToken { secret: text.clone(), role: role.unwrap_or(Role::Admin) });
        lines.push(cx.r.line_of(&secret.span()));
    }
    tokens
}

fn parse_role(cx: &mut Ctx<'_, '_>, value: &S<String>) -> Option<Role> {
    match value.get_ref().as_str() {
        "admin" => Some(Role::Admin),
        "read-only" => Some(Role::ReadOnly),
        other => {
            let hint = suggest(&other.replace('_', "-"), ROLES, "roles are");
            cx.r.error_hint(&value.span(), format!("unknown admin token role `{other}`"), hint);
            None
        }
    }
}

/// Validates `[access_log]`; absent keys take their defaults ([`AccessLog::default`]).
pub(crate) fn validate_access_log(cx: &mut Ctx<'_, '_>, raw: &S<RawAccessLog>) -> AccessLog {
    let raw = raw.get_ref();
    let d = AccessLog::default();
    let target = match (&raw.path, &raw.syslog) {
        (Some(path), Some(syslog)) => {
            let hint = "an access log goes to one place: remove `path` or `syslog`";
            cx.r.error_hint(&syslog.span(), "`path` and `syslog` both given", hint);
            validate_syslog(cx, syslog, raw.facility.as_ref(), ACCESS_FACILITY);
            log_target(cx, path)
        }
        (Some(path), None) => log_target(cx, path),
        (None, Some(syslog)) => LogTarget::Syslog(validate_syslog(cx, syslog, raw.facility.as_ref(), ACCESS_FACILITY)),
        (None, None) => d.target,
    };
    if let (Some(f), None) = (&raw.facility, &raw.syslog) {
        cx.r.error_hint(&f.span(), "`facility` without `syslog`", "a facility applies to syslog messages only");
    }
    let format = match &raw.format {
        None => d.format,
        Some(f) => match f.get_ref().as_str() {
            "json" => LogFormat::Json,
            "combined" => LogFormat::Combined,
            other => {
                let hint = suggest(other, FORMATS, "formats are");
                cx.r.error_hint(&f.span(), format!("unknown access log format `{other}`"), hint);
                d.format
            }
        },
    };
    AccessLog { target, format }
}

/// Validates `[event_log]`: `syslog` is required.
pub(crate) fn validate_event_log(cx: &mut Ctx<'_, '_>, raw: &S<RawEventLog>) -> Option<EventLog> {
    let span = raw.span();
    let raw = raw.get_ref();
    let Some(address) = &raw.syslog else {
        let hint = "add `syslog = \"/dev/log\"` (or \"udp://HOST:PORT\"), or remove the table";
        cx.r.error_hint(&span, "[event_log] without `syslog`", hint);
        return None;
    };
    Some(EventLog { syslog: validate_syslog(cx, address, raw.facility.as_ref(), EVENT_FACILITY) })
}

fn log_target(cx: &mut Ctx<'_, '_>, path: &S<String>) -> LogTarget {
    let text = path.get_ref().as_str();
    let span = path.span();
    match text {
        "stdout" | "-" => return LogTarget::Stdout,
        "" => cx.r.error_hint(
            &span,
            "`path` must not be empty",
            "write \"stdout\", or a file such as \"/var/log/switchyard/access.log\"",
        ),
        "stderr" => cx.r.error_hint(
            &span,
            "the access log cannot go to standard error",
            "write \"stdout\", or a file such as \"/var/log/switchyard/access.log\"",
        ),
        _ if text.ends_with('/') => cx.r.error_hint(
            &span,
            format!("`{text}` names a directory, not a file"),
            format!("add a file name, e.g. \"{text}access.log\""),
        ),
        _ => check_log_file(cx, &span, Path::new(text)),
    }
    LogTarget::File(PathBuf::from(text))
}

/// Warns about a log file this machine could not open (see the module doc
/// for why these are warnings). Relative paths are relative to the working
/// directory, as they will be for the engine.
fn check_log_file(cx: &mut Ctx<'_, '_>, span: &std::ops::Range<usize>, path: &Path) {
    if path.is_dir() {
        let hint = Some(format!("add a file name, e.g. \"{}\"", path.join("access.log").display()));
        cx.r.warning(span, format!("`{}` is a directory, not a file", path.display()), hint);
        return;
    }
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return;
    };
    if !dir.is_dir() {
        cx.r.warning(
            span,
            format!("directory `{}` of the access log does not exist here", dir.display()),
            Some("create it on the host before switchyard starts, or the access log cannot be opened".to_string()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn loopback_addresses() {
        assert!(is_loopback(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1))));
        assert!(is_loopback(IpAddr::V4(Ipv4Addr::new(127, 255, 1, 2))));
        assert!(is_loopback(IpAddr::V6(Ipv6Addr::LOCALHOST)));
        assert!(is_loopback(IpAddr::V6(Ipv4Addr::new(127, 0, 0, 1).to_ipv6_mapped())));
        assert!(!is_loopback(IpAddr::V4(Ipv4Addr::UNSPECIFIED)));
        assert!(!is_loopback(IpAddr::V6(Ipv6Addr::UNSPECIFIED)));
        assert!(!is_loopback(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))));
    }
}
