//! HTTP/2, sans-io: the frame layer ([`frame`]), header compression
//! ([`hpack`]), request heads checked and turned into the pipeline's head
//! model ([`head`]), and the server side of a connection ([`server`]): its
//! streams, flow control and errors. The engine's tokio driver feeds it bytes
//! and writes out what it queues.

pub mod client;
#[cfg(test)]
mod client_tests;
pub mod frame;
pub mod head;
pub mod hpack;
pub mod response;
pub mod server;
#[cfg(test)]
mod server_tests;
