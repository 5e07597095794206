//! QUIC across workers (ADR 0009): every worker runs its own quinn endpoint
//! on its own UDP socket of one `SO_REUSEPORT` group per listener address,
//! and the kernel hands each datagram to the socket of the worker that owns
//! its connection, read from the destination connection ID by a classic BPF
//! program attached to the group ([`QuicGroup::bind`]).
//!
//! The connection IDs the proxy issues ([`WorkerCids`]) are [`CID_LEN`]
//! bytes: the worker's index first, random bytes after it. Short-header
//! packets (every packet once the handshake is done, from whatever address)
//! and Handshake packets are steered by that byte. Initial and 0-RTT packets,
//! whose destination connection ID the client chose, are left to the
//! kernel's 4-tuple hash, which keeps a handshake on one worker since a
//! client may not move before the handshake is confirmed (RFC 9000 §9).
//!
//! What the endpoints of one listener share ([`QuicGroup`]): the stateless
//! reset key (whichever worker answers a stray packet, its reset token is the
//! one the connection's owner advertised), the Retry token key (a token is
//! valid on any worker, and across reloads), and the count of handshakes in
//! flight that `http3.retry = "auto"` compares with its threshold.
//!
//! Invariant: socket `i` of a group is worker `i`'s. The kernel numbers a
//! group's sockets in the order they were bound and renumbers them when one
//! closes, so the sockets are bound in worker order and the group keeps a
//! duplicate of each open until every worker's endpoint is gone.

use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, OnceLock};

use quinn_proto::{ConnectionId, ConnectionIdGenerator, InvalidCid, RandomConnectionIdGenerator};
use socket2::Socket;

/// Length of the connection IDs the proxy issues: the worker byte and seven
/// random bytes (56 bits of entropy per connection ID).
pub const CID_LEN: usize = 8;

/// Most workers one group steers to (the worker index is one byte); workers
/// past it serve no QUIC.
pub const MAX_STEERED: usize = 256;

/// What the QUIC endpoints of one listener address share, one per worker
/// that has a socket of it.
pub struct QuicGroup {
    /// The address.
    pub addr: SocketAddr,
    /// Whether datagrams are steered by connection ID (several workers);
    /// `false`: one socket, on worker 0 (ADR 0006's layout).
    pub steered: bool,
    /// Holds the stateless reset key every worker's endpoint uses.
    endpoint: quinn::EndpointConfig,
    /// The first server configuration built: its Retry token key is the
    /// group's (quinn makes a random one and has no way to read it back).
    template: OnceLock<quinn::ServerConfig>,
    /// QUIC handshakes in flight on the listener, over all workers.
    pub handshaking: Arc<AtomicUsize>,
    /// A duplicate of every socket of the group, so that no socket leaves
    /// the group (renumbering the others) while another worker still serves.
    _members: Vec<std::net::UdpSocket>,
}

/// One worker's socket of a [`QuicGroup`].
pub struct QuicSocket {
    /// The socket, bound.
    pub socket: std::net::UdpSocket,
    /// Its index in the group: the worker byte of its connection IDs.
    pub index: u8,
    /// What it shares with the other workers' sockets.
    pub group: Arc<QuicGroup>,
}

impl QuicGroup {
    /// Binds `addr` for `workers` workers: one socket each (at most
    /// [`MAX_STEERED`]), steered by connection ID, where the kernel takes
    /// the steering program; else (one worker, no `SO_REUSEPORT` steering
    /// on this system) one socket, for worker 0, and a warning saying why.
    /// `bind(reuse_port)` opens one bound socket.
    pub fn bind(
        addr: SocketAddr,
        workers: usize,
        mut bind: impl FnMut(bool) -> std::io::Result<Socket>,
    ) -> std::io::Result<Vec<QuicSocket>> {
        if workers > 1 {
            let sockets = (0..workers.min(MAX_STEERED)).map(|_| bind(true)).collect::<std::io::Result<Vec<_>>>()?;
            match attach_steering(&sockets[0]) {
                Ok(()) => return QuicGroup::steered(addr, sockets),
                Err(e) => tracing::warn!(
                    %addr, error = %e,
                    "cannot steer QUIC by connection ID: HTTP/3 on this listener runs on worker 0 only"
                ),
            }
        }
        let group = Arc::new(QuicGroup::new(addr, false, Vec::new()));
        Ok(vec![QuicSocket { socket: bind(false)?.into(), index: 0, group }])
    }

    fn steered(addr: SocketAddr, sockets: Vec<Socket>) -> std::io::Result<Vec<QuicSocket>> {
        let members = sockets.iter().map(|s| s.try_clone().map(Into::into)).collect::<std::io::Result<Vec<_>>>()?;
        let group = Arc::new(QuicGroup::new(addr, true, members));
        // What quinn-udp will use on these sockets (it enables GRO itself).
        let offload = quinn::udp::UdpSocketState::new((&sockets[0]).into());
        let (gso, gro) = offload.map_or((1, 1), |s| (s.max_gso_segments(), s.gro_segments()));
        tracing::info!(
            %addr, workers = sockets.len(), gso_segments = gso, gro_segments = gro,
            "HTTP/3 on every worker, datagrams steered by connection ID"
        );
        Ok(sockets
            .into_iter()
            .zip(0u8..=u8::MAX)
            .map(|(socket, index)| QuicSocket { socket: socket.into(), index, group: group.clone() })
            .collect())
    }

    fn new(addr: SocketAddr, steered: bool, members: Vec<std::net::UdpSocket>) -> QuicGroup {
        QuicGroup {
            addr,
            steered,
            // A random reset key, shared by every clone.
            endpoint: quinn::EndpointConfig::default(),
            template: OnceLock::new(),
            handshaking: Arc::new(AtomicUsize::new(0)),
            _members: members,
        }
    }

    /// The endpoint configuration of socket `index`: the group's reset key,
    /// connection IDs carrying `index`.
    pub fn endpoint_config(&self, index: u8) -> quinn::EndpointConfig {
        let mut config = self.endpoint.clone();
        config.cid_generator(move || Box::new(WorkerCids { index }));
        config
    }

    /// A server configuration with `crypto` and the group's Retry token key
    /// (the other settings are quinn's defaults until the caller sets them).
    pub fn server_config(&self, crypto: Arc<dyn quinn::crypto::ServerConfig>) -> quinn::ServerConfig {
        let mut config = self.template.get_or_init(|| quinn::ServerConfig::with_crypto(crypto.clone())).clone();
        config.crypto = crypto;
        config
    }
}

/// Issues the connection IDs of one worker's endpoint: [`CID_LEN`] bytes,
/// the worker's index first, the rest random.
pub struct WorkerCids {
    /// The worker's index in its group.
    pub index: u8,
}

impl ConnectionIdGenerator for WorkerCids {
    fn generate_cid(&mut self) -> ConnectionId {
        let random = RandomConnectionIdGenerator::new(CID_LEN).generate_cid();
        let mut bytes = [0u8; CID_LEN];
        bytes.copy_from_slice(&random);
        bytes[0] = self.index;
        ConnectionId::new(&bytes)
    }

    /// A packet for an unknown connection whose ID is not this worker's is
    /// dropped, not answered with a stateless reset.
    fn validate(&self, cid: &ConnectionId) -> Result<(), InvalidCid> {
        if cid.len() == CID_LEN && cid.first() == Some(&self.index) {
            Ok(())
        } else {
            Err(InvalidCid)
        }
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<std::time::Duration> {
        None
    }
}

/// The steering program, in classic BPF. The kernel runs it on each datagram
/// with the data starting at the UDP payload (`run_bpf_filter` in
/// net/core/sock_reuseport.c) and takes its result as the index of the
/// socket; an index past the group's last socket falls back to the 4-tuple
/// hash.
#[cfg(target_os = "linux")]
fn steering_program() -> Vec<libc::sock_filter> {
    // Opcodes of linux/bpf_common.h (class | size | mode, or class | op | source).
    const LD_W_LEN: u16 = 0x80; // BPF_LD | BPF_W | BPF_LEN
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const LD_B_ABS: u16 = 0x30; // BPF_LD | BPF_B | BPF_ABS
    const AND_K: u16 = 0x54; // BPF_ALU | BPF_AND | BPF_K
    const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
    const RET_A: u16 = 0x16; // BPF_RET | BPF_A
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const FALLBACK: u32 = u32::MAX;
    // Long header: flags, version (4 bytes), DCID length, DCID.
    const MIN_LEN: u32 = 7 + CID_LEN as u32;
    let op = |code, k| libc::sock_filter { code, jt: 0, jf: 0, k };
    // `jf` counts the instructions skipped to the fallback at the end.
    let unless = |code, k, to_fallback| libc::sock_filter { code, jt: 0, jf: to_fallback, k };
    vec![
        op(LD_W_LEN, 0),
        unless(JGE_K, MIN_LEN, 13),
        op(LD_B_ABS, 0),
        libc::sock_filter { code: JSET_K, jt: 2, jf: 0, k: 0x80 },
        // Short header: the first byte of the destination connection ID.
        op(LD_B_ABS, 1),
        op(RET_A, 0),
        // Long header, QUIC version 1, Handshake packet (type bits 0b10),
        // destination connection ID of our length: its first byte.
        op(LD_W_ABS, 1),
        unless(JEQ_K, 1, 7),
        op(LD_B_ABS, 0),
        op(AND_K, 0x30),
        unless(JEQ_K, 0x20, 4),
        op(LD_B_ABS, 5),
        unless(JEQ_K, CID_LEN as u32, 2),
        op(LD_B_ABS, 6),
        op(RET_A, 0),
        // Initial, 0-RTT, other versions, runts: the kernel's hash.
        op(RET_K, FALLBACK),
    ]
}

/// Attaches [`steering_program`] to the `SO_REUSEPORT` group of `socket`.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn attach_steering(socket: &Socket) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let program = steering_program();
    let len = u16::try_from(program.len()).map_err(|_| std::io::Error::other("steering program too long"))?;
    let fprog = libc::sock_fprog { len, filter: program.as_ptr().cast_mut() };
    let size = libc::socklen_t::try_from(std::mem::size_of::<libc::sock_fprog>()).unwrap_or(libc::socklen_t::MAX);
    // SAFETY: `fprog` and the program it points to outlive the call, and the
    // kernel copies the program (it keeps no pointer to our memory); the
    // option value is a `sock_fprog` of the size given.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            std::ptr::from_ref(&fprog).cast(),
            size,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn attach_steering(_socket: &Socket) -> std::io::Result<()> {
    Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "SO_ATTACH_REUSEPORT_CBPF is Linux only"))
}

#[cfg(all(test, target_os = "linux"))]
#[path = "quic_steer_tests.rs"]
mod tests;
