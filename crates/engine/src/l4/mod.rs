//! The layer-4 services (`tcp`, `udp`, `tls-passthrough`) and the first steps
//! of every accepted connection: the PROXY protocol header from a trusted
//! source, client protection, then the service's mode ([`serve_stream`]).
//! The wire formats read here are in [`crate::wire`].

mod service;

pub use service::{read_proxy, serve_stream, serve_udp};
