//! switchyard's end-to-end tests: the release or debug `switchyard` binary, real sockets,
//! real peers (curl, h2spec, grpcio, aioquic, Pebble, Prometheus, Chromium, keepalived…).
//!
//! One test binary with a module per area instead of one binary per file: every file
//! used to link the whole dependency tree and compile `common` again, which cost about a
//! minute of the suite's build on a 2-core machine, and the harness ran the binaries one
//! after the other, so one long test (the bench smoke run) held a core while the other
//! waited. Run one area with `cargo test -p switchyard --test e2e http3::`.

mod common;

mod access_log;
mod acme;
mod admin;
mod bench_scaling;
mod bench_smoke;
mod cache;
mod cache_compression;
mod cache_rfc;
mod check;
mod cluster;
mod compression;
mod counting;
mod dashboard;
mod errors;
mod examples;
mod faults;
mod framing;
mod grafana;
mod grpc;
mod h2spec;
mod ha_netns;
mod health;
mod http2;
mod http2_abuse;
mod http3;
mod l4;
mod lifecycle;
mod overload;
mod persistence;
mod prometheus;
mod protection;
mod reload;
mod resilience;
mod routing;
mod smuggling;
mod syslog;
mod tls;
mod tracing;
mod tracing_jaeger;
mod transparent_netns;
mod udp_health;
mod upstream_h2;
mod upstream_tls;
