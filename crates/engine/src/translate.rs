//! Translation between HTTP/2 or HTTP/3 and the HTTP/1.1 form the pipeline
//! reads and writes: heads ([`head`]: sans-io, table-tested) and the chunk
//! and trailer helpers of bodies ([`data`]). Streams to HTTP/2 servers
//! (`upstream::h2`) use only [`data::may_trail`]: their heads are encoded
//! and decoded by the project's own codec.
//!
//! Shared here so that `http2` and `upstream` do not import each other.
//! HTTP/3 client streams ([`crate::http3`]) use the same head translation
//! and the chunk and trailer helpers of [`data`]. The heads still cross as
//! HTTP/1.1 text (written, then parsed by the pipeline or by the HTTP/2
//! side): ADR 0004's head writers would remove that step.

pub(crate) mod data;
pub mod head;
