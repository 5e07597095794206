//! Targeted cache-control fields (RFC 9213): `CDN-Cache-Control` and the
//! like, whose value is a Structured Fields Dictionary (RFC 8941 §3.2) of the
//! `Cache-Control` directives, meant for one class of caches.
//!
//! RFC 9213 §2.2: a cache with a target list uses the first listed field whose
//! value is valid and not empty, and then ignores `Cache-Control` and
//! `Expires`. A value that does not parse as a Dictionary is invalid as a
//! whole (the field is then skipped); a directive whose value has the wrong
//! type is ignored on its own (§2.1: integers for the delta-seconds
//! directives, booleans for the others).

use super::{Directives, DELTA_MAX};

/// A Dictionary member's value, reduced to what directives need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Value {
    Integer(i64),
    Boolean(bool),
    /// Any other item or inner list.
    Other,
}

/// The directives of one targeted field (all its field lines, combined as
/// RFC 9110 §5.3 says); `None` when it is absent, empty or not a Dictionary.
pub fn parse<'a>(values: impl Iterator<Item = &'a [u8]>) -> Option<Directives> {
    let mut combined: Vec<u8> = Vec::new();
    for value in values {
        if !combined.is_empty() {
            combined.extend_from_slice(b", ");
        }
        combined.extend_from_slice(value);
    }
    let members = dictionary(&combined)?;
    if members.is_empty() {
        return None;
    }
    let mut d = Directives::default();
    for (key, value) in members {
        let seconds = match value {
            Value::Integer(n) => u64::try_from(n).ok().map(|n| n.min(DELTA_MAX)),
            _ => None,
        };
        let flag = value != Value::Boolean(false);
        match key.as_slice() {
            b"max-age" => d.max_age = seconds.or(d.max_age),
            b"s-maxage" => d.s_maxage = seconds.or(d.s_maxage),
            b"stale-while-revalidate" => d.stale_while_revalidate = seconds.or(d.stale_while_revalidate),
            b"stale-if-error" => d.stale_if_error = seconds.or(d.stale_if_error),
            // `no-cache` and `private` may carry field names: honoured whole
            // (stricter than the qualified form, never laxer).
            b"no-store" => d.no_store |= flag,
            b"no-cache" => d.no_cache |= flag,
            b"private" => d.private |= flag,
            b"public" => d.public |= flag,
            b"must-revalidate" | b"proxy-revalidate" => d.must_revalidate |= flag,
            _ => {}
        }
    }
    Some(d)
}

/// RFC 8941 §4.2.2, parsing a Dictionary: keys and their values, parameters
/// dropped; `None` on any syntax error.
fn dictionary(input: &[u8]) -> Option<Vec<(Vec<u8>, Value)>> {
    let mut p = Parser { s: input, at: 0 };
    p.skip(b" ");
    let mut members = Vec::new();
    while !p.done() {
        let key = p.key()?;
        let value = if p.eat(b'=') {
            if p.peek() == Some(b'(') {
                p.inner_list()?;
                Value::Other
            } else {
                p.bare_item()?
            }
        } else {
            Value::Boolean(true)
        };
        p.parameters()?;
        members.push((key, value));
        p.skip(b" \t");
        if p.done() {
            break;
        }
        if !p.eat(b',') {
            return None;
        }
        p.skip(b" \t");
        if p.done() {
            return None; // a trailing comma
        }
    }
    Some(members)
}

struct Parser<'a> {
    s: &'a [u8],
    at: usize,
}

impl<'a> Parser<'a> {
    fn done(&self) -> bool {
        self.at >= self.s.len()
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        self.at += usize::from(hit);
        hit
    }

    fn skip(&mut self, set: &[u8]) {
        while self.peek().is_some_and(|b| set.contains(&b)) {
            self.at += 1;
        }
    }

    fn take_while(&mut self, f: impl Fn(u8) -> bool) -> &'a [u8] {
        let start = self.at;
        while self.peek().is_some_and(&f) {
            self.at += 1;
        }
        let s: &'a [u8] = self.s;
        &s[start..self.at]
    }

    /// `key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )`
    fn key(&mut self) -> Option<Vec<u8>> {
        if !self.peek().is_some_and(|b| b.is_ascii_lowercase() || b == b'*') {
            return None;
        }
        Some(self.take_while(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-.*".contains(&b)).to_vec())
    }

    fn parameters(&mut self) -> Option<()> {
        while self.eat(b';') {
            self.skip(b" ");
            self.key()?;
            if self.eat(b'=') {
                self.bare_item()?;
            }
        }
        Some(())
    }

    fn inner_list(&mut self) -> Option<()> {
        self.eat(b'(');
        loop {
            self.skip(b" ");
            if self.eat(b')') {
                return self.parameters();
            }
            self.bare_item()?;
            self.parameters()?;
            if !matches!(self.peek(), Some(b' ' | b')')) {
                return None;
            }
        }
    }

    fn bare_item(&mut self) -> Option<Value> {
        match self.peek()? {
            b'-' | b'0'..=b'9' => self.number(),
            b'"' => self.string().map(|()| Value::Other),
            b'?' => {
                self.at += 1;
                let b = match self.peek()? {
                    b'1' => true,
                    b'0' => false,
                    _ => return None,
                };
                self.at += 1;
                Some(Value::Boolean(b))
            }
            b':' => {
                self.at += 1;
                self.take_while(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b));
                self.eat(b':').then_some(Value::Other)
            }
            b if b.is_ascii_alphabetic() || b == b'*' => {
                // tchar, ":" and "/"
                self.take_while(|b| b.is_ascii_graphic() && !b"\"(),;<=>?@[\\]{}".contains(&b));
                Some(Value::Other)
            }
            _ => None,
        }
    }

    /// sf-integer (at most 15 digits) or sf-decimal.
    fn number(&mut self) -> Option<Value> {
        let negative = self.eat(b'-');
        let whole = self.take_while(|b| b.is_ascii_digit());
        if whole.is_empty() || whole.len() > 15 {
            return None;
        }
        let n: i64 = std::str::from_utf8(whole).ok()?.parse().ok()?;
        if self.eat(b'.') {
            let fraction = self.take_while(|b| b.is_ascii_digit());
            if whole.len() > 12 || fraction.is_empty() || fraction.len() > 3 {
                return None;
            }
            return Some(Value::Other);
        }
        Some(Value::Integer(if negative { -n } else { n }))
    }

    fn string(&mut self) -> Option<()> {
        self.eat(b'"');
        loop {
            match self.peek()? {
                b'\\' => {
                    self.at += 1;
                    if !matches!(self.peek()?, b'"' | b'\\') {
                        return None;
                    }
                    self.at += 1;
                }
                b'"' => {
                    self.at += 1;
                    return Some(());
                }
                b if (0x20..0x7f).contains(&b) => self.at += 1,
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(value: &str) -> Option<Directives> {
        parse([value.as_bytes()].into_iter())
    }

    #[test]
    fn valid_dictionaries_give_directives() {
        let d = one("max-age=60, stale-while-revalidate=30;x=1, must-revalidate").expect("valid");
        assert_eq!((d.max_age, d.stale_while_revalidate, d.must_revalidate), (Some(60), Some(30), true));
        let d = one("no-store").expect("valid");
        assert!(d.no_store && d.max_age.is_none());
        let d = one("no-store=?0, private=\"set-cookie\", s-maxage=9999999999").expect("valid");
        assert!(!d.no_store && d.private);
        assert_eq!(d.s_maxage, Some(DELTA_MAX), "delta-seconds past 2^31 are 2^31");
        // Two field lines are one Dictionary.
        let d = parse([&b"max-age=5"[..], b"public"].into_iter()).expect("valid");
        assert_eq!((d.max_age, d.public), (Some(5), true));
    }

    #[test]
    fn wrongly_typed_directives_are_ignored_alone() {
        let d = one("max-age=\"60\", max-age=1.5, no-cache").expect("a valid Dictionary");
        assert_eq!(d.max_age, None);
        assert!(d.no_cache);
        assert_eq!(one("max-age=-5").expect("valid").max_age, None);
    }

    #[test]
    fn invalid_or_empty_fields_are_skipped_whole() {
        for text in ["", "  ", "Max-Age=60", "max-age=60,", "max-age=60;", "max-age=6 0", "max-age==6", "no_store, ,"] {
            assert_eq!(one(text), None, "{text:?}");
        }
        assert_eq!(parse(std::iter::empty()), None);
    }
}
