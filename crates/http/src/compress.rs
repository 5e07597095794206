//! The compression decision (phase 8): whether a response body is encoded
//! on its way to the client, with what, and the head edits that go with it.
//! Sans-io: the coders and the streaming relay are the engine's.
//!
//! Three steps, each its own function:
//! 1. [`Accepted::parse`] reads the request's `Accept-Encoding` while the
//! 1. [`Accepted::parse`] reads the request's `Accept-Encoding`, keeping only
//!    the q-values that matter.
//! 2. [`decide`] decides from the service's [`Compression`], the rules' `compress
//!    = false`, the request and the response head whether the body is encoded
//!    (or, with `decompress`, a gzip body decoded) and with what. Skipped:
//!    HEAD, statuses without a body, 206 and `Content-Range`, a response that
//!    already has a `Content-Encoding`, `Cache-Control: no-transform`, a
//!    type not in `types`, a `Content-Length` outside `min_size..=max_size`.
//!    A response of unknown length (chunked, until close) is compressed when
//!    its type matches: `max_size` cannot bound it without buffering.
//! 3. [`rewrite_head`] edits the rewritten response head: `Content-Length`
//!    goes (the new length is unknown until the end), `Transfer-Encoding:
//!    chunked` comes for an HTTP/1.1 client, `Content-Encoding` is set,
//!    `Accept-Encoding` is added to `Vary`, and a strong `ETag` is weakened
//!    (`W/`): the encoded bytes are not the origin's bytes, but they are
//!    semantically equivalent.

use switchyard_config::{Compression, Encoding};

use crate::parse::Field;

/// q-values of a request's `Accept-Encoding`, in thousandths: `None` for a
/// coding the field does not name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Accepted {
    /// The request had an `Accept-Encoding` field.
    pub present: bool,
    gzip: Option<u16>,
    br: Option<u16>,
    zstd: Option<u16>,
    identity: Option<u16>,
    any: Option<u16>,
}

impl Accepted {
    /// Reads every `Accept-Encoding` value of a request (RFC 9110 12.5.3).
    /// Unknown codings and malformed members are ignored; a member named
    /// twice keeps its last q-value.
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Accepted {
        let mut a = Accepted::default();
        for value in values {
            a.present = true;
            for member in value.split(|&b| b == b',') {
                let mut parts = member.split(|&b| b == b';');
                let coding = parts.next().unwrap_or(b"").trim_ascii();
                if coding.is_empty() {
                    continue;
                }
                let mut q = Some(1000);
                for param in parts {
                    let param = param.trim_ascii();
                    if param.len() >= 2 && param[..2].eq_ignore_ascii_case(b"q=") {
                        q = qvalue(param[2..].trim_ascii());
                    }
                }
                let Some(q) = q else { continue };
                let slot = match coding.to_ascii_lowercase().as_slice() {
                    b"gzip" | b"x-gzip" => &mut a.gzip,
                    b"br" => &mut a.br,
                    b"zstd" => &mut a.zstd,
                    b"identity" => &mut a.identity,
                    b"*" => &mut a.any,
                    _ => continue,
                };
                *slot = Some(q);
            }
        }
        a
    }

    /// The q-value of `algorithm`: named, or through `*`, or 0.
    pub fn q(&self, algorithm: Encoding) -> u16 {
        let named = match algorithm {
            Encoding::Gzip => self.gzip,
            Encoding::Brotli => self.br,
            Encoding::Zstd => self.zstd,
        };
        named.or(self.any).unwrap_or(0)
    }

    /// Whether the client refused the unencoded form (`identity;q=0`, or
    /// `*;q=0` without naming identity).
    pub fn refuses_identity(&self) -> bool {
        self.identity.or(self.any) == Some(0)
    }

    /// The algorithm to encode with: the highest q-value above 0, ties to
    /// the earliest in `preference`; `None` when the client accepts none, or
    /// names identity with a higher q-value than the best of them.
    pub fn choose(&self, preference: &[Encoding]) -> Option<Encoding> {
        let mut best: Option<(Encoding, u16)> = None;
        for &algorithm in preference {
            let q = self.q(algorithm);
            if q > 0 && best.is_none_or(|(_, b)| q > b) {
                best = Some((algorithm, q));
            }
        }
        let (algorithm, q) = best?;
        match self.identity {
            Some(identity) if identity > q => None,
            _ => Some(algorithm),
        }
    }
}

/// A q-value ("1", "0.5", "0.001"), in thousandths; `None` when malformed.
fn qvalue(text: &[u8]) -> Option<u16> {
    let (int, frac) = match text.iter().position(|&b| b == b'.') {
        Some(i) => (&text[..i], &text[i + 1..]),
        None => (text, &b""[..]),
    };
    if frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths = 0u16;
    for i in 0..3 {
        thousandths = thousandths * 10 + frac.get(i).map_or(0, |d| u16::from(d - b'0'));
    }
    match int {
        b"0" => Some(thousandths),
        b"1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// What happens to a response body on its way to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    /// Encode with the algorithm at the level.
    Encode(Encoding, u32),
    /// Decode a gzip body for a client that does not accept gzip (`decompress`).
    Gunzip,
}

/// What of a request's `Accept-Encoding` can change how [`decide`] treats a
/// response under `config`: the algorithm it would pick (or `identity`),
/// whether it refuses identity, and, with `decompress`, whether it takes gzip.
/// The cache keys its `Accept-Encoding` variants by this, so clients that
/// would get the same bytes share one stored variant (`br;q=1, gzip;q=0.5`
/// and `br` both get the `br` one).
pub fn variant_key<'a>(config: &Compression, values: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let accepted = Accepted::parse(values);
    let mut key = accepted.choose(&config.algorithms).map_or("identity", Encoding::token).as_bytes().to_vec();
    if accepted.refuses_identity() {
        key.extend_from_slice(b";no-identity");
    }
    if config.decompress && accepted.q(Encoding::Gzip) == 0 {
        key.extend_from_slice(b";no-gzip");
    }
    key
}

/// The facts of a request [`decide`] needs.
#[derive(Debug, Clone, Copy)]
pub struct RequestFacts {
    /// What the client accepts.
    pub accepted: Accepted,
    /// The request is a HEAD.
    pub head_method: bool,
    /// A matching rule said `compress = false`.
    pub switched_off: bool,
}

/// Why [`decide`] leaves a body as the server sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Nothing about the request would change that (no compression here, the
    /// type, the size, the status, an existing coding, `no-transform`...).
    Ineligible,
    /// Only because the client accepts none of the configured algorithms: the
    /// response still varies on `Accept-Encoding` ([`add_vary`]), or a shared
    /// cache would give this unencoded form to clients that get it encoded.
    NotAccepted,
}

/// Decides whether and how the response body is transformed, or why it is
/// left alone. `has_body` is false when the status or method means the
/// response has none; `length` is the server's `Content-Length`, when it
/// framed the body with one.
pub fn decide(
    config: Option<&Compression>,
    request: RequestFacts,
    status: u16,
    has_body: bool,
    length: Option<u64>,
    head: &[u8],
    fields: &[Field],
) -> Result<Coding, Skip> {
    let config = config.ok_or(Skip::Ineligible)?;
    if request.switched_off || request.head_method || !has_body || status < 200 || status == 206 || length == Some(0) {
        return Err(Skip::Ineligible);
    }
    let mut content_type: &[u8] = b"";
    let mut encoding: Option<&[u8]> = None;
    for f in fields {
        let name = &head[f.name.clone()];
        let value = &head[f.value.clone()];
        if name.eq_ignore_ascii_case(b"content-type") {
            content_type = value;
        } else if name.eq_ignore_ascii_case(b"content-encoding") {
            // Two fields mean two codings: never "just gzip".
            encoding = if encoding.is_some() { Some(b"?") } else { Some(value.trim_ascii()) };
        } else if name.eq_ignore_ascii_case(b"content-range")
            || (name.eq_ignore_ascii_case(b"cache-control")
                && value.split(|&b| b == b',').any(|d| d.trim_ascii().eq_ignore_ascii_case(b"no-transform")))
        {
            return Err(Skip::Ineligible);
        }
    }
    match encoding {
        Some(e) if e.eq_ignore_ascii_case(b"identity") => {}
        Some(e) => {
            let gunzip = config.decompress
                && (e.eq_ignore_ascii_case(b"gzip") || e.eq_ignore_ascii_case(b"x-gzip"))
                && request.accepted.q(Encoding::Gzip) == 0;
            return if gunzip { Ok(Coding::Gunzip) } else { Err(Skip::Ineligible) };
        }
        None => {}
    }
    // gRPC frames its messages and compresses them itself (`grpc-encoding`);
    // a coding over the whole stream would break every client. Never, even
    // when the configured types include `application/*`.
    if !config.matches_type(content_type) || is_grpc(content_type) {
        return Err(Skip::Ineligible);
    }
    if let Some(n) = length {
        // A client that refuses the unencoded form gets even a small body encoded.
        if (n < config.min_size && !request.accepted.refuses_identity()) || n > config.max_size {
            return Err(Skip::Ineligible);
        }
    }
    let algorithm = request.accepted.choose(&config.algorithms).ok_or(Skip::NotAccepted)?;
    Ok(Coding::Encode(algorithm, config.level(algorithm)))
}

/// `application/grpc`, `application/grpc+proto`, `application/grpc-web`...
fn is_grpc(content_type: &[u8]) -> bool {
    content_type.get(..16).is_some_and(|t| t.eq_ignore_ascii_case(b"application/grpc"))
}

/// Edits the response head in `out` (as [`crate::rewrite::response_head`]
/// wrote it) for a body sent with `coding`; `chunked` when the body goes to
/// the client in chunked coding.
pub fn rewrite_head(out: &mut Vec<u8>, coding: Coding, chunked: bool) {
    rewrite(out, Some(coding), chunked);
}

/// Adds `Accept-Encoding` to the `Vary` of the response head in `out`, for a
/// body left unencoded because of [`Skip::NotAccepted`]; nothing else changes.
pub fn add_vary(out: &mut Vec<u8>) {
    rewrite(out, None, false);
}

/// [`rewrite_head`] for `Some(coding)`; only the `Vary` merge for `None`.
fn rewrite(out: &mut Vec<u8>, coding: Option<Coding>, chunked: bool) {
    let head = std::mem::take(out);
    let mut vary: Vec<u8> = Vec::new();
    let mut lines = head.split(|&b| b == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    out.extend_from_slice(lines.next().unwrap_or(b"HTTP/1.1 200 OK"));
    out.extend_from_slice(b"\r\n");
    for line in lines.filter(|l| !l.is_empty()) {
        let colon = line.iter().position(|&b| b == b':').unwrap_or(line.len());
        let (name, value) = (&line[..colon], line.get(colon + 1..).unwrap_or(b"").trim_ascii());
        let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
        let coded = coding.is_some();
        if coded && (is(b"content-length") || is(b"transfer-encoding") || is(b"content-encoding")) {
            continue;
        }
        if is(b"vary") {
            if !value.is_empty() {
                if !vary.is_empty() {
                    vary.extend_from_slice(b", ");
                }
                vary.extend_from_slice(value);
            }
            continue;
        }
        if coded && is(b"etag") && value.starts_with(b"\"") {
            out.extend_from_slice(b"etag: W/");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
            continue;
        }
        out.extend_from_slice(line);
        out.extend_from_slice(b"\r\n");
    }
    let varies = vary.split(|&b| b == b',').map(<[u8]>::trim_ascii);
    let (star, listed) =
        varies.fold((false, false), |(s, l), v| (s || v == b"*", l || v.eq_ignore_ascii_case(b"accept-encoding")));
    if !star && !listed {
        if !vary.is_empty() {
            vary.extend_from_slice(b", ");
        }
        vary.extend_from_slice(b"Accept-Encoding");
    }
    out.extend_from_slice(b"vary: ");
    out.extend_from_slice(&vary);
    out.extend_from_slice(b"\r\n");
    if let Some(Coding::Encode(algorithm, _)) = coding {
        out.extend_from_slice(b"content-encoding: ");
        out.extend_from_slice(algorithm.token().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepted(value: &str) -> Accepted {
        Accepted::parse([value.as_bytes()])
    }

    const PREF: [Encoding; 3] = [Encoding::Zstd, Encoding::Brotli, Encoding::Gzip];

    #[test]
    fn negotiation_table() {
        use Encoding::*;
        let table: &[(&str, &[Encoding], Option<Encoding>)] = &[
            ("gzip", &PREF, Some(Gzip)),
            ("gzip, br", &PREF, Some(Brotli)),
            ("gzip, deflate, br, zstd", &PREF, Some(Zstd)),
            ("gzip, br, zstd", &[Gzip, Brotli], Some(Gzip)),
            ("br;q=0.5, gzip;q=0.8", &PREF, Some(Gzip)),
            ("br;q=1.0, gzip;q=0.8", &PREF, Some(Brotli)),
            ("GZIP;Q=0.5", &PREF, Some(Gzip)),
            ("gzip;q=0", &PREF, None),
            ("*", &PREF, Some(Zstd)),
            ("*;q=0.5, gzip", &PREF, Some(Gzip)),
            ("*, zstd;q=0", &PREF, Some(Brotli)),
            ("*;q=0", &PREF, None),
            ("identity", &PREF, None),
            ("deflate", &PREF, None),
            ("", &PREF, None),
            ("gzip;q=0.5, identity", &PREF, None),
            ("gzip;q=0.5, identity;q=0.5", &PREF, Some(Gzip)),
            ("gzip, identity;q=0", &PREF, Some(Gzip)),
            ("gzip;q=2", &PREF, None),
            ("gzip;q=0.0001", &PREF, None),
            ("x-gzip", &[Gzip], Some(Gzip)),
            (" zstd ; q=0.9 ,br;q=0.9", &[Brotli, Zstd], Some(Brotli)),
        ];
        for (value, pref, want) in table {
            assert_eq!(accepted(value).choose(pref), *want, "{value:?} {pref:?}");
        }
    }

    #[test]
    fn identity_refusal() {
        assert!(accepted("gzip, identity;q=0").refuses_identity());
        assert!(accepted("*;q=0, gzip").refuses_identity());
        assert!(!accepted("*;q=0, identity").refuses_identity());
        assert!(!accepted("gzip").refuses_identity());
        assert!(!Accepted::parse(std::iter::empty()).present);
        assert!(accepted("gzip").present);
    }

    #[test]
    fn qvalues() {
        assert_eq!(qvalue(b"1"), Some(1000));
        assert_eq!(qvalue(b"1.000"), Some(1000));
        assert_eq!(qvalue(b"0.5"), Some(500));
        assert_eq!(qvalue(b"0.123"), Some(123));
        assert_eq!(qvalue(b"0"), Some(0));
        for bad in [&b"1.5"[..], b"0.1234", b"x", b"", b"0.a", b"2"] {
            assert_eq!(qvalue(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    fn fields_of(head: &[u8]) -> Vec<Field> {
        let mut fields = Vec::new();
        crate::parse::parse_response(head, 64 * 1024, &mut fields).expect("valid").expect("complete");
        fields
    }

    fn plan_for(head: &str, accept: &str, config: &Compression) -> Option<Coding> {
        let request =
            RequestFacts { accepted: Accepted::parse([accept.as_bytes()]), head_method: false, switched_off: false };
        let fields = fields_of(head.as_bytes());
        let length = fields
            .iter()
            .find(|f| head.as_bytes()[f.name.clone()].eq_ignore_ascii_case(b"content-length"))
            .and_then(|f| std::str::from_utf8(&head.as_bytes()[f.value.clone()]).ok()?.parse().ok());
        let status = head[9..12].parse().expect("status");
        decide(Some(config), request, status, true, length, head.as_bytes(), &fields).ok()
    }

    #[test]
    fn plan_skips() {
        let c = Compression::default();
        let ok = "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: 1000\r\n";
        let gzip = Some(Coding::Encode(Encoding::Gzip, 1));
        assert_eq!(plan_for(&format!("{ok}\r\n"), "gzip", &c), gzip);
        assert_eq!(plan_for(&format!("{ok}\r\n"), "identity", &c), None);
        let table = [
            "content-encoding: br\r\n",
            "cache-control: public, no-transform\r\n",
            "content-range: bytes 0-999/2000\r\n",
        ];
        for extra in table {
            assert_eq!(plan_for(&format!("{ok}{extra}\r\n"), "gzip", &c), None, "{extra}");
        }
        let partial = "HTTP/1.1 206 Partial\r\ncontent-type: text/html\r\ncontent-length: 1000\r\n\r\n";
        assert_eq!(plan_for(partial, "gzip", &c), None);
        let image = "HTTP/1.1 200 OK\r\ncontent-type: image/png\r\ncontent-length: 1000\r\n\r\n";
        assert_eq!(plan_for(image, "gzip", &c), None);
        let small = "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 100\r\n\r\n";
        assert_eq!(plan_for(small, "gzip", &c), None);
        assert_eq!(plan_for(small, "gzip, identity;q=0", &c), gzip);
        let chunked = "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n";
        assert_eq!(plan_for(chunked, "gzip", &c), gzip);
        let prefix = Compression { types: vec!["text/*".into()], ..Compression::default() };
        let css = "HTTP/1.1 200 OK\r\ncontent-type: TEXT/CSS\r\ncontent-length: 1000\r\n\r\n";
        assert_eq!(plan_for(css, "gzip", &prefix), gzip);
        // gRPC compresses its own messages: never a coding over the stream.
        let any_app = Compression { types: vec!["application/*".into()], ..Compression::default() };
        for grpc in ["application/grpc", "application/grpc+proto", "Application/GRPC-web"] {
            let head = format!("HTTP/1.1 200 OK\r\ncontent-type: {grpc}\r\ntransfer-encoding: chunked\r\n\r\n");
            assert_eq!(plan_for(&head, "gzip", &any_app), None, "{grpc}");
        }
        let json = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
        assert_eq!(plan_for(json, "gzip", &any_app), gzip);
        let gzipped = "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-encoding: gzip\r\n\r\n";
        let decompress = Compression { decompress: true, ..Compression::default() };
        assert_eq!(plan_for(gzipped, "br", &decompress), Some(Coding::Gunzip));
        assert_eq!(plan_for(gzipped, "gzip", &decompress), None);
        assert_eq!(plan_for(gzipped, "br", &c), None);
    }

    #[test]
    fn head_rewrite() {
        let mut out = b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 1000\r\netag: \"abc\"\r\n\
                        vary: Origin\r\n\r\n"
            .to_vec();
        rewrite_head(&mut out, Coding::Encode(Encoding::Brotli, 4), true);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\netag: W/\"abc\"\r\nvary: Origin, Accept-Encoding\r\n\
             content-encoding: br\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        let mut out = b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\netag: W/\"x\"\r\nvary: accept-encoding\r\n\
                        transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
            .to_vec();
        rewrite_head(&mut out, Coding::Gunzip, false);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "HTTP/1.1 200 OK\r\netag: W/\"x\"\r\nconnection: close\r\nvary: accept-encoding\r\n\r\n"
        );
    }
}
