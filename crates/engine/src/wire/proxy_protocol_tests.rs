//! Tables of valid and invalid headers for both versions, prefixes, round
//! trips and a property test over arbitrary bytes.

use super::*;
use proptest::prelude::*;

/// The v2 signature as a slice, for strategies.
const SIG: &[u8] = &V2_SIGNATURE;

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// A v2 header from its version/command and family bytes and its payload.
fn v2(ver_cmd: u8, family: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = V2_SIGNATURE.to_vec();
    out.extend_from_slice(&[ver_cmd, family]);
    out.extend_from_slice(&u16::try_from(payload.len()).expect("short payload").to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// An AF_INET address block: 1.2.3.4:80 -> 5.6.7.8:443.
const INET_BLOCK: [u8; 12] = [1, 2, 3, 4, 5, 6, 7, 8, 0, 80, 1, 187];

fn inet6_block() -> Vec<u8> {
    let mut b = Ipv6Addr::LOCALHOST.octets().to_vec();
    b.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().expect("ip").octets());
    b.extend_from_slice(&[0x12, 0x34, 0xff, 0xff]);
    b
}

fn header(version: Version, src: Option<&str>, dst: Option<&str>, tlvs: Vec<(u8, Vec<u8>)>) -> Header {
    let transport = if src.is_some() { Transport::Stream } else { Transport::Unspec };
    Header { version, command: Command::Proxy, transport, source: src.map(sa), destination: dst.map(sa), tlvs }
}

fn complete(buf: &[u8]) -> (Header, usize) {
    match parse(buf) {
        Ok(Parsed::Complete { header, len }) => (header, len),
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
    }
}

fn valid_headers() -> Vec<(Vec<u8>, Header)> {
    let v4 = |s, d| header(Version::V1, Some(s), Some(d), vec![]);
    let unknown = header(Version::V1, None, None, vec![]);
    let mut unix = vec![0u8; 216];
    unix.extend_from_slice(&[0x05, 0, 2, b'i', b'd']);
    let mut inet_tlv = INET_BLOCK.to_vec();
    inet_tlv.extend_from_slice(&[tlv::ALPN, 0, 2, b'h', b'2', tlv::NOOP, 0, 0]);
    let local = Header { command: Command::Local, ..header(Version::V2, None, None, vec![]) };
    vec![
        (b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n".to_vec(), v4("192.168.0.1:56324", "192.168.0.11:443")),
        (b"PROXY TCP4 0.0.0.0 255.255.255.255 0 65535\r\n".to_vec(), v4("0.0.0.0:0", "255.255.255.255:65535")),
        (
            b"PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n"
                .to_vec(),
            header(
                Version::V1,
                Some("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"),
                Some("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"),
                vec![],
            ),
        ),
        (b"PROXY TCP6 ::ffff:1.2.3.4 ::1 1 2\r\n".to_vec(), v4("[::ffff:1.2.3.4]:1", "[::1]:2")),
        (b"PROXY UNKNOWN\r\n".to_vec(), unknown.clone()),
        (b"PROXY UNKNOWN whatever follows is ignored\r\n".to_vec(), unknown),
        (v2(0x21, 0x11, &INET_BLOCK), header(Version::V2, Some("1.2.3.4:80"), Some("5.6.7.8:443"), vec![])),
        (
            v2(0x21, 0x12, &INET_BLOCK),
            Header { transport: Transport::Dgram, ..header(Version::V2, Some("1.2.3.4:80"), Some("5.6.7.8:443"), vec![]) },
        ),
        (
            v2(0x21, 0x21, &inet6_block()),
            header(Version::V2, Some("[::1]:4660"), Some("[2001:db8::1]:65535"), vec![]),
        ),
        (
            v2(0x21, 0x11, &inet_tlv),
            header(
                Version::V2,
                Some("1.2.3.4:80"),
                Some("5.6.7.8:443"),
                vec![(tlv::ALPN, b"h2".to_vec()), (tlv::NOOP, vec![])],
            ),
        ),
        (v2(0x21, 0x00, &[]), header(Version::V2, None, None, vec![])),
        (v2(0x21, 0x00, &[0xe0, 0, 1, 7]), header(Version::V2, None, None, vec![(0xe0, vec![7])])),
        (
            v2(0x21, 0x31, &unix),
            Header { transport: Transport::Stream, ..header(Version::V2, None, None, vec![(0x05, b"id".to_vec())]) },
        ),
        (v2(0x20, 0x00, &[]), local.clone()),
        // LOCAL ignores the address block, its family byte included.
        (v2(0x20, 0xff, &[1, 2, 3]), local),
    ]
}

#[test]
fn valid_headers_parse_and_leave_the_payload() {
    for (bytes, expected) in valid_headers() {
        let mut input = bytes.clone();
        input.extend_from_slice(b"GET / HTTP/1.1\r\n");
        let (got, len) = complete(&input);
        assert_eq!(got, expected, "{:?}", String::from_utf8_lossy(&bytes));
        assert_eq!(len, bytes.len());
        assert_eq!(detect(&bytes), Some(expected.version));
    }
}

#[test]
fn every_proper_prefix_is_incomplete() {
    for (bytes, _) in valid_headers() {
        for end in 0..bytes.len() {
            assert_eq!(parse(&bytes[..end]), Ok(Parsed::Incomplete), "{:?}", String::from_utf8_lossy(&bytes[..end]));
        }
    }
}

#[test]
fn v1_line_length_limit_is_107_bytes_with_crlf() {
    let line = |total: usize| {
        let mut l = b"PROXY UNKNOWN ".to_vec();
        l.resize(total - 2, b'x');
        l.extend_from_slice(b"\r\n");
        l
    };
    assert_eq!(complete(&line(MAX_V1_LEN)).1, MAX_V1_LEN);
    assert_eq!(parse(&line(MAX_V1_LEN + 1)), Err(Error::V1TooLong));
    // No CRLF in 107 bytes is an error even before more bytes arrive.
    assert_eq!(parse(&line(MAX_V1_LEN + 1)[..MAX_V1_LEN]), Err(Error::V1TooLong));
    assert_eq!(parse(&line(MAX_V1_LEN + 1)[..MAX_V1_LEN - 1]), Ok(Parsed::Incomplete));
}

#[test]
fn invalid_headers_are_refused_with_their_reason() {
    let table: Vec<(Vec<u8>, Error)> = vec![
        (b"GET / HTTP/1.1\r\n".to_vec(), Error::NotProxy),
        (b"PROXY\r\n".to_vec(), Error::NotProxy),
        (b"\r\n\r\n\0\r\nQUIT\r".to_vec(), Error::NotProxy),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n".to_vec(), Error::V1LineEnding),
        (b"PROXY TCP4 1.2.3.4\r 5.6.7.8 1 2\r\n".to_vec(), Error::V1LineEnding),
        (b"PROXY UNKNOWN \rx\r\n".to_vec(), Error::V1LineEnding),
        (b"PROXY \n".to_vec(), Error::V1LineEnding),
        (b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n".to_vec(), Error::V1Protocol),
        (b"PROXY tcp4 1.2.3.4 5.6.7.8 1 2\r\n".to_vec(), Error::V1Protocol),
        (b"PROXY UNKNOWNX\r\n".to_vec(), Error::V1Protocol),
        (b"PROXY \r\n".to_vec(), Error::V1Protocol),
        (b"PROXY  TCP4 1.2.3.4 5.6.7.8 1 2\r\n".to_vec(), Error::V1Protocol),
        (b"PROXY TCP4\r\n".to_vec(), Error::V1Fields),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n".to_vec(), Error::V1Fields),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n".to_vec(), Error::V1Fields),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n".to_vec(), Error::V1Fields),
        (b"PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n".to_vec(), Error::V1Fields),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8  2\r\n".to_vec(), Error::V1Fields),
        (b"PROXY TCP4 1.2.3.256 5.6.7.8 1 2\r\n".to_vec(), Error::V1Address("source")),
        (b"PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n".to_vec(), Error::V1Address("source")),
        (b"PROXY TCP4 1.2.3.4 ::1 1 2\r\n".to_vec(), Error::V1Address("destination")),
        (b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n".to_vec(), Error::V1Address("source")),
        (b"PROXY TCP6 ::1 fe80::1%eth0 1 2\r\n".to_vec(), Error::V1Address("destination")),
        (b"PROXY TCP4 1.2.3.\xff 5.6.7.8 1 2\r\n".to_vec(), Error::V1Address("source")),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n".to_vec(), Error::V1Port("source")),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 +80 2\r\n".to_vec(), Error::V1Port("source")),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 080 2\r\n".to_vec(), Error::V1Port("source")),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 -1\r\n".to_vec(), Error::V1Port("destination")),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 123456\r\n".to_vec(), Error::V1Port("destination")),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 8a\r\n".to_vec(), Error::V1Port("destination")),
        (v2(0x11, 0x11, &INET_BLOCK), Error::V2Version(1)),
        (v2(0x31, 0x11, &INET_BLOCK), Error::V2Version(3)),
        (v2(0x22, 0x11, &INET_BLOCK), Error::V2Command(2)),
        (v2(0x2f, 0x11, &INET_BLOCK), Error::V2Command(0xf)),
        (v2(0x21, 0x13, &INET_BLOCK), Error::V2Family(0x13)),
        (v2(0x21, 0x10, &INET_BLOCK), Error::V2Family(0x10)),
        (v2(0x21, 0x01, &INET_BLOCK), Error::V2Family(0x01)),
        (v2(0x21, 0x41, &INET_BLOCK), Error::V2Family(0x41)),
        (v2(0x21, 0x11, &vec![0; MAX_V2_LEN - 15]), Error::V2TooLong { len: MAX_V2_LEN + 1, max: MAX_V2_LEN }),
        (v2(0x21, 0x11, &INET_BLOCK[..11]), Error::V2ShortAddress { need: 12, have: 11 }),
        (v2(0x21, 0x21, &[0; 35]), Error::V2ShortAddress { need: 36, have: 35 }),
        (v2(0x21, 0x31, &[0; 215]), Error::V2ShortAddress { need: 216, have: 215 }),
        (v2(0x21, 0x11, &[&INET_BLOCK[..], &[1, 0]].concat()), Error::V2Tlv(28)),
        (v2(0x21, 0x11, &[&INET_BLOCK[..], &[1, 0, 3, b'h', b'2']].concat()), Error::V2Tlv(28)),
        (v2(0x21, 0x00, &[1, 0, 0, 2, 0, 2, 9]), Error::V2Tlv(19)),
        (v2(0x21, 0x00, &[0u8; 3 * (MAX_TLVS + 1)]), Error::V2TooManyTlvs),
    ];
    for (bytes, error) in table {
        assert_eq!(parse(&bytes), Err(error.clone()), "{:?}", String::from_utf8_lossy(&bytes));
        assert!(!error.to_string().is_empty());
    }
}

#[test]
fn errors_come_before_the_line_or_block_is_complete() {
    let table: &[(&[u8], Error)] = &[
        (b"PROXY XYZ", Error::V1Protocol),
        (b"PROXY TCP44", Error::V1Protocol),
        (b"PROXY TCP4 1.2.3.4  ", Error::V1Fields),
        (b"PROXY TCP4 1.2.x", Error::V1Address("source")),
        (b"PROXY TCP6 ::1 1.2.3.4 ", Error::V1Address("destination")),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 99999", Error::V1Port("source")),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 00", Error::V1Port("destination")),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 ", Error::V1Fields),
        (b"PROXY TCP4 1\r2", Error::V1LineEnding),
        (b"\r\n\r\n\0\r\nQUIT\n\x12", Error::V2Version(1)),
        (b"\r\n\r\n\0\r\nQUIT\n\x21\x14", Error::V2Family(0x14)),
        (b"\r\n\r\n\0\r\nQUIT\n\x21\x11\xff\xff", Error::V2TooLong { len: 16 + 0xffff, max: MAX_V2_LEN }),
        (b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x04", Error::V2ShortAddress { need: 12, have: 4 }),
    ];
    for (bytes, error) in table {
        assert_eq!(parse(bytes), Err(error.clone()), "{:?}", String::from_utf8_lossy(bytes));
    }
}

#[test]
fn detect_needs_the_whole_signature() {
    assert_eq!(detect(b"PROXY "), Some(Version::V1));
    assert_eq!(detect(b"PROXY"), None);
    assert_eq!(detect(&V2_SIGNATURE), Some(Version::V2));
    assert_eq!(detect(&V2_SIGNATURE[..11]), None);
    assert_eq!(detect(b"\x16\x03\x01"), None);
}

#[test]
fn header_tlv_finds_the_first_of_a_type() {
    let h = header(Version::V2, None, None, vec![(1, b"a".to_vec()), (2, b"b".to_vec()), (1, b"c".to_vec())]);
    assert_eq!(h.tlv(1), Some(&b"a"[..]));
    assert_eq!(h.tlv(3), None);
}

/// Encodes with both versions, parses back, and checks the addresses come out
/// as `expected` (source, destination) and the TLVs survive.
fn round_trip(src: SocketAddr, dst: SocketAddr, expected: (SocketAddr, SocketAddr), tlvs: &[(u8, &[u8])]) {
    let mut line = Vec::new();
    encode_v1(src, dst, &mut line);
    assert!(line.len() <= MAX_V1_LEN);
    let (h, len) = complete(&line);
    assert_eq!(
        (len, h.version, h.source, h.destination),
        (line.len(), Version::V1, Some(expected.0), Some(expected.1))
    );
    let mut block = b"prefix".to_vec();
    encode_v2(src, dst, &mut block, tlvs).expect("encodable");
    let (h, len) = complete(&block[6..]);
    assert_eq!((len, h.version, h.command), (block.len() - 6, Version::V2, Command::Proxy));
    assert_eq!((h.source, h.destination), (Some(expected.0), Some(expected.1)));
    let got: Vec<(u8, &[u8])> = h.tlvs.iter().map(|(k, v)| (*k, v.as_slice())).collect();
    assert_eq!(got, tlvs);
}

#[test]
fn encode_then_parse_round_trips_every_family_mix() {
    let (v4a, v4b) = (sa("10.0.0.1:40000"), sa("192.0.2.7:443"));
    let (v6a, v6b) = (sa("[2001:db8::5]:1"), sa("[fe80::1]:65535"));
    let mapped = sa("[::ffff:10.0.0.1]:40000");
    round_trip(v4a, v4b, (v4a, v4b), &[]);
    round_trip(v6a, v6b, (v6a, v6b), &[(tlv::AUTHORITY, b"example.com"), (0xee, b"")]);
    // A mapped address next to an IPv4 one: both are IPv4.
    round_trip(mapped, v4b, (v4a, v4b), &[]);
    // Mixed families: the IPv4 side travels IPv4-mapped.
    round_trip(v4a, v6b, (mapped, v6b), &[]);
    round_trip(v6a, v4a, (v6a, mapped), &[]);
    let mut line = Vec::new();
    encode_v1(v4a, v6b, &mut line);
    assert_eq!(line, b"PROXY TCP6 ::ffff:10.0.0.1 fe80::1 40000 65535\r\n");
}

#[test]
fn encode_v2_refuses_what_parse_would_refuse() {
    let (a, b) = (sa("1.2.3.4:1"), sa("5.6.7.8:2"));
    let mut out = Vec::new();
    let too_many = vec![(0u8, &b""[..]); MAX_TLVS + 1];
    assert_eq!(encode_v2(a, b, &mut out, &too_many), Err(Error::V2TooManyTlvs));
    let big = vec![0u8; MAX_V2_LEN];
    assert_eq!(
        encode_v2(a, b, &mut out, &[(1, &big)]),
        Err(Error::V2TooLong { len: 16 + 12 + 3 + MAX_V2_LEN, max: MAX_V2_LEN })
    );
    assert!(out.is_empty());
    let fits = vec![0u8; MAX_V2_LEN - 16 - 12 - 3];
    encode_v2(a, b, &mut out, &[(1, &fits)]).expect("fits");
    assert_eq!(complete(&out).1, MAX_V2_LEN);
}

fn any_addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::new(IpAddr::from(ip), port)),
        (any::<[u8; 16]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::new(IpAddr::from(ip), port)),
    ]
}

/// What an address becomes after encoding next to `other`.
fn travelled(addr: SocketAddr, other: SocketAddr) -> SocketAddr {
    let (a, o) = (addr.ip().to_canonical(), other.ip().to_canonical());
    match (a, o) {
        (IpAddr::V4(_), IpAddr::V4(_)) => SocketAddr::new(a, addr.port()),
        _ => SocketAddr::new(IpAddr::V6(mapped(a)), addr.port()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_parse_without_panic(
        prefix in prop_oneof![Just(&b""[..]), Just(&b"PROXY "[..]), Just(SIG), Just(&b"PROXY TCP4 "[..])],
        tail in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let buf = [prefix, &tail].concat();
        match parse(&buf) {
            Ok(Parsed::Complete { header, len }) => {
                prop_assert!(len <= buf.len());
                // A header delimits itself: the same bytes alone parse the same.
                prop_assert_eq!(parse(&buf[..len]), Ok(Parsed::Complete { header, len }));
            }
            Ok(Parsed::Incomplete) => prop_assert!(buf.len() < MAX_LEN),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn v2_with_a_valid_preamble_never_panics(
        ver_cmd in prop_oneof![Just(0x20u8), Just(0x21u8)],
        family in prop_oneof![Just(0x00u8), Just(0x11), Just(0x12), Just(0x21), Just(0x22), Just(0x31), any::<u8>()],
        payload in proptest::collection::vec(any::<u8>(), 0..400),
        cut in any::<prop::sample::Index>(),
    ) {
        let buf = v2(ver_cmd, family, &payload);
        let _ = parse(&buf);
        let end = cut.index(buf.len() + 1);
        if let Ok(Parsed::Complete { len, .. }) = parse(&buf[..end]) {
            prop_assert_eq!(len, buf.len());
        }
    }

    #[test]
    fn encoded_headers_parse_back(
        src in any_addr(),
        dst in any_addr(),
        tlvs in proptest::collection::vec((any::<u8>(), proptest::collection::vec(any::<u8>(), 0..40)), 0..8),
    ) {
        let tlvs: Vec<(u8, &[u8])> = tlvs.iter().map(|(k, v)| (*k, v.as_slice())).collect();
        round_trip(src, dst, (travelled(src, dst), travelled(dst, src)), &tlvs);
    }
}
