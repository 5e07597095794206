//! HTTP dates (RFC 9110 §5.6.7): the preferred IMF-fixdate, and the two
//! obsolete formats every recipient must still accept, RFC 850 and ANSI C
//! `asctime()`.
//!
//! An RFC 850 date has a two-digit year; RFC 9110 §5.6.7 says a year that
//! appears more than 50 years in the future is the most recent past year with
//! the same last two digits, so the century depends on `now` (the `httpdate`
//! crate's fixed 1970 pivot does not). Invalid dates (a wrong weekday
//! included) are `None`: the caller then takes the safe side.

use std::time::SystemTime;

/// Full weekday names of RFC 850 dates, with the abbreviation IMF-fixdate uses.
const WEEKDAYS: [(&str, &str); 7] = [
    ("Monday", "Mon"),
    ("Tuesday", "Tue"),
    ("Wednesday", "Wed"),
    ("Thursday", "Thu"),
    ("Friday", "Fri"),
    ("Saturday", "Sat"),
    ("Sunday", "Sun"),
];

/// Parses an HTTP-date in any of its three formats; `now` resolves the
/// century of an RFC 850 date. Surrounding whitespace is ignored.
pub fn parse(value: &[u8], now: SystemTime) -> Option<SystemTime> {
    let text = std::str::from_utf8(value).ok()?.trim_matches([' ', '\t']);
    match rfc850_as_imf(text, now) {
        Some(imf) => httpdate::parse_http_date(&imf).ok(),
        // IMF-fixdate and asctime (whose weekday `httpdate` checks too).
        None => httpdate::parse_http_date(text).ok(),
    }
}

/// `Sunday, 06-Nov-94 08:49:37 GMT` → `Sun, 06 Nov 1994 08:49:37 GMT`, the
/// century chosen by the 50-year rule; `None` when `text` is not RFC 850.
fn rfc850_as_imf(text: &str, now: SystemTime) -> Option<String> {
    let (weekday, rest) = text.split_once(", ")?;
    let (_, short) = WEEKDAYS.iter().find(|(long, _)| *long == weekday)?;
    // `06-Nov-94 08:49:37 GMT`
    let bytes = rest.as_bytes();
    if bytes.len() != 22 || bytes[2] != b'-' || bytes[6] != b'-' || &rest[18..] != " GMT" {
        return None;
    }
    let yy: u32 = rest.get(7..9)?.parse().ok()?;
    let year = century_of(yy, current_year(now));
    Some(format!("{short}, {} {} {year} {} GMT", rest.get(..2)?, rest.get(3..6)?, rest.get(10..18)?))
}

/// RFC 9110 §5.6.7: the year ending in `yy` that is not more than 50 years
/// after `current`.
fn century_of(yy: u32, current: u32) -> u32 {
    let candidate = current / 100 * 100 + yy;
    if candidate > current + 50 {
        candidate - 100
    } else if candidate + 50 < current {
        // e.g. yy = 01 in 2099: 2101 is not more than 50 years ahead.
        candidate + 100
    } else {
        candidate
    }
}

fn current_year(now: SystemTime) -> u32 {
    // `Sun, 06 Nov 1994 08:49:37 GMT`: the year is at 12..16.
    httpdate::fmt_http_date(now).get(12..16).and_then(|y| y.parse().ok()).unwrap_or(2000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    /// 2026-11-25.
    const NOW: u64 = 1_795_000_000;

    #[test]
    fn the_three_formats_name_the_same_instant() {
        // RFC 9110 §5.6.7's own example: 784111777 s after the epoch.
        let table: &[&str] = &[
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
            "  Sun, 06 Nov 1994 08:49:37 GMT\t",
        ];
        for text in table {
            assert_eq!(parse(text.as_bytes(), at(NOW)), Some(at(784_111_777)), "{text}");
        }
    }

    #[test]
    fn invalid_dates_are_none() {
        let table: &[&str] = &[
            "0",
            "-1",
            "",
            "Mon, 06 Nov 1994 08:49:37 GMT",    // wrong weekday
            "Sun, 06 Nov 1994 08:49:37 UTC",    // not GMT
            "Sunday, 06-Nov-1994 08:49:37 GMT", // four-digit year in RFC 850 form
            "Sun, 6 Nov 1994 08:49:37 GMT",
            "sun, 06 nov 1994 08:49:37 gmt", // HTTP-date is case-sensitive
        ];
        for text in table {
            assert_eq!(parse(text.as_bytes(), at(NOW)), None, "{text}");
        }
    }

    #[test]
    fn two_digit_years_follow_the_fifty_year_rule() {
        assert_eq!(century_of(94, 2026), 1994);
        assert_eq!(century_of(26, 2026), 2026);
        assert_eq!(century_of(76, 2026), 2076, "exactly 50 years ahead is not more than 50");
        assert_eq!(century_of(77, 2026), 1977);
        assert_eq!(century_of(1, 2099), 2101);
        assert_eq!(current_year(at(NOW)), 2026);
        // 2030 written in RFC 850 form, read in 2026.
        let future = parse(b"Tuesday, 01-Jan-30 00:00:00 GMT", at(NOW)).expect("valid");
        assert_eq!(future, httpdate::parse_http_date("Tue, 01 Jan 2030 00:00:00 GMT").expect("valid"));
    }
}
