//! Tests of the generated configurations; `haproxy -c` and `nginx -t` validate them when
//! those programs are installed.

use super::*;
use crate::suite::procs::which;

const SETUPS: [Setup; 16] = [
    Setup::L7,
    Setup::L7Log,
    Setup::L4,
    Setup::Cookie,
    Setup::TlsRsa,
    Setup::TlsEcdsa,
    Setup::Gzip,
    Setup::Brotli,
    Setup::Zstd,
    Setup::Cache,
    Setup::Udp,
    Setup::Failover,
    Setup::H2Tls,
    Setup::H2c,
    Setup::H2Upstream,
    Setup::H3,
];

struct Fixture {
    dir: PathBuf,
    ports: Ports,
    certs: Certs,
    stream: NginxStream,
}

impl Fixture {
    fn new(name: &str) -> Fixture {
        let dir = std::env::temp_dir().join(format!("sy-bench-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("run")).expect("temp dir");
        let certs = generate_certs(&dir.join("certs")).expect("certificates");
        let v = which("nginx").and_then(|n| std::process::Command::new(n).arg("-V").output().ok());
        let stream = nginx_stream(&v.map(|o| String::from_utf8_lossy(&o.stderr).into_owned()).unwrap_or_default());
        Fixture { dir, ports: Ports::from_base(41000), certs, stream }
    }

    fn env(&self) -> Env<'_> {
        Env { ports: &self.ports, certs: &self.certs, run_dir: &self.dir, nginx_stream: &self.stream }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn every_l7_config_has_the_png_rule_pools_and_one_worker() {
    let f = Fixture::new("l7");
    for setup in [Setup::L7, Setup::L7Log, Setup::Cookie, Setup::TlsRsa, Setup::Gzip, Setup::Brotli, Setup::Cache] {
        let sw = switchyard(setup, &f.env());
        assert!(sw.contains("path_suffix = \".png\", pool = \"images\""), "{sw}");
        assert!(sw.contains("workers = 1") && sw.contains("127.0.0.1:41001") && sw.contains("127.0.0.1:41003"));
        if setup == Setup::Brotli {
            continue;
        }
        let ha = haproxy(setup, &f.env()).expect("haproxy does L7");
        assert!(ha.contains("use_backend images if { path_end .png }") && ha.contains("nbthread 1"), "{ha}");
        assert!(ha.contains("option forwardfor") && ha.contains("balance roundrobin"));
        if setup != Setup::Cookie {
            let ng = nginx(setup, &f.env()).expect("nginx does L7");
            assert!(ng.contains("location ~ \\.png$") && ng.contains("worker_processes 1;"), "{ng}");
            assert!(ng.contains("$proxy_add_x_forwarded_for") && ng.contains("keepalive 64;"));
            assert!(ng.contains("daemon off;") && ng.contains(&format!("pid {}/nginx.pid", f.dir.display())));
        }
    }
}

#[test]
fn features_appear_in_each_config() {
    let f = Fixture::new("features");
    let e = f.env();
    assert!(haproxy(Setup::Cookie, &e).expect("cookie").contains("cookie SRV insert indirect nocache"));
    assert!(nginx(Setup::Cookie, &e).expect_err("no sticky in OSS").contains("NGINX Plus"));
    let tls = haproxy(Setup::TlsRsa, &e).expect("tls");
    assert!(tls.contains("ssl crt") && tls.contains("tune.ssl.cachesize 0") && tls.contains("no-tls-tickets"));
    let ntls = nginx(Setup::TlsEcdsa, &e).expect("tls");
    assert!(ntls.contains("ssl_session_cache off;") && ntls.contains("ssl_session_tickets off;"));
    assert!(ntls.contains("ssl_protocols TLSv1.2 TLSv1.3;"));
    assert!(ntls.contains("ecdsa-p256.crt"));
    assert!(haproxy(Setup::Gzip, &e).expect("gzip").contains("compression algo gzip"));
    assert!(nginx(Setup::Gzip, &e).expect("gzip").contains("gzip_comp_level 1;"));
    assert!(haproxy(Setup::Cache, &e).expect("cache").contains("http-response cache-store bench"));
    assert!(nginx(Setup::Cache, &e).expect("cache").contains("proxy_cache bench;"));
    assert!(haproxy(Setup::L4, &e).expect("l4").contains("mode tcp"));
    assert!(haproxy(Setup::Udp, &e).is_err());
    assert!(switchyard(Setup::L4, &e).contains("mode = \"tcp\""));
    assert!(switchyard(Setup::Udp, &e).contains("mode = \"udp\""));
    match &f.stream {
        NginxStream::Missing(_) => assert!(nginx(Setup::L4, &e).is_err()),
        _ => assert!(nginx(Setup::Udp, &e).expect("stream").contains("udp;")),
    }
}

#[test]
fn only_the_log_setup_logs_each_request_to_a_file_in_the_run_folder() {
    let f = Fixture::new("log");
    let e = f.env();
    let file = |t| access_log_path(&f.dir, t).display().to_string();
    let sw = switchyard(Setup::L7Log, &e);
    assert!(
        sw.ends_with(&format!("[access_log]\npath = \"{}\"\nformat = \"json\"\n", file(TargetKind::Switchyard))),
        "{sw}"
    );
    let ha = haproxy(Setup::L7Log, &e).expect("haproxy logs");
    assert!(ha.contains("log stdout format raw local0") && ha.contains("option httplog") && ha.contains("log global"));
    let ng = nginx(Setup::L7Log, &e).expect("nginx logs");
    assert!(ng.contains(&format!("access_log {};", file(TargetKind::Nginx))), "{ng}");
    assert!(file(TargetKind::Haproxy).starts_with(&f.dir.display().to_string()));
    assert!(!switchyard(Setup::L7, &e).contains("access_log"));
    assert!(!haproxy(Setup::L7, &e).expect("l7").contains("httplog"));
    assert!(nginx(Setup::L7, &e).expect("l7").contains("access_log off;"));
}

#[test]
fn failover_configs_check_their_own_two_servers() {
    let f = Fixture::new("failover");
    let e = f.env();
    let port = |t: TargetKind, i: usize| format!("127.0.0.1:{}", f.ports.failover[&t][i]);
    let sw = switchyard(Setup::Failover, &e);
    assert!(sw.contains("health_check = { type = \"tcp\", interval = \"250ms\", fall = 2, rise = 2 }"), "{sw}");
    assert!(sw.contains(&port(TargetKind::Switchyard, 0)) && sw.contains(&port(TargetKind::Switchyard, 1)));
    assert!(sw.contains("[admin]\nlisten = \"127.0.0.1:41031\""), "{sw}");
    let ha = haproxy(Setup::Failover, &e).expect("haproxy checks servers");
    assert!(ha.contains(&format!("server a {} check inter 250 fall 2 rise 2", port(TargetKind::Haproxy, 0))), "{ha}");
    assert!(ha.contains("option redispatch 1") && ha.contains("stats socket"), "{ha}");
    let ng = nginx(Setup::Failover, &e).expect("nginx, passively");
    assert!(ng.contains(&format!("server {} max_fails=1 fail_timeout=10s;", port(TargetKind::Nginx, 1))), "{ng}");
    // Each target has its own pair, apart from every other port of the run.
    let all = f.ports.all();
    let distinct: std::collections::BTreeSet<u16> = all.iter().copied().collect();
    assert_eq!(distinct.len(), all.len());
}

#[test]
fn stream_module_detection() {
    assert_eq!(nginx_stream("configure arguments: --with-stream --with-http_ssl_module"), NginxStream::Static);
    // Without the module in the configured path, the Debian locations decide
    // (libnginx-mod-stream may or may not be installed on this machine).
    let got = nginx_stream("--with-stream=dynamic --modules-path=/nonexistent");
    let installed = ["/usr/lib/nginx/modules", "/usr/share/nginx/modules"]
        .iter()
        .map(|d| std::path::Path::new(d).join("ngx_stream_module.so"))
        .find(|p| p.is_file());
    match installed {
        Some(path) => assert_eq!(got, NginxStream::Module(path)),
        None => assert!(matches!(got, NginxStream::Missing(_)), "{got:?}"),
    }
    // The configured modules path comes first.
    let f = Fixture::new("stream");
    let module = f.dir.join("ngx_stream_module.so");
    std::fs::write(&module, b"").expect("fake module");
    let v = format!("--with-stream=dynamic --modules-path={}", f.dir.display());
    assert_eq!(nginx_stream(&v), NginxStream::Module(module));
}

#[test]
fn haproxy_accepts_the_generated_configs() {
    let Some(bin) = which("haproxy") else {
        eprintln!("haproxy not installed: config validation skipped");
        return;
    };
    let f = Fixture::new("haproxy");
    for setup in SETUPS {
        let Ok(cfg) = haproxy(setup, &f.env()) else { continue };
        let file = f.dir.join(config_file_name(TargetKind::Haproxy, setup));
        std::fs::write(&file, cfg).expect("write");
        let out = std::process::Command::new(&bin).arg("-c").arg("-f").arg(&file).output().expect("haproxy -c");
        assert!(out.status.success(), "{setup:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn nginx_accepts_the_generated_configs() {
    let Some(bin) = which("nginx") else {
        eprintln!("nginx not installed: config validation skipped");
        return;
    };
    let f = Fixture::new("nginx");
    for setup in SETUPS {
        let Ok(cfg) = nginx(setup, &f.env()) else { continue };
        let file = f.dir.join(config_file_name(TargetKind::Nginx, setup));
        std::fs::write(&file, cfg).expect("write");
        let log = f.dir.join("error.log");
        let out = std::process::Command::new(&bin)
            .arg("-t")
            .arg("-p")
            .arg(&f.dir)
            .arg("-e")
            .arg(&log)
            .arg("-c")
            .arg(&file)
            .output()
            .expect("nginx -t");
        assert!(out.status.success(), "{setup:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn switchyard_compression_and_cache_use_the_spec_keys() {
    let f = Fixture::new("sy-fn");
    let e = f.env();
    let line = |setup| {
        let sw = switchyard(setup, &e);
        // Service level: after `pool`, before `rules` and the first `[[pool]]`.
        let service = sw.split("[[pool]]").next().expect("service").to_string();
        let found =
            service.lines().find(|l| l.starts_with("compression =") || l.starts_with("cache =")).map(String::from);
        (found, sw)
    };
    let cases = [
        (Setup::Gzip, "compression = { algorithms = [\"gzip\"], gzip_level = 1, types = [\"text/html\"] }"),
        (Setup::Brotli, "compression = { algorithms = [\"br\"], brotli_level = 4, types = [\"text/html\"] }"),
        (Setup::Zstd, "compression = { algorithms = [\"zstd\"], zstd_level = 3, types = [\"text/html\"] }"),
        (Setup::Cache, "cache = { size = \"256MiB\" }"),
    ];
    for (setup, want) in cases {
        let (found, sw) = line(setup);
        assert_eq!(found.as_deref(), Some(want), "{setup:?}: {sw}");
        assert!(sw.contains("rules = [ { path_suffix = \".png\", pool = \"images\" } ]"), "{sw}");
    }
    for setup in [Setup::L7, Setup::L7Log, Setup::Cookie, Setup::TlsRsa, Setup::Failover] {
        assert_eq!(line(setup).0, None, "{setup:?}");
    }
}

#[test]
fn haproxy_compresses_gzip_only_and_caches_what_switchyard_caches() {
    let f = Fixture::new("ha-fn");
    let e = f.env();
    let gz = haproxy(Setup::Gzip, &e).expect("gzip");
    let main = gz.split("\nbackend main\n").nth(1).expect("backend main");
    assert!(main.contains("compression algo gzip\n    compression type text/html\n"), "{gz}");
    assert!(gz.contains("tune.comp.maxlevel 1"), "{gz}");
    for setup in [Setup::Brotli, Setup::Zstd] {
        assert!(haproxy(setup, &e).expect_err("no brotli or zstd").contains("gzip and deflate only"));
    }
    let cache = haproxy(Setup::Cache, &e).expect("cache");
    assert!(cache.contains("http-request cache-use bench\n    http-response cache-store bench\n"), "{cache}");
    assert!(cache.contains("\ncache bench\n    total-max-size 256\n    max-object-size 8388608\n"), "{cache}");
    assert!(!haproxy(Setup::L7, &e).expect("l7").contains("compression"));
    assert!(!haproxy(Setup::L7, &e).expect("l7").contains("cache-use"));
    assert_eq!(cache_max_object(TargetKind::Haproxy), Some(8 * 1024 * 1024));
    assert!(cache_max_object(TargetKind::Haproxy) >= Some(crate::suite::plan::SIZES[4]), "every size cacheable");
}

#[test]
fn nginx_gzips_at_level_one_and_caches_in_the_run_folder() {
    let f = Fixture::new("ng-fn");
    let e = f.env();
    let gz = nginx(Setup::Gzip, &e).expect("gzip");
    for d in ["gzip on;", "gzip_comp_level 1;", "gzip_proxied any;", "gzip_min_length 256;", "gzip_vary on;"] {
        assert!(gz.contains(d), "{d}: {gz}");
    }
    assert!(!gz.contains("gzip_types"), "text/html is implied; naming it draws a warning");
    assert!(nginx(Setup::Brotli, &e).expect_err("no brotli").contains("ngx_brotli"));
    assert!(nginx(Setup::Zstd, &e).expect_err("no zstd").contains("zstd"));
    let cache = nginx(Setup::Cache, &e).expect("cache");
    let path = format!("proxy_cache_path {}/cache levels=1:2 keys_zone=bench:10m max_size=256m", f.dir.display());
    assert!(cache.contains(&path), "{cache}");
    assert!(cache.contains("proxy_cache bench;") && cache.contains("proxy_cache_valid 200 10m;"), "{cache}");
    assert!(
        !nginx(Setup::L7, &e).expect("l7").contains("gzip")
            && !nginx(Setup::L7, &e).expect("l7").contains("proxy_cache")
    );
}

#[test]
fn http2_setups_speak_h2_where_each_target_can() {
    let f = Fixture::new("h2");
    let e = f.env();
    let sw_tls = switchyard(Setup::H2Tls, &e);
    assert!(sw_tls.contains("mode = \"https\"") && sw_tls.contains("ecdsa-p256.crt"), "{sw_tls}");
    assert!(!switchyard(Setup::H2c, &e).contains("protocol = \"h2\""));
    assert_eq!(switchyard(Setup::H2Upstream, &e).matches("protocol = \"h2\"").count(), 2, "both pools");
    let ha_tls = haproxy(Setup::H2Tls, &e).expect("h2 over TLS");
    assert!(ha_tls.contains("ssl crt") && ha_tls.contains("alpn h2,http/1.1"), "{ha_tls}");
    let ha_h2c = haproxy(Setup::H2c, &e).expect("h2c");
    assert!(ha_h2c.contains("bind 127.0.0.1:41012 proto h2") && !ha_h2c.contains("41001 proto h2"), "{ha_h2c}");
    let ha_up = haproxy(Setup::H2Upstream, &e).expect("h2 to servers");
    assert_eq!(ha_up.matches(" proto h2").count(), 4, "the bind and three servers: {ha_up}");
    assert!(nginx(Setup::H2Tls, &e).expect("h2 over TLS").contains("listen 127.0.0.1:41013 ssl http2;"));
    assert!(nginx(Setup::H2c, &e).expect("h2c").contains("listen 127.0.0.1:41013 http2;"));
    assert!(nginx(Setup::H2Upstream, &e).expect_err("no h2 to servers").contains("grpc_pass"));
}

#[test]
fn the_http3_setup_adds_quic_to_the_h2_tls_service_and_peers_say_why_they_cannot() {
    let f = Fixture::new("h3");
    let e = f.env();
    let sw = switchyard(Setup::H3, &e);
    // The HTTP/2-over-TLS service with QUIC on the same address: one line apart.
    assert_eq!(
        sw.replace("http3 = true\n", "").replace("(setup: h3)", "(setup: h2-tls)"),
        switchyard(Setup::H2Tls, &e)
    );
    assert!(sw.contains("mode = \"https\"") && sw.contains("ecdsa-p256.crt") && sw.contains("http3 = true"), "{sw}");
    assert!(!switchyard(Setup::H2Tls, &e).contains("http3"));
    assert!(haproxy(Setup::H3, &e).expect_err("no QUIC in Debian's build").contains("-QUIC"));
    assert!(nginx(Setup::H3, &e).expect_err("no HTTP/3 in 1.22").contains("1.25.0"));
}

#[test]
fn traced_setups_send_spans_to_an_origin_and_peers_say_why_they_cannot() {
    let f = Fixture::new("traced");
    for (setup, ratio) in [(Setup::Traced1, "0.01"), (Setup::TracedAll, "1.0")] {
        let sw = switchyard(setup, &f.env());
        assert!(sw.contains("path_suffix = \".png\", pool = \"images\""), "{sw}");
        // The table comes last: every key after its header belongs to it.
        let tracing = sw.split("\n[tracing]\n").nth(1).expect("a [tracing] table");
        assert!(tracing.contains("endpoint = \"http://127.0.0.1:41003/v1/traces\""), "{sw}");
        assert!(tracing.contains(&format!("sample_ratio = {ratio}")), "{sw}");
        assert!(haproxy(setup, &f.env()).expect_err("no OTLP").contains("OpenTracing"));
        assert!(nginx(setup, &f.env()).expect_err("no OTLP").contains("ngx_otel_module"));
    }
    assert!(!switchyard(Setup::L7, &f.env()).contains("[tracing]"));
}
