//! Translation between HTTP/2 and the HTTP/1.1 text the pipeline reads and
//! writes, shared by the two bridges: HTTP/2 clients ([`crate::http2`]) and
//! HTTP/2 servers (`upstream::h2`). Heads ([`head`]: sans-io, table-tested)
//! and bodies with their trailers ([`data`]: DATA frames to and from an
//! in-memory pipe, within flow control).
//!
//! Both bridges go once the protocol-neutral codecs of ADR 0004 (stage 2)
//! feed the pipeline's phases directly; until then this module is what keeps
//! `http2` and `upstream` from importing each other.

pub(crate) mod data;
pub mod head;
