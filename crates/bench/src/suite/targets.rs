//! The targets and their generated configurations.
//!
//! For each [`Setup`] every target gets a functionally identical configuration: pool
//! `main` (servers `a` and `b`, round robin), pool `images` (server `c`) chosen for paths
//! ending in `.png`, keep-alive to clients and servers, `X-Forwarded-For`, one worker,
//! plus the setup's function (cookie insert, TLS with the same certificate, gzip level 1
//! of `text/html`, a response cache, a TCP or UDP relay, an access log line per request
//! written to a file in the run folder, HTTP/2 to clients over TLS or h2c, HTTP/3 to
//! clients over QUIC, HTTP/2 to the servers). A target that cannot express the
//! function gets a reason instead of a configuration. switchyard's capabilities are not
//! hard-coded: its configuration is written with the keys the feature would use and
//! `switchyard check` decides (see [`crate::suite::runner`]), so cells light up as
//! features land.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::plan::{Setup, TargetKind};

/// Loopback ports of one run.
#[derive(Debug, Clone)]
pub struct Ports {
    /// Origins `main-a`, `main-b` and `images-c`.
    pub origins: [u16; 3],
    /// The UDP echo server.
    pub udp_echo: u16,
    /// Listening port of each proxy target.
    pub targets: BTreeMap<TargetKind, u16>,
    /// The two origins (`fo-a`, `fo-b`) of each proxy target in [`Setup::Failover`]:
    /// each target gets its own, since one of them is killed during its run.
    pub failover: BTreeMap<TargetKind, [u16; 2]>,
    /// switchyard's admin listener in [`Setup::Failover`] (where its view of the
    /// servers is read).
    pub admin: u16,
}

impl Ports {
    /// Ports from `base`: origins base+1..3, echo base+4, targets base+11.. (the floor
    /// base+14, the floor on io_uring base+15, a second switchyard build base+16), failover origins base+21.. (two per proxy), switchyard's admin base+31.
    pub fn from_base(base: u16) -> Ports {
        let proxies = [TargetKind::Switchyard, TargetKind::Haproxy, TargetKind::Nginx];
        let targets = proxies
            .into_iter()
            .chain([TargetKind::Floor, TargetKind::FloorUring, TargetKind::SwitchyardB])
            .enumerate()
            .map(|(i, t)| (t, base + 11 + i as u16))
            .collect();
        let failover = proxies
            .into_iter()
            .enumerate()
            .map(|(i, t)| (t, [base + 21 + 2 * i as u16, base + 22 + 2 * i as u16]))
            .collect();
        Ports { origins: [base + 1, base + 2, base + 3], udp_echo: base + 4, targets, failover, admin: base + 31 }
    }

    /// Every TCP and UDP port used.
    pub fn all(&self) -> Vec<u16> {
        let mut v = self.origins.to_vec();
        v.push(self.udp_echo);
        v.extend(self.targets.values());
        v.extend(self.failover.values().flatten());
        v.push(self.admin);
        v
    }

    /// Where the generator connects for `target` in `setup` (direct: origin `main-a`, or the echo).
    pub fn target_port(&self, target: TargetKind, setup: Setup) -> u16 {
        match target {
            TargetKind::Direct if setup == Setup::Udp => self.udp_echo,
            TargetKind::Direct => self.origins[0],
            t => self.targets[&t],
        }
    }
}

/// PEM files of one generated certificate.
#[derive(Debug, Clone)]
pub struct CertFiles {
    /// Certificate.
    pub cert: PathBuf,
    /// Private key (PKCS#8).
    pub key: PathBuf,
    /// Certificate followed by key (HAProxy's `crt`).
    pub combined: PathBuf,
}

/// The certificates every TLS target uses (`localhost`, self-signed).
#[derive(Debug, Clone)]
pub struct Certs {
    /// RSA-2048 (PKCS#1 v1.5, SHA-256).
    pub rsa: CertFiles,
    /// ECDSA P-256.
    pub ecdsa: CertFiles,
}

/// Generates both certificates into `dir` with rcgen (aws-lc-rs keys).
pub fn generate_certs(dir: &Path) -> anyhow::Result<Certs> {
    std::fs::create_dir_all(dir)?;
    let rsa = rcgen::KeyPair::generate_rsa_for(&rcgen::PKCS_RSA_SHA256, rcgen::RsaKeySize::_2048)?;
    let ecdsa = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let write = |name: &str, key: rcgen::KeyPair| -> anyhow::Result<CertFiles> {
        let params = rcgen::CertificateParams::new(vec!["localhost".to_string()])?;
        let cert = params.self_signed(&key)?;
        let files = CertFiles {
            cert: dir.join(format!("{name}.crt")),
            key: dir.join(format!("{name}.key")),
            combined: dir.join(format!("{name}.pem")),
        };
        std::fs::write(&files.cert, cert.pem())?;
        std::fs::write(&files.key, key.serialize_pem())?;
        std::fs::write(&files.combined, format!("{}{}", cert.pem(), key.serialize_pem()))?;
        Ok(files)
    };
    Ok(Certs { rsa: write("rsa2048", rsa)?, ecdsa: write("ecdsa-p256", ecdsa)? })
}

/// How NGINX's stream module (L4, UDP) can be had on this machine.
#[derive(Debug, Clone, PartialEq)]
pub enum NginxStream {
    /// Compiled in.
    Static,
    /// A dynamic module to `load_module`.
    Module(PathBuf),
    /// Not available: the reason.
    Missing(String),
}

/// Looks for the stream module in `nginx -V` output and the usual module folders.
pub fn nginx_stream(v_output: &str) -> NginxStream {
    if v_output.split_whitespace().any(|a| a == "--with-stream") {
        return NginxStream::Static;
    }
    let mut dirs = vec![PathBuf::from("/usr/lib/nginx/modules"), PathBuf::from("/usr/share/nginx/modules")];
    if let Some(p) = v_output.split_whitespace().find_map(|a| a.strip_prefix("--modules-path=")) {
        dirs.insert(0, PathBuf::from(p));
    }
    for d in dirs {
        let m = d.join("ngx_stream_module.so");
        if m.is_file() {
            return NginxStream::Module(m);
        }
    }
    NginxStream::Missing(
        "the NGINX stream module (L4/UDP) is not installed (built as a dynamic module, \
         ngx_stream_module.so not found; Debian: libnginx-mod-stream)"
            .into(),
    )
}

/// What config generation needs to know.
#[derive(Debug, Clone)]
pub struct Env<'a> {
    /// Ports.
    pub ports: &'a Ports,
    /// Certificates (TLS setups).
    pub certs: &'a Certs,
    /// Folder for the target's run-time files (NGINX pid, temp and cache folders).
    pub run_dir: &'a Path,
    /// NGINX stream availability.
    pub nginx_stream: &'a NginxStream,
}

/// A generated configuration, or why the target cannot do the setup.
pub type Generated = Result<String, String>;

/// The access log file of a target in [`Setup::L7Log`], in the run folder. HAProxy 2.6
/// cannot write a file itself (its `log` targets are syslog, a socket or a file
/// descriptor), so it logs to standard output and the runner points that at this file.
pub fn access_log_path(run_dir: &Path, target: TargetKind) -> PathBuf {
    run_dir.join(format!("{}-access.log", target.name()))
}

const HEADER: &str = "generated by `switchyard bench`";

/// switchyard's configuration. Features not built yet are written with the keys they
/// are planned to use; `switchyard check` refuses them until they exist.
pub fn switchyard(setup: Setup, env: &Env) -> String {
    switchyard_as(TargetKind::Switchyard, setup, env)
}

/// switchyard's configuration for `target`: [`TargetKind::Switchyard`], or the second
/// build ([`TargetKind::SwitchyardB`]), the same but for its listening port and access
/// log (it has no failover setup: [`crate::suite`] reports that cell not supported).
pub fn switchyard_as(target: TargetKind, setup: Setup, env: &Env) -> String {
    let p = env.ports;
    let port = p.targets[&target];
    if setup == Setup::Failover {
        let [a, b] = p.failover[&TargetKind::Switchyard];
        return format!(
            "# {HEADER} (setup: failover)\nworkers = 1\ndrain_timeout = \"1s\"\n\n\
             [[service]]\nname = \"bench\"\nlisten = \"127.0.0.1:{port}\"\npool = \"main\"\n\n\
             [[pool]]\nname = \"main\"\nbalance = \"round-robin\"\n\
             health_check = {{ type = \"tcp\", {FAILOVER_CHECK} }}\n\
             servers = [\n  {{ address = \"127.0.0.1:{a}\", name = \"a\" }},\n  \
             {{ address = \"127.0.0.1:{b}\", name = \"b\" }},\n]\n\n\
             [admin]\nlisten = \"127.0.0.1:{}\"\n",
            p.admin
        );
    }
    let mut s = format!("# {HEADER} (setup: {})\nworkers = 1\ndrain_timeout = \"1s\"\n\n", setup.name());
    s += "[[service]]\nname = \"bench\"\n";
    let _ = writeln!(s, "listen = \"127.0.0.1:{port}\"");
    match setup {
        Setup::L4 => s += "mode = \"tcp\"\npool = \"main\"\n",
        Setup::Udp => s += "mode = \"udp\"\npool = \"echo\"\n",
        _ => {
            if setup.tls() {
                let c = if setup == Setup::TlsRsa { &env.certs.rsa } else { &env.certs.ecdsa };
                // HTTP/2 is on by default: offered by ALPN on `https`, h2c accepted on `http`.
                s += "mode = \"https\"\n";
                let _ = writeln!(
                    s,
                    "tls = {{ certificate = \"{}\", key = \"{}\", session_cache = false, tickets = false }}",
                    c.cert.display(),
                    c.key.display()
                );
            }
            if setup.http3() {
                // QUIC on the UDP side of the same address, beside HTTP/1.1 and HTTP/2 over TLS.
                s += "http3 = true\n";
            }
            s += "pool = \"main\"\n";
            if let Some(line) = switchyard_function(setup) {
                s += line;
                s += "\n";
            }
            s += "rules = [ { path_suffix = \".png\", pool = \"images\" } ]\n";
        }
    }
    if setup == Setup::Udp {
        let _ = write!(
            s,
            "\n[[pool]]\nname = \"echo\"\nservers = [ {{ address = \"127.0.0.1:{}\", name = \"echo\" }} ]\n",
            p.udp_echo
        );
        return s;
    }
    s += "\n[[pool]]\nname = \"main\"\nbalance = \"round-robin\"\n";
    let h2_pools = setup == Setup::H2Upstream;
    if h2_pools {
        s += "protocol = \"h2\"\n";
    }
    if setup == Setup::Cookie {
        s += "persistence = { cookie = \"SRV\", mode = \"insert\" }\n";
    }
    let _ = writeln!(
        s,
        "servers = [\n  {{ address = \"127.0.0.1:{}\", name = \"a\" }},\n  {{ address = \"127.0.0.1:{}\", name = \"b\" }},\n]",
        p.origins[0], p.origins[1]
    );
    if setup != Setup::L4 {
        let protocol = if h2_pools { "protocol = \"h2\"\n" } else { "" };
        let _ = writeln!(
            s,
            "\n[[pool]]\nname = \"images\"\n{protocol}servers = [ {{ address = \"127.0.0.1:{}\", name = \"c\" }} ]",
            p.origins[2]
        );
    }
    if setup == Setup::L7Log {
        // Last: every key after a table header belongs to that table.
        let path = access_log_path(env.run_dir, target);
        let _ = write!(s, "\n[access_log]\npath = \"{}\"\nformat = \"json\"\n", path.display());
    }
    if matches!(setup, Setup::Traced1 | Setup::TracedAll) {
        // Spans go by OTLP/HTTP to the third origin, which reads each POST and answers 200.
        let ratio = if setup == Setup::Traced1 { "0.01" } else { "1.0" };
        let _ = write!(
            s,
            "\n[tracing]\nendpoint = \"http://127.0.0.1:{}/v1/traces\"\nsample_ratio = {ratio}\n",
            p.origins[2]
        );
    }
    s
}

/// The service-level line of switchyard's compression and cache setups, in the keys of
/// the issue 8 spec (the same levels as the physical limits the suite measures: gzip 1,
/// brotli 4, zstd 3; the cache as large as HAProxy's and NGINX's, 256 MiB).
pub fn switchyard_function(setup: Setup) -> Option<&'static str> {
    Some(match setup {
        Setup::Gzip => "compression = { algorithms = [\"gzip\"], gzip_level = 1, types = [\"text/html\"] }",
        Setup::Brotli => "compression = { algorithms = [\"br\"], brotli_level = 4, types = [\"text/html\"] }",
        Setup::Zstd => "compression = { algorithms = [\"zstd\"], zstd_level = 3, types = [\"text/html\"] }",
        Setup::Cache => "cache = { size = \"256MiB\" }",
        _ => return None,
    })
}

/// The largest object each target's cache stores as configured here (HAProxy's
/// `max-object-size`, switchyard's default `max_object`; NGINX has no per-object limit
/// besides `max_size`). A cache-hit cell of a larger size is not supported.
pub fn cache_max_object(target: TargetKind) -> Option<u64> {
    match target {
        TargetKind::Haproxy => Some(HAPROXY_CACHE_MAX_OBJECT),
        TargetKind::Switchyard | TargetKind::SwitchyardB => Some(8 * 1024 * 1024),
        _ => None,
    }
}

/// HAProxy's `max-object-size` (bytes): switchyard's default `max_object` (8 MiB).
/// HAProxy 2.6 allows up to half of `total-max-size`; larger objects are not cached.
const HAPROXY_CACHE_MAX_OBJECT: u64 = 8 * 1024 * 1024;

/// Why HAProxy cannot do HTTP/3 here. HAProxy 2.6 can speak QUIC only when built with
/// `USE_QUIC=1` against a TLS library with a QUIC API (quictls, not OpenSSL 3.0); Debian's
/// build shows `-QUIC` in `haproxy -vv`'s feature list.
const HAPROXY_NO_QUIC: &str = "HAProxy 2.6 as Debian builds it has no QUIC (`haproxy -vv` feature list: -QUIC): \
                               its QUIC needs a TLS library with a QUIC API (quictls), not the OpenSSL 3.0 it is \
                               built with";

/// The health check of [`Setup::Failover`] in switchyard's words (HAProxy: `check inter
/// 250 fall 2 rise 2`).
const FAILOVER_CHECK: &str = "interval = \"250ms\", fall = 2, rise = 2";

/// The stats socket HAProxy opens in [`Setup::Failover`], where the runner reads its view
/// of the servers.
pub fn haproxy_stats_socket(run_dir: &Path) -> PathBuf {
    run_dir.join("haproxy-failover.sock")
}

/// The error log NGINX writes (every setup), where the failover runner reads which
/// requests met the killed server.
pub fn nginx_error_log(run_dir: &Path) -> PathBuf {
    run_dir.join("error.log")
}

/// HAProxy's configuration (`nbthread 1`).
pub fn haproxy(setup: Setup, env: &Env) -> Generated {
    let p = env.ports;
    let port = p.targets[&TargetKind::Haproxy];
    if setup == Setup::Udp {
        return Err("HAProxy open source does not proxy UDP".into());
    }
    if matches!(setup, Setup::Traced1 | Setup::TracedAll) {
        return Err("HAProxy 2.6 traces through its OpenTracing filter and a vendor tracer library, not OTLP; \
                    Debian packages no such library"
            .into());
    }
    if matches!(setup, Setup::Brotli | Setup::Zstd) {
        return Err("HAProxy 2.6 compresses with gzip and deflate only (no brotli, no zstd)".into());
    }
    if setup.http3() {
        return Err(HAPROXY_NO_QUIC.into());
    }
    if setup == Setup::Failover {
        // One retry, on another server (`option redispatch 1`): switchyard's default
        // `retries = 1`, which moves a failed connect to another server.
        let [a, b] = p.failover[&TargetKind::Haproxy];
        let check = "check inter 250 fall 2 rise 2";
        return Ok(format!(
            "# {HEADER} (setup: failover)\nglobal\n    nbthread 1\n    maxconn 9000\n    \
             stats socket {} mode 600 level admin\n\n\
             defaults\n    mode http\n    option http-keep-alive\n    option forwardfor\n    http-reuse always\n    \
             retries 1\n    option redispatch 1\n    timeout http-request 10s\n    timeout http-keep-alive 60s\n    \
             timeout connect 3s\n    timeout client 60s\n    timeout server 30s\n\n\
             frontend bench\n    bind 127.0.0.1:{port}\n    default_backend main\n\n\
             backend main\n    balance roundrobin\n    server a 127.0.0.1:{a} {check}\n    server b 127.0.0.1:{b} {check}\n",
            haproxy_stats_socket(env.run_dir).display()
        ));
    }
    let mut s = format!("# {HEADER} (setup: {})\nglobal\n    nbthread 1\n    maxconn 9000\n", setup.name());
    if setup.tls() {
        // TLS 1.2 and 1.3 for every target (NGINX 1.22's default lacks 1.3).
        s += "    tune.ssl.cachesize 0\n    ssl-default-bind-options ssl-min-ver TLSv1.2 no-tls-tickets\n";
        // HAProxy orders TLS 1.3 suites itself (OpenSSL's order, AES-256 first); this
        // order makes it pick the suite the generator and the other targets use.
        s += "    ssl-default-bind-ciphersuites TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256\n";
    }
    if setup == Setup::Gzip {
        // Level 1 as for the others. Debian's HAProxy compresses with libslz
        // (`haproxy -vv`: "Built with libslz"), which has a single level anyway.
        s += "    tune.comp.maxlevel 1\n";
    }
    if setup == Setup::L7Log {
        // Raw lines (no syslog header) on standard output: the runner sends it to
        // `access_log_path`. HAProxy writes each line at the end of its request.
        s += "    log stdout format raw local0\n";
    }
    let mode = if setup == Setup::L4 { "tcp" } else { "http" };
    let _ = write!(s, "\ndefaults\n    mode {mode}\n");
    if setup == Setup::L7Log {
        s += "    log global\n    option httplog\n";
    }
    if setup != Setup::L4 {
        s += "    option http-keep-alive\n    option forwardfor\n    http-reuse always\n";
        s += "    timeout http-request 10s\n    timeout http-keep-alive 60s\n";
    }
    s += "    timeout connect 3s\n    timeout client 60s\n    timeout server 30s\n\n";
    s += "frontend bench\n";
    match setup {
        Setup::TlsRsa | Setup::TlsEcdsa | Setup::H2Tls => {
            let c = if setup == Setup::TlsRsa { &env.certs.rsa } else { &env.certs.ecdsa };
            // ALPN `h2` as switchyard and NGINX offer it (HAProxy offers none by default).
            let alpn = if setup == Setup::H2Tls { " alpn h2,http/1.1" } else { "" };
            let _ = writeln!(s, "    bind 127.0.0.1:{port} ssl crt {} no-tls-tickets{alpn}", c.combined.display());
            s += "    http-request set-header X-Forwarded-Proto https\n";
        }
        Setup::H2c | Setup::H2Upstream => {
            // h2c with prior knowledge: `proto h2` makes the listener speak HTTP/2 only.
            let _ = writeln!(s, "    bind 127.0.0.1:{port} proto h2");
            s += "    http-request set-header X-Forwarded-Proto http\n";
        }
        _ => {
            let _ = writeln!(s, "    bind 127.0.0.1:{port}");
            if setup != Setup::L4 {
                s += "    http-request set-header X-Forwarded-Proto http\n";
            }
        }
    }
    if setup != Setup::L4 {
        s += "    use_backend images if { path_end .png }\n";
    }
    s += "    default_backend main\n\nbackend main\n    balance roundrobin\n";
    match setup {
        Setup::Cookie => s += "    cookie SRV insert indirect nocache\n",
        Setup::Gzip => s += "    compression algo gzip\n    compression type text/html\n",
        Setup::Cache => s += "    http-request cache-use bench\n    http-response cache-store bench\n",
        _ => {}
    }
    let cookie = |n: &str| if setup == Setup::Cookie { format!(" cookie {n}") } else { String::new() };
    // HTTP/2 to the servers: h2c with prior knowledge, as switchyard's `protocol = "h2"`.
    let proto = if setup == Setup::H2Upstream { " proto h2" } else { "" };
    let _ = writeln!(s, "    server a 127.0.0.1:{}{}{proto}", p.origins[0], cookie("a"));
    let _ = writeln!(s, "    server b 127.0.0.1:{}{}{proto}", p.origins[1], cookie("b"));
    if setup != Setup::L4 {
        let _ = writeln!(s, "\nbackend images\n    server c 127.0.0.1:{}{proto}", p.origins[2]);
    }
    if setup == Setup::Cache {
        // 256 MB as switchyard's `size`; objects up to switchyard's default `max_object`.
        let _ = write!(
            s,
            "\ncache bench\n    total-max-size 256\n    max-object-size {HAPROXY_CACHE_MAX_OBJECT}\n    max-age 3600\n"
        );
    }
    Ok(s)
}

/// NGINX's configuration (`worker_processes 1`, `daemon off`, files under the run folder).
pub fn nginx(setup: Setup, env: &Env) -> Generated {
    let p = env.ports;
    let port = p.targets[&TargetKind::Nginx];
    let dir = env.run_dir.display();
    if setup == Setup::Cookie {
        return Err("NGINX open source has no cookie-insert persistence (`sticky cookie` is NGINX Plus only)".into());
    }
    if matches!(setup, Setup::Traced1 | Setup::TracedAll) {
        return Err("NGINX 1.22 has no OpenTelemetry exporter (ngx_otel_module came with 1.23.4 and is not packaged \
                    by Debian 12)"
            .into());
    }
    if setup == Setup::Brotli {
        return Err("NGINX has no brotli of its own; the third-party ngx_brotli module is not part of Debian's \
                    nginx (package libnginx-mod-http-brotli-filter, not installed)"
            .into());
    }
    if setup == Setup::Zstd {
        return Err("NGINX has no zstd of its own and Debian packages no zstd module".into());
    }
    if setup.http3() {
        return Err("NGINX 1.22 has no HTTP/3: ngx_http_v3_module (`listen … quic`) came with 1.25.0, and \
                    Debian 12 packages 1.22"
            .into());
    }
    if setup == Setup::H2Upstream {
        return Err("NGINX speaks HTTP/2 to servers only through `grpc_pass`, for gRPC; `proxy_pass` is \
                    HTTP/1.x only (`proxy_http_version` accepts 1.0 and 1.1)"
            .into());
    }
    if setup == Setup::Failover {
        // No active health check in NGINX open source (`health_check` is NGINX Plus):
        // the passive one instead. One failed request takes a server out for
        // `fail_timeout`, longer than the run observes; the failed request itself moves
        // on to the other server (`proxy_next_upstream error timeout`, the default).
        let [a, b] = p.failover[&TargetKind::Nginx];
        let log = nginx_error_log(env.run_dir);
        return Ok(format!(
            "# {HEADER} (setup: failover)\nworker_processes 1;\nworker_rlimit_nofile 20000;\ndaemon off;\n\
             pid {dir}/nginx.pid;\nerror_log {} warn;\n\nevents {{\n    worker_connections 10000;\n}}\n\n\
             http {{\n    access_log off;\n    client_body_temp_path {dir}/body;\n    proxy_temp_path {dir}/proxy;\n    \
             fastcgi_temp_path {dir}/fastcgi;\n    uwsgi_temp_path {dir}/uwsgi;\n    scgi_temp_path {dir}/scgi;\n    \
             keepalive_timeout 60s;\n    keepalive_requests 1000000;\n\n    \
             upstream main {{\n        server 127.0.0.1:{a} max_fails=1 fail_timeout=10s;\n        \
             server 127.0.0.1:{b} max_fails=1 fail_timeout=10s;\n        keepalive 64;\n        \
             keepalive_requests 1000000;\n    }}\n\n    server {{\n        listen 127.0.0.1:{port};\n        \
             proxy_http_version 1.1;\n        proxy_set_header Connection \"\";\n        \
             proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n        \
             location / {{\n            proxy_pass http://main;\n        }}\n    }}\n}}\n",
            log.display()
        ));
    }
    let stream = matches!(setup, Setup::L4 | Setup::Udp);
    let mut s = format!("# {HEADER} (setup: {})\n", setup.name());
    if stream {
        match env.nginx_stream {
            NginxStream::Static => {}
            NginxStream::Module(m) => {
                let _ = writeln!(s, "load_module {};", m.display());
            }
            NginxStream::Missing(why) => return Err(why.clone()),
        }
    }
    // NGINX counts a stream session's server connection against `worker_connections`
    // too: the concurrency test's idle relays need two per client.
    let connections = if setup == Setup::L4 { 19_000 } else { 10_000 };
    let _ = write!(
        s,
        "worker_processes 1;\nworker_rlimit_nofile 20000;\ndaemon off;\npid {dir}/nginx.pid;\n\
         error_log {dir}/error.log warn;\n\nevents {{\n    worker_connections {connections};\n}}\n\n"
    );
    if stream {
        s += "stream {\n";
        if setup == Setup::L4 {
            let _ = write!(
                s,
                "    upstream main {{\n        server 127.0.0.1:{};\n        server 127.0.0.1:{};\n    }}\n\
                 \x20   server {{\n        listen 127.0.0.1:{port};\n        proxy_pass main;\n    }}\n",
                p.origins[0], p.origins[1]
            );
        } else {
            let _ = write!(
                s,
                "    upstream echo {{\n        server 127.0.0.1:{};\n    }}\n    server {{\n        \
                 listen 127.0.0.1:{port} udp;\n        proxy_pass echo;\n        proxy_responses 1;\n    }}\n",
                p.udp_echo
            );
        }
        s += "}\n";
        return Ok(s);
    }
    let access_log = match setup {
        Setup::L7Log => format!("{}", access_log_path(env.run_dir, TargetKind::Nginx).display()),
        _ => "off".into(),
    };
    let _ = write!(
        s,
        "http {{\n    access_log {access_log};\n    client_body_temp_path {dir}/body;\n    proxy_temp_path {dir}/proxy;\n    \
         fastcgi_temp_path {dir}/fastcgi;\n    uwsgi_temp_path {dir}/uwsgi;\n    scgi_temp_path {dir}/scgi;\n    \
         keepalive_timeout 60s;\n    keepalive_requests 1000000;\n"
    );
    if setup == Setup::Cache {
        let _ = writeln!(
            s,
            "    proxy_cache_path {dir}/cache levels=1:2 keys_zone=bench:10m max_size=256m inactive=60m use_temp_path=off;"
        );
    }
    let _ = write!(
        s,
        "\n    upstream main {{\n        server 127.0.0.1:{};\n        server 127.0.0.1:{};\n        keepalive 64;\n        \
         keepalive_requests 1000000;\n    }}\n    upstream images {{\n        server 127.0.0.1:{};\n        \
         keepalive 64;\n        keepalive_requests 1000000;\n    }}\n\n    server {{\n",
        p.origins[0], p.origins[1], p.origins[2]
    );
    // NGINX 1.22 (Debian 12) turns HTTP/2 on per listener (`http2 on` came in 1.25.1);
    // without `ssl` such a listener takes h2c with prior knowledge only.
    let http2 = if setup.http2() { " http2" } else { "" };
    if setup.tls() {
        let c = if setup == Setup::TlsRsa { &env.certs.rsa } else { &env.certs.ecdsa };
        let _ = write!(
            s,
            "        listen 127.0.0.1:{port} ssl{http2};\n        ssl_certificate {};\n        ssl_certificate_key {};\n        \
             ssl_protocols TLSv1.2 TLSv1.3;\n        ssl_session_cache off;\n        ssl_session_tickets off;\n",
            c.cert.display(),
            c.key.display()
        );
    } else {
        let _ = writeln!(s, "        listen 127.0.0.1:{port}{http2};");
    }
    s += "        proxy_http_version 1.1;\n        proxy_set_header Connection \"\";\n        \
          proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n        \
          proxy_set_header X-Forwarded-Proto $scheme;\n";
    match setup {
        // text/html is always in `gzip_types` (naming it again draws a warning);
        // `gzip_proxied any`: compress whatever the request's `Via`; `gzip_min_length 256`:
        // switchyard's default `min_size`; `gzip_vary on`: `Vary` as the others send it.
        Setup::Gzip => {
            s += "        gzip on;\n        gzip_comp_level 1;\n        gzip_proxied any;\n        \
                  gzip_min_length 256;\n        gzip_vary on;\n"
        }
        Setup::Cache => s += "        proxy_cache bench;\n        proxy_cache_valid 200 10m;\n",
        _ => {}
    }
    s += "\n        location ~ \\.png$ {\n            proxy_pass http://images;\n        }\n        \
          location / {\n            proxy_pass http://main;\n        }\n    }\n}\n";
    Ok(s)
}

/// File name of a target's configuration for a setup (under `configs/<target>/`).
pub fn config_file_name(target: TargetKind, setup: Setup) -> String {
    let ext = match target {
        TargetKind::Switchyard | TargetKind::SwitchyardB => "toml",
        TargetKind::Haproxy => "cfg",
        _ => "conf",
    };
    format!("{}.{ext}", setup.name())
}

#[cfg(test)]
#[path = "targets_tests.rs"]
mod tests;
