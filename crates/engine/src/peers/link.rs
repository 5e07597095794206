//! The peers thread: one acceptor, one dialer per peer (see the parent module).
//!
//! A dialer's session: connect, handshake, full copy, then stream the queue.
//! A separate reader task takes the peer's acknowledgements (for the lag) so a
//! half-read frame is never abandoned by a `select!`. A session ends on any
//! error, on a write that takes longer than [`IO_TIMEOUT`], or when the oldest
//! unacknowledged batch is older than [`ACK_TIMEOUT`] (a cut link shows up as
//! silence, not as an error); the dialer then reconnects with a backoff and
//! starts again with a full copy.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::wire::{self, Payload, Record, Sealer, WireError, BATCH, MAGIC, TAG};
use super::{Cluster, Generations, PeerLink, Update, BACKOFF, MAX_BACKOFF};
use crate::live::Generation;

/// Longest wait for a handshake step or a write.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// A batch not acknowledged this long means the link is gone.
const ACK_TIMEOUT: Duration = Duration::from_secs(3);
/// An idle session sends an empty batch this often, so a dead link is noticed.
const KEEPALIVE: Duration = Duration::from_millis(500);

/// Why a session ended.
#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("timed out")]
    Timeout,
    #[error("the peer stopped acknowledging")]
    Silent,
}

/// Binds the acceptor's socket (IP_FREEBIND: the node may not hold the address yet).
pub(super) fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    crate::transport::set_freebind(&socket, addr)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(64)?;
    TcpListener::from_std(socket.into())
}

pub(super) async fn run(
    cluster: Arc<Cluster>,
    generations: Generations,
    listener: TcpListener,
    mut stop: watch::Receiver<bool>,
) {
    let acceptor = tokio::spawn(accept(cluster.clone(), generations.clone(), listener));
    let mut dialers: Vec<(Arc<PeerLink>, JoinHandle<()>)> = Vec::new();
    loop {
        dialers.retain(|(link, task)| {
            let keep = !link.removed.load(Ordering::Relaxed);
            if !keep {
                task.abort();
                link.stats.connected.store(false, Ordering::Relaxed);
            }
            keep
        });
        for link in cluster.peers().iter() {
            if !dialers.iter().any(|(l, _)| Arc::ptr_eq(l, link)) {
                let task = tokio::spawn(dial(cluster.clone(), link.clone(), generations.clone()));
                dialers.push((link.clone(), task));
            }
        }
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            _ = cluster.changed.notified() => {}
        }
    }
    acceptor.abort();
    dialers.iter().for_each(|(_, t)| t.abort());
}

fn nonce() -> [u8; TAG] {
    let mut n = [0; TAG];
    // The system generator failing is not recoverable; an all-zero nonce would
    // still be authenticated by the key, only not fresh.
    let _ = SystemRandom::new().fill(&mut n);
    n
}

async fn timed<T>(f: impl std::future::Future<Output = std::io::Result<T>>) -> Result<T, SessionError> {
    Ok(tokio::time::timeout(IO_TIMEOUT, f).await.map_err(|_| SessionError::Timeout)??)
}

async fn dial(cluster: Arc<Cluster>, link: Arc<PeerLink>, generations: Generations) {
    let Some(mut rx) = link.rx.lock().ok().and_then(|mut r| r.take()) else { return };
    let mut backoff = BACKOFF;
    let mut last_error = String::new();
    loop {
        let result = session(&cluster, &link, &mut rx, &generations).await;
        if link.stats.connected.swap(false, Ordering::Relaxed) {
            tracing::warn!(peer = link.name, "cluster peer disconnected");
            backoff = BACKOFF;
        }
        if let Err(e) = result {
            let text = e.to_string();
            if text != last_error {
                tracing::warn!(peer = link.name, address = %link.address, error = %text, "cluster peer unreachable");
                last_error = text;
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One connection to a peer, until it fails.
async fn session(
    cluster: &Cluster,
    link: &Arc<PeerLink>,
    rx: &mut mpsc::Receiver<Update>,
    generations: &Generations,
) -> Result<(), SessionError> {
    let stream = timed(TcpStream::connect(link.address)).await?;
    stream.set_nodelay(true)?;
    let (mut rd, mut wr) = stream.into_split();
    let key = cluster.key();
    let nonce_d = nonce();
    timed(wr.write_all(&wire::hello(&nonce_d, &cluster.node))).await?;
    let mut answer = [0; 2 * TAG];
    timed(rd.read_exact(&mut answer)).await?;
    let (nonce_a, proof) = answer.split_at(TAG);
    if let Err(e) = wire::verify(&wire::acceptor_proof(&key, &nonce_d, nonce_a), proof) {
        tracing::warn!(peer = link.name, "cluster peer failed authentication: it does not hold our key");
        return Err(e.into());
    }
    timed(wr.write_all(&wire::dialer_proof(&key, &nonce_d, nonce_a, cluster.node.as_bytes()))).await?;
    let mut seal = Sealer::new(&key, b"d2a", &nonce_d, nonce_a);
    let open = Sealer::new(&key, b"a2d", &nonce_d, nonce_a);
    let inflight: Arc<Mutex<VecDeque<Inflight>>> = Arc::default();
    let reader = tokio::spawn(read_acks(rd, open, inflight.clone(), link.clone()));
    let _reader = AbortOnDrop(reader);
    link.stats.connected.store(true, Ordering::Relaxed);
    tracing::info!(peer = link.name, address = %link.address, "cluster peer connected");
    let mut out = Sender { wr: &mut wr, seal: &mut seal, inflight: &inflight, link };
    // The queue's content is older than the copy about to be taken.
    while rx.try_recv().is_ok() {}
    link.stats.resync.store(false, Ordering::Relaxed);
    out.full_copy(generations).await?;
    loop {
        let first = tokio::select! {
            u = rx.recv() => u,
            _ = tokio::time::sleep(KEEPALIVE) => None,
        };
        let mut batch: Vec<Update> = first.into_iter().collect();
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(u) => batch.push(u),
                Err(_) => break,
            }
        }
        out.updates(batch).await?;
        if link.stats.resync.swap(false, Ordering::Relaxed) {
            out.full_copy(generations).await?;
        }
        if out.oldest_unacknowledged().is_some_and(|sent| sent.elapsed() > ACK_TIMEOUT) {
            return Err(SessionError::Silent);
        }
        if link.removed.load(Ordering::Relaxed) {
            return Ok(());
        }
    }
}

struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A batch sent and not yet acknowledged.
struct Inflight {
    seq: u64,
    sent: Instant,
    /// When its oldest update was learned (`None` for a full copy's batches).
    learned: Option<Instant>,
}

/// The writing half of a dialer's session.
struct Sender<'s> {
    wr: &'s mut tokio::net::tcp::OwnedWriteHalf,
    seal: &'s mut Sealer,
    inflight: &'s Mutex<VecDeque<Inflight>>,
    link: &'s PeerLink,
}

impl Sender<'_> {
    async fn frame(&mut self, records: &[Record], learned: Option<Instant>) -> Result<(), SessionError> {
        let seq = self.seal.seq();
        let frame = self.seal.seal(&wire::encode_batch(records));
        if let Ok(mut q) = self.inflight.lock() {
            q.push_back(Inflight { seq, sent: Instant::now(), learned });
        }
        timed(self.wr.write_all(&frame)).await
    }

    fn oldest_unacknowledged(&self) -> Option<Instant> {
        self.inflight.lock().ok()?.front().map(|i| i.sent)
    }

    async fn updates(&mut self, batch: Vec<Update>) -> Result<(), SessionError> {
        let now = Instant::now();
        let learned = batch.iter().map(Update::queued).min();
        let records: Vec<Record> = batch.into_iter().map(|u| record(u, now)).collect();
        let n = records.len() as u64;
        self.frame(&records, learned).await?;
        self.link.stats.sent.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }

    /// Every live entry of every replicated table, framed by SyncStart/SyncDone.
    async fn full_copy(&mut self, generations: &Generations) -> Result<(), SessionError> {
        let Some(gen) = generations() else { return Ok(()) };
        let mut records = vec![Record::SyncStart];
        let mut entries = 0u64;
        for (pool, table) in gen.config.pools.iter().zip(&gen.persistence) {
            let Some((table, kind)) = table.as_ref().and_then(|t| Some((t, t.table_kind()?))) else { continue };
            for (key, server, idle) in table.dump(Instant::now()) {
                let idle_ms = u32::try_from(idle.as_millis()).unwrap_or(u32::MAX);
                let server = server.to_string();
                records.push(Record::Set { pool: pool.name.clone(), kind, key: key.into(), server, idle_ms });
                entries += 1;
                if records.len() >= BATCH {
                    self.frame(&std::mem::take(&mut records), None).await?;
                }
            }
        }
        let now = Instant::now();
        for (service, guard) in gen.config.services.iter().zip(&gen.protection) {
            for (client, connection, request) in guard.as_ref().map(|g| g.dump(now)).unwrap_or_default() {
                records.push(rate_record(&service.name, client, connection, request));
                entries += 1;
                if records.len() >= BATCH {
                    self.frame(&std::mem::take(&mut records), None).await?;
                }
            }
        }
        records.push(Record::SyncDone);
        self.frame(&records, None).await?;
        self.link.stats.sent.fetch_add(entries, Ordering::Relaxed);
        self.link.stats.syncs_sent.fetch_add(1, Ordering::Relaxed);
        tracing::info!(peer = self.link.name, entries, "full copy sent to cluster peer");
        Ok(())
    }
}

/// An update as a record, its times counted up to `now`.
fn record(u: Update, now: Instant) -> Record {
    match u {
        Update::Stick(u) => {
            let (pool, key) = (u.pool.to_string(), u.key.into_vec());
            match u.server {
                Some(server) => {
                    let idle_ms = u32::try_from(now.saturating_duration_since(u.at).as_millis()).unwrap_or(u32::MAX);
                    Record::Set { pool, kind: u.kind, key, server: server.to_string(), idle_ms }
                }
                None => Record::Remove { pool, kind: u.kind, key },
            }
        }
        Update::Rate(u) => {
            let gone = now.saturating_duration_since(u.at);
            rate_record(&u.service, u.client, u.connection.saturating_sub(gone), u.request.saturating_sub(gone))
        }
    }
}

fn rate_record(service: &str, client: IpAddr, connection: Duration, request: Duration) -> Record {
    let client = match client {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    };
    let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    Record::Rate { service: service.to_string(), client, connection_us: us(connection), request_us: us(request) }
}

/// Reads one frame body (payload and MAC) and checks it.
async fn read_frame<R: AsyncRead + Unpin>(
    rd: &mut R,
    open: &mut Sealer,
    buf: &mut Vec<u8>,
) -> Result<Payload, SessionError> {
    let mut prefix = [0; 4];
    rd.read_exact(&mut prefix).await?;
    let len = wire::frame_len(prefix)?;
    buf.resize(len, 0);
    rd.read_exact(buf).await?;
    Ok(wire::decode(open.open(buf)?)?)
}

/// The dialer's reading half: acknowledgements, which give the lag.
async fn read_acks<R: AsyncRead + Unpin>(
    mut rd: R,
    mut open: Sealer,
    inflight: Arc<Mutex<VecDeque<Inflight>>>,
    stats: Arc<PeerLink>,
) {
    let mut buf = Vec::new();
    while let Ok(Payload::Ack(seq)) = read_frame(&mut rd, &mut open, &mut buf).await {
        let Ok(mut q) = inflight.lock() else { return };
        while let Some(front) = q.front() {
            if front.seq > seq {
                break;
            }
            if let (true, Some(learned)) = (front.seq == seq, front.learned) {
                let lag = u64::try_from(learned.elapsed().as_micros()).unwrap_or(u64::MAX);
                stats.stats.lag_us.store(lag, Ordering::Relaxed);
            }
            q.pop_front();
        }
    }
}

async fn accept(cluster: Arc<Cluster>, generations: Generations, listener: TcpListener) {
    loop {
        let Ok((stream, from)) = listener.accept().await else {
            tokio::time::sleep(BACKOFF).await;
            continue;
        };
        tokio::spawn(serve(cluster.clone(), generations.clone(), stream, from));
    }
}

/// One peer's connection to us: handshake, then apply its batches.
async fn serve(cluster: Arc<Cluster>, generations: Generations, stream: TcpStream, from: SocketAddr) {
    let _ = stream.set_nodelay(true);
    let (mut rd, mut wr) = stream.into_split();
    let (link, nonce_d, nonce_a, key) = match handshake(&cluster, &mut rd, &mut wr).await {
        Ok(done) => done,
        Err(reason) => {
            cluster.refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%from, %reason, "cluster connection refused");
            return;
        }
    };
    tracing::info!(peer = link.name, %from, "cluster peer authenticated");
    link.stats.inbound.store(true, Ordering::Relaxed);
    let mut open = Sealer::new(&key, b"d2a", &nonce_d, &nonce_a);
    let mut seal = Sealer::new(&key, b"a2d", &nonce_d, &nonce_a);
    let mut buf = Vec::new();
    let result: Result<(), SessionError> = async {
        loop {
            let seq = open.seq();
            let Payload::Batch(records) = read_frame(&mut rd, &mut open, &mut buf).await? else {
                return Err(WireError::Malformed("unexpected acknowledgement").into());
            };
            if let Some(gen) = generations() {
                apply(&cluster, &link, &gen, records);
            }
            timed(wr.write_all(&seal.seal(&wire::encode_ack(seq)))).await?;
        }
    }
    .await;
    link.stats.inbound.store(false, Ordering::Relaxed);
    if let Err(e) = result {
        tracing::info!(peer = link.name, error = %e, "cluster peer connection to us ended");
    }
}

type Handshaken = (Arc<PeerLink>, [u8; TAG], [u8; TAG], Vec<u8>);

/// The acceptor's side of the handshake; the error is the reason logged.
async fn handshake<R, W>(cluster: &Cluster, rd: &mut R, wr: &mut W) -> Result<Handshaken, String>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut hello = [0; 8 + TAG + 1];
    timed(rd.read_exact(&mut hello)).await.map_err(|e| format!("no hello: {e}"))?;
    if &hello[..8] != MAGIC {
        return Err("not a switchyard peer".into());
    }
    let mut nonce_d = [0; TAG];
    nonce_d.copy_from_slice(&hello[8..8 + TAG]);
    let mut name = vec![0; hello[8 + TAG] as usize];
    timed(rd.read_exact(&mut name)).await.map_err(|e| format!("no hello: {e}"))?;
    let name = String::from_utf8_lossy(&name).into_owned();
    let key = cluster.key();
    let nonce_a = nonce();
    let mut answer = nonce_a.to_vec();
    answer.extend_from_slice(&wire::acceptor_proof(&key, &nonce_d, &nonce_a));
    timed(wr.write_all(&answer)).await.map_err(|e| e.to_string())?;
    let mut proof = [0; TAG];
    timed(rd.read_exact(&mut proof))
        .await
        .map_err(|_| format!("`{name}` did not prove it holds the cluster key (wrong key?)"))?;
    wire::verify(&wire::dialer_proof(&key, &nonce_d, &nonce_a, name.as_bytes()), &proof)
        .map_err(|_| format!("`{name}` failed authentication: wrong cluster key"))?;
    let link = cluster.link(&name).ok_or_else(|| format!("`{name}` is not a configured peer"))?;
    Ok((link, nonce_d, nonce_a, key))
}

/// Merges a batch into the running generation's tables.
fn apply(cluster: &Cluster, link: &PeerLink, gen: &Generation, records: Vec<Record>) {
    let now = Instant::now();
    let mut received = 0;
    for record in records {
        match record {
            Record::Set { pool, kind, key, server, idle_ms } => {
                received += 1;
                if let Some(table) = table_of(gen, &pool) {
                    table.merge_remote(kind, &key, &server, Duration::from_millis(idle_ms.into()), now);
                }
            }
            Record::Remove { pool, kind, key } => {
                received += 1;
                if let Some(table) = table_of(gen, &pool) {
                    table.remove_remote(kind, &key);
                }
            }
            Record::Rate { service, client, connection_us, request_us } => {
                received += 1;
                let guard = gen.service_index(&service).and_then(|i| gen.protection.get(i)?.as_ref());
                if let (Some(guard), Some(client)) = (guard, client_address(&client)) {
                    let (connection, request) =
                        (Duration::from_micros(connection_us), Duration::from_micros(request_us));
                    guard.merge_remote(client, connection, request, now);
                }
            }
            Record::SyncStart => {}
            Record::SyncDone => {
                link.stats.syncs_received.fetch_add(1, Ordering::Relaxed);
                if !cluster.synced.swap(true, Ordering::Relaxed) {
                    tracing::info!(peer = link.name, "full copy received from cluster peer: synced");
                }
            }
        }
    }
    link.stats.received.fetch_add(received, Ordering::Relaxed);
}

/// A client address from its wire form (the decoder admits 4 or 16 bytes only).
fn client_address(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
        16 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
        _ => None,
    }
}

fn table_of<'g>(gen: &'g Generation, pool: &str) -> Option<&'g crate::persist::PoolPersistence> {
    gen.persistence.get(gen.pool_index(pool)?)?.as_ref()
}
