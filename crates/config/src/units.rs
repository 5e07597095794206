//! Parsers for the small value languages inside strings: durations, sizes,
//! listener and server addresses, networks (CIDR), HTTP tokens, plus the
//! "did you mean" suggestion used for unknown keys and names.
//!
//! Each parser returns a [`Problem`] (message and optional hint) rather than a
//! located diagnostic; the caller knows the span.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::model::Cidr;

/// Why a value was refused: a one-line message and an optional hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    pub(crate) message: String,
    pub(crate) hint: Option<String>,
}

impl Problem {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Problem { message: message.into(), hint: None }
    }

    pub(crate) fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

const DURATION_HINT: &str = r#"write a number and a unit: "500ms", "10s", "2m", "1h" or "365d""#;

/// Parses `"500ms"`, `"10s"`, `"2m"`, `"1h"`, `"365d"`. Zero is refused: every duration
/// in the configuration is a timeout, and a zero timeout is a mistake.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, Problem> {
    let text = text.trim();
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let bad = || Problem::new(format!("`{text}` is not a duration")).hint(DURATION_HINT);
    if number.is_empty() {
        return Err(bad());
    }
    let n: u64 = number.parse().map_err(|_| bad())?;
    let millis_per = match unit.trim_start() {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(bad()),
    };
    let millis = n.checked_mul(millis_per).ok_or_else(|| Problem::new(format!("`{text}` is too long")))?;
    if millis == 0 {
        return Err(Problem::new("a duration must be greater than zero").hint(DURATION_HINT));
    }
    Ok(Duration::from_millis(millis))
}

const SIZE_HINT: &str =
    r#"write a number of bytes, or a string with a unit: B, KiB, MiB, GiB, KB, MB or GB (e.g. "10MiB")"#;

/// Parses a size written as a string: `"512"`, `"512B"`, `"16KiB"`, `"10MB"`.
pub(crate) fn parse_size(text: &str) -> Result<u64, Problem> {
    let trimmed = text.trim();
    let digits = trimmed.find(|c: char| !c.is_ascii_digit()).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(digits);
    let bad = || Problem::new(format!("`{text}` is not a size")).hint(SIZE_HINT);
    if number.is_empty() {
        return Err(bad());
    }
    let n: u64 = number.parse().map_err(|_| bad())?;
    let factor: u64 = match unit.trim_start() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return Err(bad()),
    };
    n.checked_mul(factor).ok_or_else(|| Problem::new(format!("`{text}` is too large")))
}

const ADDR_HINT: &str =
    "write an IP address and a port, such as 127.0.0.1:8080 or [::1]:8080 (DNS names are not resolved)";

/// Parses `IP:port` (IPv6 in brackets). Host names are refused on purpose: a
/// load balancer that resolves names at start-up silently pins one answer.
pub(crate) fn parse_socket_addr(text: &str) -> Result<SocketAddr, Problem> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        if addr.port() == 0 {
            return Err(Problem::new(format!("port 0 in `{text}` is not allowed")).hint("ports go from 1 to 65535"));
        }
        return Ok(addr);
    }
    let unbracketed = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')).unwrap_or(text);
    if let Ok(ip) = unbracketed.parse::<IpAddr>() {
        let hint = match text.rsplit_once(':') {
            // `::1:80` is a valid IPv6 address, but probably meant `[::1]:80`.
            Some((host, port)) if ip.is_ipv6() && !text.starts_with('[') && host.parse::<IpAddr>().is_ok() => {
                format!("IPv6 addresses go in brackets: if {port} is the port, write `[{host}]:{port}`")
            }
            _ if ip.is_ipv6() => format!("add one, e.g. `[{unbracketed}]:80`"),
            _ => format!("add one, e.g. `{text}:80`"),
        };
        return Err(Problem::new(format!("`{text}` has no port")).hint(hint));
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(Problem::new(format!("`{text}` is not an IP address and port")).hint(ADDR_HINT));
    };
    let host_unbracketed = host.trim_start_matches('[').trim_end_matches(']');
    if host_unbracketed.parse::<IpAddr>().is_ok() {
        if host.contains(':') && !host.starts_with('[') {
            return Err(Problem::new(format!("IPv6 address in `{text}` must be in brackets"))
                .hint(format!("write `[{host}]:{port}`")));
        }
        return Err(Problem::new(format!("`{port}` in `{text}` is not a valid port")).hint("ports go from 1 to 65535"));
    }
    Err(Problem::new(format!("`{host}` in `{text}` is not an IP address")).hint(ADDR_HINT))
}

/// Parses a network: `10.0.0.0/8`, `::1`, `2001:db8::/32`. A bare address is
/// a full-length prefix; host bits set below the prefix are cleared.
pub(crate) fn parse_cidr(text: &str) -> Result<Cidr, Problem> {
    let hint = "write an address or a network, such as 10.0.0.0/8, 192.0.2.7 or 2001:db8::/32";
    let (addr_text, prefix_text) = match text.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (text, None),
    };
    let addr: IpAddr = addr_text
        .trim()
        .parse()
        .map_err(|_| Problem::new(format!("`{text}` is not an IP address or network")).hint(hint))?;
    let max: u8 = if addr.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix_text {
        None => max,
        Some(p) => match p.trim().parse::<u8>() {
            Ok(n) if n <= max => n,
            _ => {
                return Err(Problem::new(format!("prefix length `/{p}` in `{text}` is not valid"))
                    .hint(format!("an {} prefix length goes from 0 to {max}", family(&addr))))
            }
        },
    };
    Ok(Cidr { addr: mask(addr, prefix), prefix })
}

fn family(addr: &IpAddr) -> &'static str {
    if addr.is_ipv4() {
        "IPv4"
    } else {
        "IPv6"
    }
}

fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

/// True for a non-empty RFC 9110 token (header names, methods).
pub(crate) fn is_token(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// True when `text` can be sent as a header value (no CR, LF or NUL).
pub(crate) fn is_header_value(text: &str) -> bool {
    !text.contains(['\r', '\n', '\0'])
}

/// Edit distance counting insertions, deletions, substitutions and swaps of
/// two adjacent characters (optimal string alignment), in characters.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let width = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * width];
    for i in 0..=a.len() {
        d[i * width] = i;
    }
    for (j, cell) in d.iter_mut().enumerate().take(width) {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best =
                (d[(i - 1) * width + j] + 1).min(d[i * width + j - 1] + 1).min(d[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[(i - 2) * width + j - 2] + 1);
            }
            d[i * width + j] = best;
        }
    }
    d[a.len() * width + b.len()]
}

/// The candidate closest to `name`, if it is close enough to be a typo.
pub(crate) fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (name.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (edit_distance(&name.to_ascii_lowercase(), c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// "did you mean `x`?" when a candidate is close, else "expected one of: …".
pub(crate) fn suggest(name: &str, candidates: &[&str], what: &str) -> String {
    match closest(name, candidates.iter().copied()) {
        Some(c) => format!("did you mean `{c}`?"),
        None => format!("{what}: {}", candidates.join(", ")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(2 * 86_400)));
        assert_eq!(parse_duration(" 3 s "), Ok(Duration::from_secs(3)));
        for bad in ["", "s", "10", "10 seconds", "1.5s", "-1s", "10S", "99999999999999999999s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_duration("0s").unwrap_err().message.contains("greater than zero"));
        assert!(parse_duration("999999999999999h").unwrap_err().message.contains("too long"));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("512B"), Ok(512));
        assert_eq!(parse_size("16KiB"), Ok(16384));
        assert_eq!(parse_size("10 MiB"), Ok(10 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("2KB"), Ok(2000));
        assert_eq!(parse_size("3MB"), Ok(3_000_000));
        assert_eq!(parse_size("1GB"), Ok(1_000_000_000));
        for bad in ["", "KiB", "10kb", "1.5MiB", "-1", "10TiB"] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_size("99999999999GiB").unwrap_err().message.contains("too large"));
    }

    #[test]
    fn socket_addresses() {
        assert_eq!(parse_socket_addr("127.0.0.1:80"), Ok(SocketAddr::from(([127, 0, 0, 1], 80))));
        assert_eq!(parse_socket_addr("[::1]:8080"), Ok(SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 8080)));
        let err = |s| parse_socket_addr(s).unwrap_err();
        assert!(err("localhost:80").message.contains("not an IP address"));
        assert!(err("localhost:80").hint.unwrap_or_default().contains("DNS"));
        assert!(err("127.0.0.1").message.contains("no port"));
        assert!(err("::1").hint.unwrap_or_default().contains("[::1]:80"));
        assert!(err("[::1]").message.contains("no port"));
        assert!(err("::1:80").hint.unwrap_or_default().contains("`[::1]:80`"));
        assert!(err("127.0.0.1:0").message.contains("port 0"));
        assert!(err("127.0.0.1:70000").message.contains("not a valid port"));
        assert!(err("::ffff:10.0.0.1:80").message.contains("brackets"));
        assert!(err("fe80::1:80").message.contains("no port"));
        assert!(err("web").message.contains("not an IP address"));
    }

    #[test]
    fn cidrs() {
        let v4 = |a, b, c, d| IpAddr::V4(Ipv4Addr::new(a, b, c, d));
        assert_eq!(parse_cidr("10.0.0.0/8"), Ok(Cidr { addr: v4(10, 0, 0, 0), prefix: 8 }));
        assert_eq!(parse_cidr("10.1.2.3/8"), Ok(Cidr { addr: v4(10, 0, 0, 0), prefix: 8 }));
        assert_eq!(parse_cidr("192.0.2.7"), Ok(Cidr { addr: v4(192, 0, 2, 7), prefix: 32 }));
        assert_eq!(parse_cidr("0.0.0.0/0"), Ok(Cidr { addr: v4(0, 0, 0, 0), prefix: 0 }));
        assert_eq!(parse_cidr("::1"), Ok(Cidr { addr: IpAddr::V6(Ipv6Addr::LOCALHOST), prefix: 128 }));
        let net = parse_cidr("2001:db8::ff/32").unwrap();
        assert_eq!(net.prefix, 32);
        assert_eq!(net.addr, "2001:db8::".parse::<IpAddr>().unwrap());
        assert!(net.contains("2001:db8:1::2".parse().unwrap()));
        for bad in ["10.0.0.0/33", "::/129", "10.0.0/8", "host", "10.0.0.0/x", ""] {
            assert!(parse_cidr(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn tokens_and_values() {
        assert!(is_token("x-tenant"));
        assert!(is_token("GET"));
        assert!(!is_token(""));
        assert!(!is_token("x tenant"));
        assert!(!is_token("x:y"));
        assert!(is_header_value("a b\tc"));
        assert!(!is_header_value("a\r\nb"));
        assert!(!is_header_value("a\0"));
    }

    #[test]
    fn suggestions() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("nmae", "name"), 1);
        assert_eq!(closest("nmae", ["name", "mode"]), Some("name"));
        assert_eq!(closest("listne", ["listen", "pool"]), Some("listen"));
        assert_eq!(closest("zzzzzz", ["listen", "pool"]), None);
        assert_eq!(suggest("poll", &["pool", "name"], "expected"), "did you mean `pool`?");
        assert_eq!(suggest("xyz", &["a", "b"], "expected one of"), "expected one of: a, b");
    }
}
