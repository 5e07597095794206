//! Layer-4 building blocks for the `tcp` and `tls-passthrough` modes.
//!
//! Everything here is sans-io: functions take the bytes read so far from a
//! connection and answer "need more", "here is what it says" or "refuse it".
//! They never panic and never ask for more than a documented bound, so the
//! relay can read into a fixed-size buffer and every parser can be fuzzed.
//!
//! - [`proxy_protocol`]: the PROXY protocol header (v1 text, v2 binary) that
//!   carries the client's address, parsed on accept and encoded towards servers.
//! - [`sni`]: a peek at the TLS ClientHello (server name, ALPN) to route a
//!   `tls-passthrough` connection without terminating TLS.
//! - [`rdp`]: a peek at the RDP connection request's `mstshash` cookie, for
//!   `rdp_cookie` persistence.

mod cursor;
pub mod proxy_protocol;
pub mod rdp;
mod service;
pub mod sni;

pub use service::{read_proxy, serve_stream, serve_udp};
