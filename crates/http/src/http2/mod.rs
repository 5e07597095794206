//! HTTP/2, sans-io: the frame layer ([`frame`]), header compression
//! ([`hpack`]), request heads checked and turned into the pipeline's head
//! model ([`head`]), response heads checked ([`response`]), and the two ends
//! of a connection, [`server`] (towards clients) and [`client`] (towards
//! servers): their streams, flow control and errors, over the
//! connection-level state and frames both keep alike (`link`). The engine's
//! tokio drivers feed them bytes and write out what they queue.

pub mod client;
#[cfg(test)]
mod client_tests;
pub mod frame;
pub mod head;
pub mod hpack;
mod link;
pub mod response;
pub mod server;
#[cfg(test)]
mod server_tests;
