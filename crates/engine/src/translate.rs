//! Translation between HTTP/2 and the HTTP/1.1 form the pipeline reads and
//! writes, shared by both HTTP/2 sides: client streams ([`crate::http2`]) and
//! server streams (`upstream::h2`). Heads ([`head`]: sans-io, table-tested)
//! and bodies with their trailers ([`data`]: DATA frames read and written by
//! poll functions inside the request's own task, within flow control).
//!
//! Shared here so that `http2` and `upstream` do not import each other.
//! HTTP/3 client streams ([`crate::http3`]) use the same head translation
//! and the chunk and trailer helpers of [`data`]. The heads still cross as
//! HTTP/1.1 text (written, then parsed by the pipeline or by the HTTP/2
//! side): ADR 0004's head writers would remove that step.

pub(crate) mod data;
pub mod head;
