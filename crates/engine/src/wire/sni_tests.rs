//! Real ClientHellos from rustls (whole, cut, fragmented, mutated), tables of
//! hand-built broken ones, and property tests over arbitrary bytes.

use std::sync::Arc;

use super::*;
use proptest::prelude::*;

/// The first flight of a rustls client connecting to `name` with ALPN h2 and http/1.1.
fn rustls_hello(name: &str) -> Vec<u8> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let server = rustls::pki_types::ServerName::try_from(name.to_owned()).expect("server name");
    let mut conn = rustls::ClientConnection::new(Arc::new(config), server).expect("client connection");
    let mut out = Vec::new();
    for _ in 0..4 {
        if !conn.wants_write() {
            break;
        }
        conn.write_tls(&mut out).expect("write to a Vec");
    }
    out
}

fn hello_info(buf: &[u8]) -> ClientHelloInfo {
    match peek(buf) {
        Peek::Hello(info) => info,
        other => panic!("{other:?}"),
    }
}

fn vec16(b: &[u8]) -> Vec<u8> {
    [&u16::try_from(b.len()).expect("short").to_be_bytes()[..], b].concat()
}

fn record(kind: u8, body: &[u8]) -> Vec<u8> {
    [&[kind, 3, 1][..], &vec16(body)].concat()
}

fn handshake(kind: u8, body: &[u8]) -> Vec<u8> {
    let len = u32::try_from(body.len()).expect("short").to_be_bytes();
    [&[kind, len[1], len[2], len[3]][..], body].concat()
}

/// A ClientHello body up to and including the compression methods.
fn hello_base() -> Vec<u8> {
    [&[3, 3][..], &[7; 32], &[0], &[0, 2, 0x13, 0x01], &[1, 0]].concat()
}

/// A whole record holding a ClientHello with these extensions.
fn with_exts(exts: &[Vec<u8>]) -> Vec<u8> {
    let body = [hello_base(), vec16(&exts.concat())].concat();
    record(HANDSHAKE, &handshake(CLIENT_HELLO, &body))
}

fn ext(kind: u16, data: &[u8]) -> Vec<u8> {
    [&kind.to_be_bytes()[..], &vec16(data)].concat()
}

fn sni_ext(name: &[u8]) -> Vec<u8> {
    ext(EXT_SERVER_NAME, &vec16(&[&[0][..], &vec16(name)].concat()))
}

#[test]
fn a_rustls_hello_yields_its_name_alpn_and_versions() {
    let bytes = rustls_hello("Switchyard.Example.COM");
    let info = hello_info(&bytes);
    assert_eq!(info.sni.as_deref(), Some("switchyard.example.com"));
    assert_eq!(info.alpn, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
    assert_eq!(info.legacy_version, 0x0303);
    assert!(info.supported_versions.contains(&0x0304) && info.supported_versions.contains(&0x0303));
    // Whatever follows the hello (more records, early data) does not matter.
    let mut more = bytes.clone();
    more.extend_from_slice(&record(20, &[1]));
    assert_eq!(hello_info(&more), info);
}

#[test]
fn an_ip_address_target_sends_no_server_name() {
    let info = hello_info(&rustls_hello("192.0.2.1"));
    assert_eq!(info.sni, None);
    assert_eq!(info.alpn.len(), 2);
}

#[test]
fn every_cut_of_a_hello_needs_more() {
    let bytes = rustls_hello("example.com");
    for end in 0..bytes.len() {
        assert_eq!(peek(&bytes[..end]), Peek::NeedMore, "cut at {end}");
    }
}

#[test]
fn a_hello_fragmented_over_records_reads_the_same() {
    let bytes = rustls_hello("example.com");
    let expected = hello_info(&bytes);
    let message = &bytes[RECORD_HEADER..];
    assert_eq!(usize::from(u16::from_be_bytes([bytes[3], bytes[4]])), message.len(), "one record");
    for split in 1..message.len() {
        let two = [record(HANDSHAKE, &message[..split]), record(HANDSHAKE, &message[split..])].concat();
        assert_eq!(hello_info(&two), expected, "split at {split}");
    }
    // Three records, the handshake header itself cut; every prefix still needs more.
    let three =
        [record(HANDSHAKE, &message[..2]), record(HANDSHAKE, &message[2..100]), record(HANDSHAKE, &message[100..])]
            .concat();
    assert_eq!(hello_info(&three), expected);
    for end in 0..three.len() {
        assert_eq!(peek(&three[..end]), Peek::NeedMore, "cut at {end}");
    }
}

#[test]
fn record_and_handshake_limits() {
    let body = [hello_base(), vec16(&[])].concat();
    let message = handshake(CLIENT_HELLO, &body);
    // Sixteen one-byte records and still no hello: refused, not waited for.
    let tiny: Vec<u8> = message.iter().flat_map(|b| record(HANDSHAKE, &[*b])).collect();
    assert_eq!(peek(&tiny[..6 * (MAX_RECORDS - 1)]), Peek::NeedMore);
    assert_eq!(peek(&tiny), Peek::Malformed("ClientHello spread over too many records"));
    // A 16 KiB hello (padding extension) fits; one byte more does not.
    let pad = |n: usize| with_exts(&[ext(21, &vec![0; n])]);
    let exact = pad(MAX_HELLO_LEN - 4 - body.len() - 4);
    assert_eq!(exact.len(), RECORD_HEADER + MAX_HELLO_LEN);
    assert_eq!(hello_info(&exact).sni, None);
    // (One byte more would not fit in one record either, so send its start in a record of its own.)
    let over = pad(MAX_HELLO_LEN - 4 - body.len() - 3);
    let first = record(HANDSHAKE, &over[RECORD_HEADER..RECORD_HEADER + 100]);
    assert_eq!(peek(&first), Peek::Malformed("ClientHello larger than 16 KiB"));
    assert_eq!(peek(&over), Peek::Malformed("record longer than 16 KiB"));
    // A record may announce more than the hello needs: the hello is read as soon as it is there.
    let mut long = record(HANDSHAKE, &message);
    long[3..5].copy_from_slice(&u16::try_from(message.len() + 50).expect("short").to_be_bytes());
    assert_eq!(hello_info(&long).legacy_version, 0x0303);
}

#[test]
fn not_tls_and_early_bytes() {
    let not_tls: &[&[u8]] =
        &[b"GET / HTTP/1.1\r\n", b"\x80\x2e\x01\x03\x01", b"\x16\x02", b"\x16\x03\x05", b"\x17\x03\x03\x00\x01"];
    for bytes in not_tls {
        assert_eq!(peek(bytes), Peek::NotTls, "{bytes:?}");
    }
    let need_more: &[&[u8]] =
        &[b"", b"\x16", b"\x16\x03", b"\x16\x03\x01", b"\x16\x03\x01\x00", b"\x16\x03\x01\x00\x10\x01"];
    for bytes in need_more {
        assert_eq!(peek(bytes), Peek::NeedMore, "{bytes:?}");
    }
}

#[test]
fn broken_records_and_hellos_are_malformed_with_a_reason() {
    let base = hello_base();
    let msg = |body: &[u8]| record(HANDSHAKE, &handshake(CLIENT_HELLO, body));
    let good = handshake(CLIENT_HELLO, &[base.clone(), vec16(&[])].concat());
    let table: Vec<(Vec<u8>, &str)> = vec![
        (vec![22, 3, 1, 0, 0], "empty handshake record"),
        (vec![22, 3, 1, 0x40, 0x01, 1], "record longer than 16 KiB"),
        (record(HANDSHAKE, &handshake(2, &base)), "first handshake message is not a ClientHello"),
        (
            [record(HANDSHAKE, &good[..10]), record(21, &good[10..])].concat(),
            "ClientHello interrupted by a non-handshake record",
        ),
        ([record(HANDSHAKE, &good[..10]), vec![22, 3, 9]].concat(), "record version is not TLS"),
        ([record(HANDSHAKE, &good[..10]), vec![22, 3, 1, 0, 0]].concat(), "empty handshake record"),
        (msg(&[3]), "truncated ClientHello version"),
        (msg(&[&[2, 0][..], &base[2..]].concat()), "ClientHello version is not TLS"),
        (msg(&[3, 3, 7, 7]), "truncated ClientHello random"),
        (msg(&base[..34]), "truncated session id"),
        (msg(&[&base[..34], &[33], &[0; 33], &base[35..]].concat()), "session id longer than 32 bytes"),
        (msg(&[&base[..35], &[0, 0], &[1, 0]].concat()), "cipher suites length is zero or odd"),
        (msg(&[&base[..35], &[0, 3, 1, 2, 3], &[1, 0]].concat()), "cipher suites length is zero or odd"),
        (msg(&[&base[..35], &[0, 4, 1, 2]].concat()), "truncated cipher suites"),
        (msg(&base[..39]), "truncated compression methods"),
        (msg(&[&base[..39], &[0]].concat()), "no compression method"),
        (msg(&[&base[..], &[0]].concat()), "extensions overrun the ClientHello"),
        (msg(&[&base[..], &[0, 5, 0]].concat()), "extensions overrun the ClientHello"),
        (msg(&[&base[..], &[0, 0, 9]].concat()), "bytes after the extensions"),
        (msg(&[&base[..], &vec16(&[0])].concat()), "truncated extension header"),
        (msg(&[&base[..], &vec16(&[0, 16, 0, 9, 1])].concat()), "extension overruns the extensions block"),
        (with_exts(&[ext(0xff01, &[]), ext(0xff01, &[])]), "duplicate extension"),
        (with_exts(&[sni_ext(b"a.example"), sni_ext(b"b.example")]), "duplicate extension"),
        (with_exts(&[ext(EXT_SERVER_NAME, &[])]), "server name list overruns its extension"),
        (with_exts(&[ext(EXT_SERVER_NAME, &vec16(&[]))]), "server name list is empty or not alone in its extension"),
        (
            with_exts(&[ext(EXT_SERVER_NAME, &[vec16(&[0, 0, 1, b'a']), vec![0]].concat())]),
            "server name list is empty or not alone in its extension",
        ),
        (with_exts(&[ext(EXT_SERVER_NAME, &vec16(&[1, 0, 1, b'a']))]), "unknown server name type"),
        (with_exts(&[ext(EXT_SERVER_NAME, &vec16(&[0, 0, 5, b'a']))]), "host name overruns the server name list"),
        (with_exts(&[ext(EXT_SERVER_NAME, &vec16(&[0, 0, 1, b'a', 0, 0, 1, b'b']))]), "more than one host name"),
        (with_exts(&[ext(EXT_ALPN, &[0])]), "ALPN list overruns its extension"),
        (with_exts(&[ext(EXT_ALPN, &vec16(&[]))]), "ALPN list is empty or not alone in its extension"),
        (with_exts(&[ext(EXT_ALPN, &vec16(&[0]))]), "empty ALPN name"),
        (with_exts(&[ext(EXT_ALPN, &vec16(&[3, b'h', b'2']))]), "ALPN name overruns the list"),
        (with_exts(&[ext(EXT_SUPPORTED_VERSIONS, &[4, 3, 4])]), "supported versions overrun their extension"),
        (
            with_exts(&[ext(EXT_SUPPORTED_VERSIONS, &[3, 3, 4, 3])]),
            "supported versions list is empty, odd or not alone in its extension",
        ),
        (
            with_exts(&[ext(EXT_SUPPORTED_VERSIONS, &[0])]),
            "supported versions list is empty, odd or not alone in its extension",
        ),
    ];
    for (bytes, why) in table {
        assert_eq!(peek(&bytes), Peek::Malformed(why), "{bytes:?}");
    }
}

#[test]
fn server_names_are_validated_and_lower_cased() {
    let long_label = [b'a'; 64];
    let max_name = [[b'a'; 63].as_slice(), b".", &[b'b'; 63], b".", &[b'c'; 63], b".", &[b'd'; 61]].concat();
    assert_eq!(max_name.len(), 253);
    let too_long = [&max_name[..], b"e"].concat();
    let invalid: &[&[u8]] = &[
        b"",
        b"under_score.example",
        b"trailing.dot.",
        b".leading",
        b"double..dot",
        &long_label,
        &too_long,
        b"caf\xc3\xa9.example",
        b"sp ace",
        b"*.example",
    ];
    for name in invalid {
        assert_eq!(
            peek(&with_exts(&[sni_ext(name)])),
            Peek::Malformed("host name is not a valid DNS name"),
            "{name:?}"
        );
    }
    let valid: &[(&[u8], &str)] = &[
        (b"EXAMPLE.com", "example.com"),
        (b"x-1.a-b.c0", "x-1.a-b.c0"),
        (b"localhost", "localhost"),
        (b"1.2.3.4", "1.2.3.4"),
    ];
    for (name, lower) in valid {
        assert_eq!(hello_info(&with_exts(&[sni_ext(name)])).sni.as_deref(), Some(*lower));
    }
    assert_eq!(hello_info(&with_exts(&[sni_ext(&max_name)])).sni.map(|s| s.len()), Some(253));
    // A TLS 1.2-style hello without any extension.
    let bare = record(HANDSHAKE, &handshake(CLIENT_HELLO, &hello_base()));
    assert_eq!(hello_info(&bare), ClientHelloInfo { legacy_version: 0x0303, ..ClientHelloInfo::default() });
}

#[test]
fn wildcards_match_exactly_one_label() {
    let table = [
        ("example.com", "example.com", true),
        ("example.com", "EXAMPLE.Com", true),
        ("Example.COM", "example.com", true),
        ("example.com", "www.example.com", false),
        ("*.example.com", "www.example.com", true),
        ("*.example.com", "WWW.EXAMPLE.COM", true),
        ("*.example.com", "example.com", false),
        ("*.example.com", ".example.com", false),
        ("*.example.com", "a.b.example.com", false),
        ("*.example.com", "wwwexample.com", false),
        ("*.example.com", "www.example.org", false),
        ("*.", "a.", false),
        ("*", "a", false),
        ("*", "*", true),
        ("a.*.com", "a.b.com", false),
        ("*.example.com", "é.example.com", true),
        ("*.é.com", "x.É.com", false),
    ];
    for (pattern, name, expected) in table {
        assert_eq!(sni_matches(pattern, name), expected, "{pattern} vs {name}");
    }
}

/// Properties every verdict keeps, whatever the input.
fn check_verdict(buf: &[u8]) -> Result<(), TestCaseError> {
    match peek(buf) {
        Peek::Hello(info) => {
            if let Some(name) = info.sni {
                prop_assert!(name.len() <= 253 && !name.is_empty());
                prop_assert!(name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.".contains(&b)));
            }
            prop_assert!(info.alpn.iter().all(|p| !p.is_empty()));
        }
        Peek::NeedMore => prop_assert!(buf.len() < MAX_PEEK_LEN),
        Peek::NotTls => prop_assert!(
            buf.first() != Some(&HANDSHAKE)
                || buf.get(1).is_some_and(|&b| b != 3)
                || buf.get(2).is_some_and(|&b| b > 4)
        ),
        Peek::Malformed(why) => prop_assert!(!why.is_empty()),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(
        prefix in prop_oneof![Just(&b""[..]), Just(&b"\x16\x03\x01"[..]), Just(&b"\x16\x03\x03\x02\x00\x01\x00\x01\xfc\x03\x03"[..])],
        tail in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        check_verdict(&[prefix, &tail].concat())?;
    }

    #[test]
    fn mutated_real_hellos_never_panic(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
        fragment_at in any::<prop::sample::Index>(),
    ) {
        let mut bytes = real_hello().to_vec();
        for (at, value) in edits {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        check_verdict(&bytes)?;
        check_verdict(&bytes[..cut.index(bytes.len() + 1)])?;
        // The same damage fragmented over two records.
        let message = &bytes[RECORD_HEADER..];
        let split = fragment_at.index(message.len() - 1) + 1;
        check_verdict(&[record(HANDSHAKE, &message[..split]), record(HANDSHAKE, &message[split..])].concat())?;
    }
}

/// One rustls hello shared by the property cases (building a client per case is slow).
fn real_hello() -> &'static [u8] {
    static HELLO: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    HELLO.get_or_init(|| rustls_hello("mutate.example.com"))
}
