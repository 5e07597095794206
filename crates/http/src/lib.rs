//! switchyard's HTTP message model and everything about HTTP that does no
//! I/O: no sockets, no tasks, no clocks of its own. The engine's codecs and
//! pipeline use it; it uses nothing of the engine.
//!
//! - [`parse`]: request and response heads as byte ranges into the buffer
//!   they arrived in (no allocation per field), versions, body framing, and
//!   the strict HTTP/1.1 head parser.
//! - [`chunked`]: the chunked transfer coding scanner.
//! - [`http2`]: HTTP/2 frames, HPACK, and the server side of a connection.
//! - [`rewrite`]: the heads sent on (hop-by-hop removal, forwarding headers,
//!   rule edits) and the proxy's own responses.
//! - [`head_writer`]: response heads written for the client's protocol
//!   (HTTP/1.1 bytes, or an HTTP/2 header list).
//! - [`request_writer`]: request heads written for the server's protocol
//!   (HTTP/1.1 bytes, or an HTTP/2 request list).
//! - [`route`]: rule evaluation over a request view.
//! - [`compress`]: whether and how a response body is encoded.
//! - [`cache_policy`]: RFC 9111 storability and freshness.
//! - [`error`]: the data-path error (side, retry safety, status, reason).
//!
//! Invariants: nothing here panics on peer input; every function is
//! deterministic in its arguments.

pub mod cache_policy;
pub mod chunked;
pub mod compress;
pub mod error;
pub mod head_writer;
pub mod http2;
pub mod parse;
pub mod request_writer;
pub mod rewrite;
pub mod route;
