//! Byte movers for the layer-4 modes: what a `tcp` or a `udp` service does
//! once it has a client and has picked a server.
//!
//! - [`tcp::relay`] joins an accepted client connection and a connected server
//!   connection and moves bytes both ways until both directions have ended,
//!   with splice(2) through a pipe per direction (no copy through user space)
//!   or through two fixed buffers. Half-closes pass through; a reset on one
//!   side ends both; an idle timeout ends the relay, and so does a drain once
//!   the relay is quiet. One poll function over both sockets, its deadline
//!   an entry in the worker's idle table: no timer, no future per direction.
//! - [`udp::UdpRelay`] serves one UDP listener socket: a [`udp::FlowTable`]
//!   maps each client address to its flow (the server it sticks to and a
//!   connected upstream socket per server), bounded and idle-expired, and a
//!   task per upstream socket carries replies back to its client.
//! - [`counted::Counted`] wraps a stream to report its bytes as they pass
//!   (the byte tunnel after a relayed WebSocket switch).
//!
//! Invariants: everything here runs on one worker's current-thread runtime
//! (`spawn_local`, `Rc`, `Cell`), nothing is shared across threads; no
//! allocation happens per chunk or per datagram, only per connection or flow;
//! nothing a peer sends can make these functions panic.
//!
//! The process must ignore SIGPIPE (Rust binaries do by default): the kernel
//! raises it when splice(2) writes to a socket whose peer has gone, because
//! that path has no `MSG_NOSIGNAL`.

pub mod counted;
pub mod tcp;
pub mod udp;

#[cfg(target_os = "linux")]
mod splice;

#[cfg(test)]
#[path = "tcp_tests.rs"]
mod tcp_tests;
#[cfg(test)]
#[path = "udp_tests.rs"]
mod udp_tests;

pub use tcp::{relay, Deadlines, End, Relay, RelayOptions, RelayOutcome, Watch, QUIET_TO_LEAVE};
#[cfg(all(test, target_os = "linux"))]
pub(crate) use tcp_tests::segments_in;
pub use udp::{serve_udp, Admit, Flow, FlowStats, FlowTable, UdpOptions, UdpRelay};
