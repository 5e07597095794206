//! HPACK against RFC 7541 Appendix C, and against bad input.

use super::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
}

fn decode(d: &mut Decoder, block: &[u8]) -> Result<Vec<(String, String)>, Error> {
    let (mut out, mut fields) = (Vec::new(), Vec::new());
    d.decode(block, usize::MAX, &mut out, &mut fields)?;
    Ok(fields
        .iter()
        .map(|f| {
            (
                String::from_utf8_lossy(&out[f.name.clone()]).into_owned(),
                String::from_utf8_lossy(&out[f.value.clone()]).into_owned(),
            )
        })
        .collect())
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect()
}

/// C.3 (plain) and C.4 (Huffman): three requests on one connection.
#[test]
fn rfc_request_sequences() {
    let blocks = [
        [
            "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
            "8286 84be 5808 6e6f 2d63 6163 6865",
            "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
        ],
        [
            "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
            "8286 84be 5886 a8eb 1064 9cbf",
            "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
        ],
    ];
    let want = [
        pairs(&[(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com")]),
        pairs(&[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/"),
            (":authority", "www.example.com"),
            ("cache-control", "no-cache"),
        ]),
        pairs(&[
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/index.html"),
            (":authority", "www.example.com"),
            ("custom-key", "custom-value"),
        ]),
    ];
    let sizes = [57, 110, 164];
    for sequence in blocks {
        let mut d = Decoder::default();
        for ((block, want), size) in sequence.iter().zip(&want).zip(sizes) {
            assert_eq!(&decode(&mut d, &hex(block)).expect("decodes"), want);
            assert_eq!(d.table_size().1, size);
        }
    }
}

/// C.5 (plain) and C.6 (Huffman): three responses, a 256-byte table, evictions.
#[test]
fn rfc_response_sequences() {
    let blocks = [
        [
            "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a \
             3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
            "4803 3330 37c1 c0bf",
            "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04 \
             677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49 \
             553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31",
        ],
        [
            "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e \
             919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
            "4883 640e ffc1 c0bf",
            "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 \
             821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed \
             4ee5 b106 3d50 07",
        ],
    ];
    let date1 = "Mon, 21 Oct 2013 20:13:21 GMT";
    let loc = "https://www.example.com";
    let want = [
        pairs(&[(":status", "302"), ("cache-control", "private"), ("date", date1), ("location", loc)]),
        pairs(&[(":status", "307"), ("cache-control", "private"), ("date", date1), ("location", loc)]),
        pairs(&[
            (":status", "200"),
            ("cache-control", "private"),
            ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
            ("location", loc),
            ("content-encoding", "gzip"),
            ("set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"),
        ]),
    ];
    let sizes = [222, 222, 215];
    for sequence in blocks {
        let mut d = Decoder::new(256);
        for ((block, want), size) in sequence.iter().zip(&want).zip(sizes) {
            assert_eq!(&decode(&mut d, &hex(block)).expect("decodes"), want);
            assert_eq!(d.table_size().1, size);
        }
    }
}

#[test]
fn integers_follow_c1() {
    let mut out = Vec::new();
    write_int(&mut out, 0, 5, 10);
    write_int(&mut out, 0, 5, 1337);
    write_int(&mut out, 0, 8, 42);
    assert_eq!(out, [0x0a, 0x1f, 0x9a, 0x0a, 0x2a]);
    let mut at = 0;
    assert_eq!(read_int(&out, &mut at, 5), Ok(10));
    assert_eq!(read_int(&out, &mut at, 5), Ok(1337));
    assert_eq!(read_int(&out, &mut at, 8), Ok(42));
    assert_eq!(at, out.len());
}

#[test]
fn bad_blocks_are_compression_errors() {
    let cases: &[(&str, &[u8], Error)] = &[
        ("index 0", &[0x80], Error::BadIndex),
        ("beyond the static table, empty dynamic one", &[0xbe], Error::BadIndex),
        ("literal name index out of range", &[0x7f, 0x10, 0x01, b'a'], Error::BadIndex),
        ("truncated string", &[0x40, 0x05, b'a'], Error::Truncated),
        ("truncated integer", &[0xff], Error::Truncated),
        ("integer overflow", &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f], Error::IntegerOverflow),
        ("size update above the limit", &[0x3f, 0xe2, 0x1f], Error::BadSizeUpdate),
        ("size update after a field", &[0x82, 0x20], Error::BadSizeUpdate),
        ("bad huffman", &[0x40, 0x81, 0x00, 0x00], Error::Huffman),
    ];
    for (what, block, want) in cases {
        assert_eq!(decode(&mut Decoder::default(), block), Err(*want), "{what}");
    }
}

#[test]
fn size_updates_evict_and_a_block_may_open_with_two() {
    let mut d = Decoder::default();
    decode(&mut d, &hex("400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65")).expect("insert");
    assert_eq!(d.table_size(), (4096, 54));
    // Two updates (0 then 4096) before the first field: the table empties.
    assert_eq!(decode(&mut d, &[0x20, 0x3f, 0xe1, 0x1f, 0x82]).expect("ok"), pairs(&[(":method", "GET")]));
    assert_eq!(d.table_size(), (4096, 0));
    assert_eq!(decode(&mut d, &[0xbe]), Err(Error::BadIndex), "the entry is gone");
}

#[test]
fn fields_beyond_the_list_limit_are_dropped_but_indexed() {
    let mut d = Decoder::default();
    let (mut out, mut fields) = (Vec::new(), Vec::new());
    // :method GET (42 in the list's accounting) then a literal indexed field.
    let block = hex("82 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65");
    let done = d.decode(&block, 50, &mut out, &mut fields).expect("decodes");
    assert!(done.oversized);
    assert_eq!(done.list_size, 42 + 54);
    assert_eq!(fields.len(), 1);
    assert_eq!(&out[..], b":methodGET");
    assert_eq!(decode(&mut d, &[0xbe]).expect("indexed"), pairs(&[("custom-key", "custom-value")]));
}

#[test]
fn an_entry_larger_than_the_table_empties_it() {
    let mut d = Decoder::new(64);
    decode(&mut d, &hex("400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65")).expect("insert");
    assert_eq!(d.table_size().1, 54);
    let mut big = vec![0x40, 0x01, b'x', 0x7f, 0x00];
    big.extend_from_slice(&[b'y'; 127]);
    decode(&mut d, &big).expect("big literal");
    assert_eq!(d.table_size().1, 0);
}

#[test]
fn the_encoder_writes_what_the_decoder_reads() {
    for huffman in [false, true] {
        let mut e = Encoder { huffman, ..Encoder::default() };
        e.peer_table_size(0);
        let mut block = Vec::new();
        e.begin(&mut block);
        assert_eq!(block, [0x20], "the owed size update comes first");
        for status in [200, 204, 302, 404, 503, 101] {
            e.status(status, &mut block);
        }
        e.field(b"content-type", b"text/html; charset=utf-8", &mut block);
        e.field(b"x-custom-header", b"some value", &mut block);
        e.field(b"authorization", b"secret", &mut block);
        e.field(b"x-long", &[b'a'; 300], &mut block);
        let mut d = Decoder::default();
        let got = decode(&mut d, &block).expect("decodes");
        let long = "a".repeat(300);
        let want = pairs(&[
            (":status", "200"),
            (":status", "204"),
            (":status", "302"),
            (":status", "404"),
            (":status", "503"),
            (":status", "101"),
            ("content-type", "text/html; charset=utf-8"),
            ("x-custom-header", "some value"),
            ("authorization", "secret"),
            ("x-long", &long),
        ]);
        assert_eq!(got, want);
        assert_eq!(d.table_size().1, 0, "nothing indexed");
        let never = block.windows(2).any(|w| w == [0x1f, 0x08]);
        assert!(never, "authorization (static 23) is never indexed");
        let mut again = Vec::new();
        e.begin(&mut again);
        assert!(again.is_empty(), "the update is owed once");
    }
}
