//! What HTTP/2 and HTTP/3 client streams share on their way into and out of
//! the pipeline's message model: heads ([`head`]: an HTTP/3 request checked
//! by HTTP/2's rules and handed over as a decoded `RequestHead`, a header
//! list turned into the `http::Response` `h3` sends, a checked request put
//! into a stream's scratch set) and the trailer and chunk helpers of bodies
//! ([`data`]). Streams to HTTP/2 servers (`upstream::h2`) use only
//! [`data`]: their heads are encoded and decoded by the project's own codec.
//!
//! Shared here so that `http2`, `http3` and `upstream` do not import each
//! other. No head crosses as HTTP/1.1 text any more, in either direction
//! (response heads come from the pipeline's head writers, ADR 0004); nor
//! does a body between two framed codecs (it goes as parts: payload,
//! trailers, end). A body crosses as HTTP/1.1 bytes only where one side is
//! HTTP/1.1 or the pipeline transforms it (compression, the cache's copy):
//! of unknown length in chunked coding, its trailers as the last chunk's
//! trailer section ([`data`]).

pub(crate) mod data;
pub mod head;
