//! The load generator: HTTP/1.1 and HTTP/2, clear text and TLS, closed and
//! open loop, and a UDP datagram generator. Independent of the engine.

pub mod spec;

pub use spec::*;
