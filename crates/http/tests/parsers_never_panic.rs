//! Property tests: any bytes given to the HTTP parsers yield a result or an
//! error, never a panic, and chunked scanning does not depend on how the
//! bytes were split across reads. The cache policy's field parsers (targeted
//! fields, `Range`, dates, `Age`, `Vary` values) take any bytes too, and
//! the ranges they return lie within the representation.

use proptest::prelude::*;
use switchyard_http::cache_policy::{self, date, range, targeted};
use switchyard_http::chunked::ChunkedScanner;
use switchyard_http::parse::{parse_request, parse_response, HeadLimits};

fn head_like() -> impl Strategy<Value = Vec<u8>> {
    // Mostly plausible heads with random corruption, plus raw noise.
    let plausible = (
        prop::sample::select(vec!["GET", "POST", "HEAD", "PUT", "X", ""]),
        "[ -~]{0,20}",
        prop::collection::vec(("[a-zA-Z-]{0,12}", "[ -~\t\r\n]{0,20}"), 0..8),
        prop::sample::select(vec!["\r\n\r\n", "\r\n", "\n\n", ""]),
    )
        .prop_map(|(m, t, hs, end)| {
            let mut v = format!("{m} {t} HTTP/1.1\r\n").into_bytes();
            for (n, val) in hs {
                v.extend_from_slice(format!("{n}: {val}\r\n").as_bytes());
            }
            v.extend_from_slice(end.as_bytes());
            v
        });
    prop_oneof![plausible, prop::collection::vec(any::<u8>(), 0..300)]
}

fn chunked_like() -> impl Strategy<Value = Vec<u8>> {
    let chunk = (0usize..40, "[0-9a-fA-F;= xz]{0,4}", prop::sample::select(vec!["\r\n", "\n", "\r", ""]));
    prop::collection::vec(chunk, 0..6).prop_map(|chunks| {
        let mut v = Vec::new();
        for (len, ext, eol) in chunks {
            v.extend_from_slice(format!("{len:x}{ext}{eol}").as_bytes());
            v.extend(std::iter::repeat_n(b'a', len));
            v.extend_from_slice(eol.as_bytes());
        }
        v.extend_from_slice(b"0\r\n\r\n");
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn request_parser_never_panics(bytes in head_like(), max_fields in 1usize..200) {
        let mut fields = Vec::new();
        let limits = HeadLimits { max_bytes: 256, max_fields };
        if let Ok(Some(head)) = parse_request(&bytes, limits, &mut fields) {
            prop_assert!(head.len <= bytes.len());
            for f in &fields {
                prop_assert!(f.name.end <= head.len && f.value.end <= head.len);
            }
        }
    }

    #[test]
    fn response_parser_never_panics(bytes in head_like()) {
        let mut fields = Vec::new();
        let _ = parse_response(&bytes, 256, &mut fields);
    }

    #[test]
    fn chunked_scan_is_split_invariant(body in prop_oneof![chunked_like(), prop::collection::vec(any::<u8>(), 0..200)], cut in any::<prop::sample::Index>()) {
        let whole = {
            let mut s = ChunkedScanner::new();
            s.scan(&body).map(|n| (n, s.is_done()))
        };
        let split = {
            let at = cut.index(body.len() + 1);
            let mut s = ChunkedScanner::new();
            s.scan(&body[..at]).and_then(|a| {
                if s.is_done() { Ok((a, true)) } else { s.scan(&body[at..]).map(|b| (a + b, s.is_done())) }
            })
        };
        prop_assert_eq!(whole.is_ok(), split.is_ok());
        if let (Ok(w), Ok(s)) = (whole, split) {
            prop_assert_eq!(w, s);
        }
    }

    #[test]
    fn cache_field_parsers_never_panic(
        value in prop_oneof![
            "[a-z0-9=,;?\"*:() -]{0,40}".prop_map(String::into_bytes),
            "bytes=[0-9,-]{0,30}".prop_map(String::into_bytes),
            prop::collection::vec(any::<u8>(), 0..60),
        ],
        len in 0u64..5000,
    ) {
        let _ = targeted::parse([value.as_slice()].into_iter());
        let _ = date::parse(&value, std::time::SystemTime::now());
        let _ = cache_policy::delta_seconds(&value);
        let _ = cache_policy::selecting_value("accept-language", [value.as_slice()].into_iter());
        let _ = range::if_range_holds(&value, Some(&value), Some(&value), Some(&value), std::time::SystemTime::now());
        if let range::Ranges::Parts(parts) = range::evaluate(&value, len) {
            prop_assert!(!parts.is_empty() && parts.len() <= range::MAX_RANGES);
            for r in parts {
                prop_assert!(r.start() <= r.end() && *r.end() < len);
            }
        }
    }
}

/// Frames of any type, flags and stream with small random payloads (HPACK
/// blocks among them, mostly valid), after a valid preface and SETTINGS.
fn h2_like() -> impl Strategy<Value = Vec<u8>> {
    let frame = (
        0u8..11,
        any::<u8>(),
        prop::sample::select(vec![0u32, 1, 2, 3, 5, 0x7fff_ffff]),
        prop::collection::vec(any::<u8>(), 0..40),
    );
    let request = Just(vec![0x82u8, 0x86, 0x84, 0x41, 0x01, b'x']);
    let frames = prop::collection::vec(
        prop_oneof![frame.prop_map(|(k, f, s, p)| (k, f, s, p)), request.prop_map(|b| (1u8, 0x4u8, 1u32, b)),],
        0..12,
    );
    frames.prop_map(|frames| {
        let mut v = switchyard_http::http2::server::PREFACE.to_vec();
        v.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        for (kind, flags, stream, payload) in frames {
            let len = u32::try_from(payload.len()).unwrap_or(0).to_be_bytes();
            v.extend_from_slice(&[len[1], len[2], len[3], kind, flags]);
            v.extend_from_slice(&stream.to_be_bytes());
            v.extend_from_slice(&payload);
        }
        v
    })
}

proptest! {
    #[test]
    fn the_http2_server_takes_any_frames(bytes in h2_like(), split in 1usize..64) {
        use switchyard_http::http2::server::{Config, Server};
        let cfg = Config { max_streams: 2, max_header_list: 256, stream_window: 100, connection_window: 200 };
        let mut s = Server::new(cfg);
        let mut pending = Vec::new();
        for piece in bytes.chunks(split) {
            pending.extend_from_slice(piece);
            match s.recv(&pending, &mut |_| {}) {
                Ok(n) => { pending.drain(..n); }
                Err(_) => break,
            }
            let _ = s.send_head(1, 200, [(&b"x"[..], &b"y"[..])], false);
            let _ = s.send_data(1, b"body", false);
            s.release(1, 4);
            let out = s.output().len();
            s.written(out);
        }
    }
}
