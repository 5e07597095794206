//! Sans-io readers and writers of the layer-4 wire formats the balancer meets
//! before (or instead of) HTTP.
//!
//! Everything here takes the bytes read so far from a connection and answers
//! "need more", "here is what it says" or "refuse it". Nothing panics and
//! nothing asks for more than a documented bound, so a caller can read into
//! a fixed-size buffer and every parser can be fuzzed.
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
pub mod sni;
