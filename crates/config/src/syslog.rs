//! Validation of the syslog keys of `[access_log]` and `[event_log]`:
//! `syslog` (a Unix datagram socket path such as `/dev/log`, or
//! `udp://HOST:PORT` with an IP address) and `facility` (a name from RFC 5424
//! section 6.2.1, as syslog.conf writes them).

use std::path::PathBuf;

use crate::model::{Syslog, SyslogAddress};
use crate::raw::S;
use crate::units::{parse_socket_addr, suggest};
use crate::validate::Ctx;

/// Facility names and their codes (RFC 5424, table 1).
const FACILITIES: &[(&str, u8)] = &[
    ("kern", 0),
    ("user", 1),
    ("mail", 2),
    ("daemon", 3),
    ("auth", 4),
    ("syslog", 5),
    ("lpr", 6),
    ("news", 7),
    ("uucp", 8),
    ("cron", 9),
    ("authpriv", 10),
    ("ftp", 11),
    ("local0", 16),
    ("local1", 17),
    ("local2", 18),
    ("local3", 19),
    ("local4", 20),
    ("local5", 21),
    ("local6", 22),
    ("local7", 23),
];

/// The facility of the access log's messages when `facility` is absent.
pub(crate) const ACCESS_FACILITY: u8 = 16;
/// The facility of the event log's messages when `facility` is absent.
pub(crate) const EVENT_FACILITY: u8 = 3;

/// Validates a `syslog` address and its `facility` (default `default_facility`).
pub(crate) fn validate_syslog(
    cx: &mut Ctx<'_, '_>,
    address: &S<String>,
    facility: Option<&S<String>>,
    default_facility: u8,
) -> Syslog {
    let text = address.get_ref().as_str();
    let span = address.span();
    let example = "write a socket path such as \"/dev/log\", or \"udp://127.0.0.1:514\"";
    let address = if let Some(rest) = text.strip_prefix("udp://") {
        match parse_socket_addr(rest) {
            Ok(addr) => SyslogAddress::Udp(addr),
            Err(p) => {
                let hint = "an IP address and a port, e.g. udp://127.0.0.1:514 or udp://[::1]:514";
                cx.r.error_hint(&span, format!("syslog address: {}", p.message), hint);
                SyslogAddress::Udp(std::net::SocketAddr::from(([127, 0, 0, 1], 514)))
            }
        }
    } else if text.starts_with('/') {
        SyslogAddress::Unix(PathBuf::from(text))
    } else {
        cx.r.error_hint(&span, format!("`{text}` is no syslog address"), example);
        SyslogAddress::Unix(PathBuf::from("/dev/log"))
    };
    let facility = match facility {
        None => default_facility,
        Some(f) => match FACILITIES.iter().find(|(name, _)| name == f.get_ref()) {
            Some((_, code)) => *code,
            None => {
                let names: Vec<&str> = FACILITIES.iter().map(|(n, _)| *n).collect();
                let hint = suggest(f.get_ref(), &names, "facilities are");
                cx.r.error_hint(&f.span(), format!("unknown syslog facility `{}`", f.get_ref()), hint);
                default_facility
            }
        },
    };
    Syslog { address, facility }
}
