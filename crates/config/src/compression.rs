//! Response compression (`compression` on an http or https service): the
//! validated model and its validation.
//!
//! Every key is optional; `compression = true` (or an empty table) means the
//! defaults of [`Compression::default`], `compression = false` or no key means
//! off. Levels are checked against each library's own range, sizes read like
//! every other size key, and `types` entries are exact media types or
//! `type/*` prefixes, lower-cased here because the engine compares them
//! case-insensitively.

use crate::raw::*;
use crate::units::suggest;
use crate::validate::Ctx;

/// A content coding the proxy can produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// `gzip` (RFC 1952).
    Gzip,
    /// `br`, Brotli (RFC 7932).
    Brotli,
    /// `zstd`, Zstandard (RFC 8878).
    Zstd,
}

impl Encoding {
    /// Every algorithm, in the default preference order.
    pub const ALL: [Encoding; 3] = [Encoding::Zstd, Encoding::Brotli, Encoding::Gzip];

    /// The content-coding token (`Content-Encoding` and `Accept-Encoding`).
    pub fn token(self) -> &'static str {
        match self {
            Encoding::Gzip => "gzip",
            Encoding::Brotli => "br",
            Encoding::Zstd => "zstd",
        }
    }

    /// The levels the algorithm's library accepts.
    pub fn levels(self) -> std::ops::RangeInclusive<u32> {
        match self {
            Encoding::Gzip => 1..=9,
            Encoding::Brotli => 0..=11,
            Encoding::Zstd => 1..=22,
        }
    }
}

/// A service's response compression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compression {
    /// Algorithms the proxy may use, in its order of preference among those
    /// a client accepts with an equal q-value. Never empty.
    pub algorithms: Vec<Encoding>,
    /// Media types compressed, lower case: an exact type (`text/html`) or a
    /// prefix ending in `/*` (`text/*`). Parameters (`; charset=...`) of the
    /// response's type are ignored. Never empty.
    pub types: Vec<String>,
    /// Responses whose `Content-Length` is below this are sent as they are.
    pub min_size: u64,
    /// Responses whose `Content-Length` is above this are sent as they are
    /// (a response of unknown length is not bounded by it).
    pub max_size: u64,
    /// gzip level, 1..=9.
    pub gzip_level: u32,
    /// Brotli quality, 0..=11.
    pub brotli_level: u32,
    /// Zstandard level, 1..=22.
    pub zstd_level: u32,
    /// Decode a gzip response for a client that does not accept gzip.
    pub decompress: bool,
}

impl Default for Compression {
    fn default() -> Self {
        Compression {
            algorithms: Encoding::ALL.to_vec(),
            types: [
                "text/html",
                "text/css",
                "text/plain",
                "text/javascript",
                "application/javascript",
                "application/json",
                "application/xml",
                "image/svg+xml",
            ]
            .map(String::from)
            .to_vec(),
            min_size: 256,
            max_size: 16 * 1024 * 1024,
            gzip_level: 1,
            brotli_level: 4,
            zstd_level: 3,
            decompress: false,
        }
    }
}

impl Compression {
    /// The configured level of `algorithm`.
    pub fn level(&self, algorithm: Encoding) -> u32 {
        match algorithm {
            Encoding::Gzip => self.gzip_level,
            Encoding::Brotli => self.brotli_level,
            Encoding::Zstd => self.zstd_level,
        }
    }

    /// Whether a response of `content_type` (a `Content-Type` value,
    /// parameters allowed) is to be compressed.
    pub fn matches_type(&self, content_type: &[u8]) -> bool {
        let essence = content_type.split(|&b| b == b';').next().unwrap_or(b"");
        let essence = essence.trim_ascii();
        self.types.iter().any(|t| match t.strip_suffix('*') {
            Some(prefix) => {
                essence.len() >= prefix.len() && essence[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
            }
            None => essence.eq_ignore_ascii_case(t.as_bytes()),
        })
    }
}

/// Names accepted in `algorithms`; `brotli` is an alias of `br`.
const ALGORITHM_NAMES: &[&str] = &["gzip", "br", "zstd", "brotli"];

/// Validates a service's `compression`; `None` for `compression = false`.
pub(crate) fn validate_compression(cx: &mut Ctx<'_, '_>, raw: &RawCompression) -> Option<Compression> {
    if raw.enabled.as_ref().is_some_and(|e| !*e.get_ref()) {
        return None;
    }
    let d = Compression::default();
    let algorithms = match &raw.algorithms {
        None => d.algorithms.clone(),
        Some(list) => {
            let mut out = Vec::new();
            for item in list.get_ref() {
                let algorithm = match item.get_ref().to_ascii_lowercase().as_str() {
                    "gzip" => Encoding::Gzip,
                    "br" | "brotli" => Encoding::Brotli,
                    "zstd" => Encoding::Zstd,
                    other => {
                        let hint = match other {
                            "deflate" | "compress" | "x-gzip" => {
                                "supported algorithms are gzip, br and zstd".to_string()
                            }
                            _ => suggest(other, ALGORITHM_NAMES, "supported algorithms are"),
                        };
                        cx.r.error_hint(&item.span(), format!("unknown compression algorithm `{other}`"), hint);
                        continue;
                    }
                };
                if out.contains(&algorithm) {
                    cx.r.warning(
                        &item.span(),
                        format!("`{}` is listed twice in `algorithms`", algorithm.token()),
                        None,
                    );
                    continue;
                }
                out.push(algorithm);
            }
            if list.get_ref().is_empty() {
                cx.r.error_hint(
                    &list.span(),
                    "`algorithms` is empty: nothing would be compressed",
                    "list at least one of \"zstd\", \"br\", \"gzip\", or write compression = false",
                );
            }
            out
        }
    };
    let types = match &raw.types {
        None => d.types.clone(),
        Some(list) => {
            if list.get_ref().is_empty() {
                cx.r.error_hint(
                    &list.span(),
                    "`types` is empty: nothing would be compressed",
                    "list media types such as \"text/html\" or \"text/*\", or write compression = false",
                );
            }
            let mut out = Vec::new();
            for item in list.get_ref() {
                let t = item.get_ref().trim().to_ascii_lowercase();
                let valid = match t.split_once('/') {
                    Some((kind, sub)) => {
                        !kind.is_empty() && !sub.is_empty() && !t.contains(';') && !t.contains(char::is_whitespace)
                    }
                    None => false,
                };
                if !valid || (t.contains('*') && !t.ends_with("/*")) {
                    cx.r.error_hint(
                        &item.span(),
                        format!("`{}` in `types` is not a media type", item.get_ref()),
                        "write a type such as \"text/html\", or a prefix such as \"text/*\" (no parameters)",
                    );
                    continue;
                }
                out.push(t);
            }
            out
        }
    };
    let min_size = raw.min_size.as_ref().and_then(|v| cx.size("min_size", v)).unwrap_or(d.min_size);
    let max_size = raw.max_size.as_ref().and_then(|v| cx.size("max_size", v)).unwrap_or(d.max_size);
    if min_size > max_size {
        let span = raw.max_size.as_ref().or(raw.min_size.as_ref()).map(|v| v.span()).unwrap_or_default();
        cx.r.error_hint(
            &span,
            format!("`min_size` ({min_size} bytes) is larger than `max_size` ({max_size} bytes)"),
            "nothing would be compressed; lower min_size or raise max_size",
        );
    }
    let mut level = |key: &str, value: &Option<S<i64>>, algorithm: Encoding| {
        let range = algorithm.levels();
        let wide = i64::from(*range.start())..=i64::from(*range.end());
        value
            .as_ref()
            .and_then(|v| cx.int_in(key, v, wide))
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(d.level(algorithm))
    };
    let gzip_level = level("gzip_level", &raw.gzip_level, Encoding::Gzip);
    let brotli_level = level("brotli_level", &raw.brotli_level, Encoding::Brotli);
    let zstd_level = level("zstd_level", &raw.zstd_level, Encoding::Zstd);
    let decompress = raw.decompress.as_ref().is_some_and(|v| *v.get_ref());
    Some(Compression { algorithms, types, min_size, max_size, gzip_level, brotli_level, zstd_level, decompress })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn service(extra: &str) -> Option<Compression> {
        let text = format!(
            "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:8080\"\npool = \"main\"\n{extra}\n\
             [[pool]]\nname = \"main\"\nservers = [ {{ address = \"127.0.0.1:9001\" }} ]\n"
        );
        crate::parse(&text, "test.toml").unwrap().services[0].compression.clone()
    }

    #[test]
    fn flags_tables_and_defaults() {
        assert_eq!(service(""), None);
        assert_eq!(service("compression = false"), None);
        assert_eq!(service("compression = true"), Some(Compression::default()));
        assert_eq!(service("compression = {}"), Some(Compression::default()));
        let c = service(
            "compression = { algorithms = [\"gzip\", \"brotli\"], types = [\"Text/*\"], min_size = \"1KiB\", \
             max_size = 5000, gzip_level = 9, brotli_level = 0, zstd_level = 22, decompress = true }",
        )
        .unwrap();
        assert_eq!(c.algorithms, [Encoding::Gzip, Encoding::Brotli]);
        assert_eq!(c.types, ["text/*"]);
        assert_eq!((c.min_size, c.max_size), (1024, 5000));
        assert_eq!((c.gzip_level, c.brotli_level, c.zstd_level, c.decompress), (9, 0, 22, true));
    }

    #[test]
    fn types_match_exactly_or_by_prefix_ignoring_parameters() {
        let c = Compression { types: vec!["text/*".into(), "application/json".into()], ..Compression::default() };
        for yes in [&b"text/html"[..], b"TEXT/CSS; charset=utf-8", b"application/json", b" application/json ;x=1"] {
            assert!(c.matches_type(yes), "{}", String::from_utf8_lossy(yes));
        }
        for no in [&b"application/jsonx"[..], b"image/png", b"", b"textual/html", b"application/json-seq"] {
            assert!(!c.matches_type(no), "{}", String::from_utf8_lossy(no));
        }
    }
}
