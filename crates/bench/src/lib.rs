//! The switchyard benchmark suite.
//!
//! This crate holds the programs a benchmark needs on either side of the proxy, written
//! independently of the engine (it depends on neither `switchyard-engine` nor
//! `switchyard-config`) so that the measuring tools cannot share a bug with what they
//! measure:
//!
//! - [`origin`]: the origin simulator, an HTTP/1.1 server whose responses are shaped by
//!   the query string; used by end-to-end tests, benchmarks and `switchyard up`.
//! - [`load`]: the load generator (HTTP/1.1, HTTP/2, TLS, closed and open loop, UDP).
//! - [`report`]: `results.json`, `report.md` and a self-contained `report.html` with SVG
//!   charts, and the comparison of two results files.
//! - [`suite`]: the benchmark methodology runner behind `switchyard bench`.
//! - [`floor`]: the floor target, a minimal forwarder that is the least a relay does for
//!   a test (`switchyard bench floor`).
//! - [`floor_uring`]: the same floor on io_uring (`switchyard bench floor --io-uring`).

pub mod floor;
pub mod floor_uring;
pub mod load;
pub mod origin;
pub mod report;
pub mod results;
pub mod suite;
