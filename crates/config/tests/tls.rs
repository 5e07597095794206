//! TLS keywords read into the model: certificate files, names, defaults,
//! and the diff a changed file makes. The error and warning texts are in the
//! golden files; this checks what lands in the model.
//!
//! The PEM files under `tests/fixtures` are test keys, made by
//! `cargo test -p switchyard-config --test tls -- --ignored regenerate_fixtures`.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use switchyard_config::*;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

/// A configuration with one `https` service, `extra` added to it, loaded from
/// a file in the fixtures directory so relative paths resolve there.
fn https(extra: &str) -> Result<Config, Diagnostics> {
    let text = format!(
        "[[service]]\nname = \"site\"\nmode = \"https\"\nlisten = \"127.0.0.1:8443\"\npool = \"main\"\n{extra}\n\
         [[pool]]\nname = \"main\"\nservers = [ {{ address = \"127.0.0.1:9001\" }} ]\n"
    );
    let dir = std::env::temp_dir().join(format!("switchyard-config-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{:x}.toml", text.len() * 31 + extra.bytes().map(usize::from).sum::<usize>()));
    std::fs::write(&file, text.replace("FIXTURES", FIXTURES)).unwrap();
    let loaded = load(&file);
    std::fs::remove_file(&file).unwrap();
    loaded
}

#[test]
fn an_https_service_reads_its_certificate_and_defaults() {
    let c = https(r#"tls = { certificate = "FIXTURES/rsa.crt", key = "FIXTURES/rsa.key" }"#).unwrap();
    let s = &c.services[0];
    assert_eq!(s.mode, Mode::Https);
    let tls = s.tls.as_ref().unwrap();
    assert_eq!(tls.certificates.len(), 1);
    assert_eq!(tls.certificates[0].names, ["example.com", "www.example.com"]);
    assert!(tls.certificates[0].certificate.pem.starts_with(b"-----BEGIN CERTIFICATE-----"));
    assert_eq!(tls.certificates[0].key.path, Path::new(FIXTURES).join("rsa.key"));
    assert_eq!((tls.min_version, tls.tickets, tls.session_cache), (TlsVersion::V1_2, true, 20_480));
    assert!(tls.ciphers.is_empty() && tls.groups.is_empty() && tls.client_auth.is_none());
    assert_eq!(s.http2, Http2::default());
    assert!(!format!("{tls:?}").contains("PRIVATE"), "Debug must not print the key");
}

#[test]
fn every_server_tls_key() {
    let c = https(
        r#"http2 = { enabled = false, max_concurrent_streams = 50, max_resets = 10 }
[service.tls]
certificate = "FIXTURES/rsa.crt"
key = "FIXTURES/rsa.key"
certificates = [ { certificate = "FIXTURES/ecdsa.crt", key = "FIXTURES/ecdsa.key" },
                 { certificate = "FIXTURES/cn-only.crt", key = "FIXTURES/ecdsa.key" } ]
min_version = "1.3"
ciphers = ["tls13_aes_256_gcm_sha384", "TLS13_CHACHA20_POLY1305_SHA256"]
groups = ["X25519", "x25519mlkem768"]
tickets = false
session_cache = 100
client_auth = { ca = "FIXTURES/ca.crt", required = false }
"#,
    )
    .unwrap();
    let s = &c.services[0];
    let tls = s.tls.as_ref().unwrap();
    let names: Vec<&[String]> = tls.certificates.iter().map(|c| c.names.as_slice()).collect();
    assert_eq!(
        names,
        [&["example.com", "www.example.com"][..], &["*.example.org", "example.org"], &["legacy.example.net"]]
    );
    assert_eq!(tls.min_version, TlsVersion::V1_3);
    assert_eq!(tls.ciphers, ["TLS13_AES_256_GCM_SHA384", "TLS13_CHACHA20_POLY1305_SHA256"]);
    assert_eq!(tls.groups, ["x25519", "x25519mlkem768"]);
    assert_eq!((tls.tickets, tls.session_cache), (false, 100));
    let auth = tls.client_auth.as_ref().unwrap();
    assert!(!auth.required);
    assert!(auth.ca.pem.starts_with(b"-----BEGIN CERTIFICATE-----"));
    assert_eq!(s.http2, Http2 { enabled: false, max_concurrent_streams: 50, max_resets: 10, max_control_frames: 1000 });
    for name in tls.ciphers.iter() {
        assert!(cipher_suite(name).is_some());
    }
    for name in tls.groups.iter() {
        assert!(kx_group(name).is_some());
    }
}

#[test]
fn http3_is_off_by_default_and_reads_as_a_switch_or_a_table() {
    let tls = r#"tls = { certificate = "FIXTURES/rsa.crt", key = "FIXTURES/rsa.key" }"#;
    let c = https(tls).unwrap();
    let off = Http3 {
        enabled: false,
        max_concurrent_streams: 100,
        max_resets: 200,
        max_control_frames: 1000,
        early_data: false,
        retry: QuicRetry::Auto,
        retry_threshold: 100,
    };
    assert_eq!(c.services[0].http3, off);
    let c = https(&format!("http3 = true\n{tls}")).unwrap();
    assert_eq!(c.services[0].http3, Http3 { enabled: true, ..off });
    let c =
        https(&format!("http3 = {{ enabled = true, max_concurrent_streams = 250, max_resets = 7 }}\n{tls}")).unwrap();
    assert_eq!(c.services[0].http3, Http3 { enabled: true, max_concurrent_streams: 250, max_resets: 7, ..off });
    let c = https(&format!("http3 = {{ enabled = true, max_control_frames = 50, early_data = true }}\n{tls}")).unwrap();
    assert_eq!(c.services[0].http3, Http3 { enabled: true, max_control_frames: 50, early_data: true, ..off });
}

#[test]
fn http3_early_data_is_refused_with_client_certificates_and_bad_budgets() {
    let mtls = r#"tls = { certificate = "FIXTURES/rsa.crt", key = "FIXTURES/rsa.key", client_auth = { ca = "FIXTURES/ca.crt" } }"#;
    let e = errors(https(&format!("http3 = {{ enabled = true, early_data = true }}\n{mtls}")));
    assert!(e.iter().any(|m| m.contains("early_data") && m.contains("client_auth")), "{e:?}");
    assert!(https(&format!("http3 = {{ enabled = true, early_data = false }}\n{mtls}")).is_ok());
    let stateless = r#"tls = { certificate = "FIXTURES/rsa.crt", key = "FIXTURES/rsa.key", session_cache = 0 }"#;
    let e = errors(https(&format!("http3 = {{ enabled = true, early_data = true }}\n{stateless}")));
    assert!(e.iter().any(|m| m.contains("session cache")), "{e:?}");
    let tls = r#"tls = { certificate = "FIXTURES/rsa.crt", key = "FIXTURES/rsa.key" }"#;
    let e = errors(https(&format!("http3 = {{ enabled = true, max_control_frames = 0, early_data = 1 }}\n{tls}")));
    assert!(e.iter().any(|m| m.contains("max_control_frames")), "{e:?}");
    assert!(e.iter().any(|m| m.contains("early_data")), "{e:?}");
}

#[test]
fn http3_retry_reads_its_three_modes_and_a_threshold() {
    let tls = r#"tls = { certificate = "FIXTURES/rsa.crt", key = "FIXTURES/rsa.key" }"#;
    for (mode, want) in [("auto", QuicRetry::Auto), ("always", QuicRetry::Always), ("never", QuicRetry::Never)] {
        let c =
            https(&format!("http3 = {{ enabled = true, retry = \"{mode}\", retry_threshold = 5 }}\n{tls}")).unwrap();
        assert_eq!((c.services[0].http3.retry, c.services[0].http3.retry_threshold), (want, 5));
    }
    let e = errors(https(&format!("http3 = {{ enabled = true, retry = \"allways\" }}\n{tls}")));
    assert!(e.iter().any(|m| m.contains("unknown `retry` mode `allways`") && m.contains("always")), "{e:?}");
    let e = errors(https(&format!("http3 = {{ enabled = true, retry_threshold = 0 }}\n{tls}")));
    assert!(e.iter().any(|m| m.contains("retry_threshold")), "{e:?}");
}

fn errors(loaded: Result<Config, Diagnostics>) -> Vec<String> {
    loaded.unwrap_err().errors().map(|d| format!("{} ({})", d.message, d.hint.clone().unwrap_or_default())).collect()
}

#[test]
fn http3_is_refused_outside_https_and_with_bad_limits() {
    let tls = r#"tls = { certificate = "FIXTURES/rsa.crt", key = "FIXTURES/rsa.key" }"#;
    let e = errors(https(&format!("http3 = {{ max_concurrent_streams = 0, ehm = 1 }}\n{tls}")));
    assert!(e.iter().any(|m| m.contains("max_concurrent_streams")), "{e:?}");
    assert!(e.iter().any(|m| m.contains("ehm")), "{e:?}");
    let text =
        "[[service]]\nname = \"web\"\nmode = \"http\"\nlisten = \"127.0.0.1:8080\"\npool = \"p\"\nhttp3 = true\n\
                [[pool]]\nname = \"p\"\nservers = [ { address = \"127.0.0.1:9001\" } ]\n";
    let e: Vec<String> = parse(text, "t.toml").unwrap_err().errors().map(|d| d.message.clone()).collect();
    assert!(e.iter().any(|m| m.contains("http3")), "{e:?}");
}

#[test]
fn http3_takes_the_udp_side_of_its_listeners() {
    let tls = r#"tls = { certificate = "FIXTURES/rsa.crt", key = "FIXTURES/rsa.key" }"#;
    let udp = "[[service]]\nname = \"dns\"\nmode = \"udp\"\nlisten = \"127.0.0.1:8443\"\npool = \"main\"\n";
    // Without http3 a udp service may share the port; with it, not.
    assert!(https(&format!("{tls}\n{udp}")).is_ok());
    let e = errors(https(&format!("http3 = true\n{tls}\n{udp}")));
    assert!(e.iter().any(|m| m.contains("127.0.0.1:8443")), "{e:?}");
}

#[test]
fn the_bench_configuration_validates() {
    let c = https(
        r#"tls = { certificate = "FIXTURES/ecdsa.crt", key = "FIXTURES/ecdsa.key", session_cache = false, tickets = false }"#,
    )
    .unwrap();
    let tls = c.services[0].tls.as_ref().unwrap();
    assert_eq!((tls.session_cache, tls.tickets), (0, false));
}

#[test]
fn pkcs1_and_sec1_keys_are_read() {
    for (cert, key) in [("rsa.crt", "rsa-pkcs1.key"), ("ecdsa.crt", "ecdsa-sec1.key")] {
        let c = https(&format!(r#"tls = {{ certificate = "FIXTURES/{cert}", key = "FIXTURES/{key}" }}"#));
        assert!(c.is_ok(), "{key}: {}", c.unwrap_err());
    }
}

#[test]
fn a_chain_is_kept_leaf_first() {
    let c = https(r#"tls = { certificate = "FIXTURES/chain.crt", key = "FIXTURES/chain.key" }"#).unwrap();
    let pem = &c.services[0].tls.as_ref().unwrap().certificates[0].certificate.pem;
    assert_eq!(pem.windows(27).filter(|w| w == b"-----BEGIN CERTIFICATE-----").count(), 2);
}

#[test]
fn relative_paths_of_parse_start_in_the_working_directory() {
    // `cargo test` runs in the crate directory.
    let src = r#"
[[service]]
name = "site"
mode = "https"
listen = "127.0.0.1:8443"
pool = "main"
tls = { certificate = "tests/fixtures/rsa.crt", key = "tests/fixtures/rsa.key" }
[[pool]]
name = "main"
servers = [ { address = "127.0.0.1:9001" } ]
"#;
    let c = parse(src, "inline.toml").unwrap();
    assert_eq!(
        c.services[0].tls.as_ref().unwrap().certificates[0].certificate.path,
        Path::new("tests/fixtures/rsa.crt")
    );
}

#[test]
fn rules_hsts_redirect_https_and_client_cert() {
    let c = https(
        r#"tls = { certificate = "FIXTURES/rsa.crt", key = "FIXTURES/rsa.key", client_auth = { ca = "FIXTURES/ca.crt" } }
rules = [
  { client_cert = "absent", path_prefix = "/admin", deny = true },
  { hsts = true },
  { path = "/x", hsts = { max_age = "1d", include_subdomains = true, preload = true }, set_response_headers = { "x-a" = "1" } },
  { host = "old.example.com", redirect_https = 8443, status = 308 },
]"#,
    )
    .unwrap();
    let rules = &c.services[0].rules;
    assert_eq!(rules[0].conditions[1], Condition::ClientCert(ClientCertState::Absent));
    assert_eq!(
        rules[1].edits.set_response,
        [("strict-transport-security".to_string(), "max-age=31536000".to_string())]
    );
    assert_eq!(
        rules[2].edits.set_response,
        [
            ("x-a".to_string(), "1".to_string()),
            ("strict-transport-security".to_string(), "max-age=86400; includeSubDomains; preload".to_string())
        ]
    );
    assert_eq!(rules[3].action, Some(Action::RedirectHttps { status: 308, port: Some(8443) }));
}

#[test]
fn pool_tls_and_protocol() {
    let c = https(
        r#"tls = { certificate = "FIXTURES/rsa.crt", key = "FIXTURES/rsa.key" }
rules = [ { path_prefix = "/a", pool = "a" }, { path_prefix = "/b", pool = "b" }, { path_prefix = "/c", pool = "c" } ]
[[pool]]
name = "a"
tls = true
protocol = "http1"
servers = [ { address = "127.0.0.1:9002" } ]
[[pool]]
name = "b"
tls = { verify = false, server_name = "API.internal" }
servers = [ { address = "127.0.0.1:9003" } ]
[[pool]]
name = "c"
tls = { ca = "FIXTURES/ca.crt", certificate = "FIXTURES/chain.crt", key = "FIXTURES/chain.key" }
servers = [ { address = "127.0.0.1:9004" } ]
"#,
    )
    .unwrap();
    let pool = |n: &str| c.pool(c.pool_by_name(n).unwrap());
    assert_eq!((pool("main").tls.as_ref(), pool("main").protocol), (None, UpstreamProtocol::Http1));
    assert_eq!(pool("a").tls, Some(UpstreamTls { verify: true, ca: None, server_name: None, client_cert: None }));
    assert_eq!(pool("a").protocol, UpstreamProtocol::Http1);
    let b = pool("b").tls.as_ref().unwrap();
    assert_eq!((b.verify, b.server_name.as_deref()), (false, Some("api.internal")));
    let cc = pool("c").tls.as_ref().unwrap();
    assert!(cc.ca.is_some() && cc.verify);
    assert_eq!(cc.client_cert.as_ref().unwrap().names, ["client.example.com"]);
}

#[test]
fn a_renewed_certificate_changes_its_service_and_pool() {
    let dir = std::env::temp_dir().join(format!("switchyard-config-renew-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["rsa.crt", "rsa.key", "ecdsa.crt", "ecdsa.key"] {
        std::fs::copy(Path::new(FIXTURES).join(f), dir.join(f)).unwrap();
    }
    let file = dir.join("switchyard.toml");
    std::fs::write(
        &file,
        r#"
[[service]]
name = "site"
mode = "https"
listen = "127.0.0.1:8443"
pool = "main"
tls = { certificate = "site.crt", key = "site.key" }
[[service]]
name = "plain"
listen = "127.0.0.1:8080"
pool = "other"
[[pool]]
name = "main"
tls = { certificate = "site.crt", key = "site.key" }
servers = [ { address = "127.0.0.1:9001" } ]
[[pool]]
name = "other"
servers = [ { address = "127.0.0.1:9002" } ]
"#,
    )
    .unwrap();
    let install = |which: &str| {
        std::fs::copy(dir.join(format!("{which}.crt")), dir.join("site.crt")).unwrap();
        std::fs::copy(dir.join(format!("{which}.key")), dir.join("site.key")).unwrap();
        load(&file).unwrap()
    };
    let old = install("rsa");
    let same = load(&file).unwrap();
    assert!(diff(&old, &same).is_empty());
    let new = install("ecdsa");
    let d = diff(&old, &new);
    assert_eq!(
        (d.services.changed.as_slice(), d.services.unchanged.as_slice()),
        (&["site".to_string()][..], &["plain".to_string()][..])
    );
    assert_eq!(d.pools.changed, ["main"]);
    assert_eq!(d.to_string(), "services: +0 -0 ~1 =1; pools: +0 -0 ~1 =1; listeners: +0 -0");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Writes the test certificates and keys under `tests/fixtures`. Valid ones
/// run from 1975 to 4096 (rcgen's defaults), so the golden files stay true.
#[test]
#[ignore = "writes the committed fixtures; run by hand"]
fn regenerate_fixtures() {
    use rcgen::{date_time_ymd, BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let dir = Path::new(FIXTURES);
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
    let params =
        |names: &[&str]| CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();

    let rsa = KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_2048).unwrap();
    write("rsa.key", &rsa.serialize_pem());
    write("rsa.crt", &params(&["example.com", "www.example.com"]).self_signed(&rsa).unwrap().pem());

    let ecdsa = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    write("ecdsa.key", &ecdsa.serialize_pem());
    write("ecdsa.crt", &params(&["*.example.org", "Example.org"]).self_signed(&ecdsa).unwrap().pem());

    let mut cn_only = params(&[]);
    cn_only.distinguished_name.push(DnType::CommonName, "Legacy.example.net");
    write("cn-only.crt", &cn_only.self_signed(&ecdsa).unwrap().pem());

    let mut expired = params(&["old.example.org"]);
    (expired.not_before, expired.not_after) = (date_time_ymd(2020, 1, 1), date_time_ymd(2021, 1, 1));
    write("expired.crt", &expired.self_signed(&ecdsa).unwrap().pem());

    let mut future = params(&["new.example.org"]);
    (future.not_before, future.not_after) = (date_time_ymd(2090, 1, 1), date_time_ymd(2091, 1, 1));
    write("future.crt", &future.self_signed(&ecdsa).unwrap().pem());

    let ca_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut ca_params = params(&[]);
    ca_params.distinguished_name.push(DnType::CommonName, "switchyard test CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    write("ca.crt", &ca.pem());
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let leaf = params(&["client.example.com"]).signed_by(&leaf_key, &issuer).unwrap();
    write("chain.key", &leaf_key.serialize_pem());
    write("chain.crt", &format!("{}{}", leaf.pem(), ca.pem()));
}

#[test]
fn acme_instead_of_files() {
    let c = https(
        r#"[service.tls.acme]
directory = "https://acme.example/directory"
contact = "mailto:ops@example.com"
domains = ["Example.COM.", "www.example.com"]
challenge = "tls-alpn-01"
storage = "acme-state"
ca_roots = "FIXTURES/ca.crt"
profile = "shortlived"
"#,
    )
    .unwrap();
    let tls = c.services[0].tls.as_ref().unwrap();
    assert!(tls.certificates.is_empty());
    let acme = tls.acme.as_ref().unwrap();
    assert_eq!(acme.directory, "https://acme.example/directory");
    assert_eq!(acme.contact, ["mailto:ops@example.com"]);
    assert_eq!(acme.domains, ["example.com", "www.example.com"]);
    assert_eq!(acme.challenge, AcmeChallenge::TlsAlpn01);
    assert!(acme.storage.ends_with("acme-state") && acme.storage.is_absolute(), "{:?}", acme.storage);
    assert!(acme.ca_roots.as_ref().unwrap().pem.starts_with(b"-----BEGIN CERTIFICATE-----"));
    assert_eq!(acme.profile.as_deref(), Some("shortlived"));
    let defaults =
        https(r#"tls = { acme = { directory = "https://acme.example/d", domains = ["a.example.com"] } }"#).unwrap();
    let acme = defaults.services[0].tls.as_ref().unwrap().acme.clone().unwrap();
    assert_eq!(acme.challenge, AcmeChallenge::Http01);
    assert_eq!(acme.storage, Path::new(DEFAULT_ACME_STORAGE));
    assert!(acme.contact.is_empty() && acme.ca_roots.is_none() && acme.profile.is_none());
}

#[test]
fn acme_on_demand_behind_an_allow_check() {
    let c = https(
        r#"[service.tls.acme]
directory = "https://acme.example/directory"
on_demand = { ask = "http://127.0.0.1:5555/allowed?zone=shops", allow = ["*.Shops.example.com.", "one.example.net"], max_certificates = 50, max_pending = 2, max_orders = 5, order_period = "10m", deny_for = "30s", ask_timeout = "1s", wait = "15s" }
"#,
    )
    .unwrap();
    let acme = c.services[0].tls.as_ref().unwrap().acme.clone().unwrap();
    assert!(acme.domains.is_empty(), "names are optional with on_demand");
    let od = acme.on_demand.unwrap();
    assert_eq!(od.ask.as_deref(), Some("http://127.0.0.1:5555/allowed?zone=shops"));
    assert_eq!(od.allow, ["*.shops.example.com", "one.example.net"]);
    assert_eq!((od.max_certificates, od.max_pending, od.max_orders), (50, 2, 5));
    assert_eq!(od.order_period, Duration::from_secs(600));
    assert_eq!(od.deny_for, Duration::from_secs(30));
    assert_eq!(od.ask_timeout, Duration::from_secs(1));
    assert_eq!(od.wait, Duration::from_secs(15));
    // Either check alone is enough; the defaults are bounded.
    let ask_only = https(
        r#"tls = { acme = { directory = "https://acme.example/d", domains = ["a.example.com"], on_demand = { ask = "http://ask.internal/ok" } } }"#,
    )
    .unwrap();
    let od = ask_only.services[0].tls.as_ref().unwrap().acme.clone().unwrap().on_demand.unwrap();
    assert!(od.allow.is_empty());
    assert_eq!((od.max_certificates, od.max_pending, od.max_orders), (100, 4, 20));
    assert_eq!(
        (od.deny_for, od.ask_timeout, od.wait),
        (Duration::from_secs(60), Duration::from_secs(3), Duration::from_secs(20))
    );
    // No allow check at all is refused, with a hint.
    for missing in ["on_demand = {}", "on_demand = { allow = [] }", "on_demand = { wait = \"5s\" }"] {
        let text = format!("tls = {{ acme = {{ directory = \"https://acme.example/d\", {missing} }} }}");
        let e: String = https(&text)
            .unwrap_err()
            .errors()
            .map(|d| format!("{} ({})", d.message, d.hint.clone().unwrap_or_default()))
            .collect();
        assert!(e.contains("`on_demand` has no allow check") && e.contains("ask ="), "{missing}: {e}");
    }
}
