//! The origin simulator: the HTTP/1.1 server that stands behind the proxy in every
//! end-to-end test and benchmark, and behind `switchyard up`.
//!
//! It shares no code with the engine, so a bug in the proxy's HTTP handling cannot hide
//! behind the same bug here. It is built to cost as little CPU per request as possible, so a
//! benchmark measures the proxy and not the origin: hand-written HTTP/1.1 on tokio with
//! `httparse`, no allocation per request on the plain path, response head and small body in
//! one write (pipelined responses batched into one write), large bodies streamed with
//! `writev` from a pre-generated buffer (see `body.rs`).
//!
//! # Behaviour
//!
//! HTTP/1.1 with keep-alive, HTTP/1.0 with or without `connection: keep-alive`; pipelined
//! requests are answered in order. Any method, any path. Every response carries
//! `x-origin: NAME`, `content-type`, `cache-control`, `content-length` (or
//! `transfer-encoding: chunked` when echoing a chunked body) and `connection: close` when the
//! origin will close after it. `HEAD` gets the headers a `GET` would.
//!
//! The query string shapes the response (unknown keys are ignored; a malformed value of a
//! known key is a 400):
//!
//! | key | effect |
//! |---|---|
//! | `size=N` | body of N bytes (default 128; any `u64`, streamed, never allocated) |
//! | `compressible=1` | ≈ 75 % compressible HTML, `text/html`; otherwise seeded random bytes, `application/octet-stream` |
//! | `delay_ms=N` | wait N ms (after reading the request body) before answering |
//! | `status=N` | response status, 200–599; 204 and 304 carry no body and no `content-length` |
//! | `cache=N` | `cache-control: public, max-age=N`; without it `cache-control: no-store` |
//! | `close=1` | answer, then close the connection |
//! | `echo=1` | the response body is the request body, streamed back as it arrives |
//! | `cc=V` | `cache-control: V` instead of what `cache` decides (`V` percent-decoded, as every value below) |
//! | `age=V` | `age: V`, as given (any text: the cache tests send unusual forms) |
//! | `date_ago=N` | `date:` N seconds before the response is sent (without it: no `Date`) |
//! | `cdn_cache=V` | `cdn-cache-control: V` |
//! | `header=NAME:VALUE` | one more field, repeatable (`Expires` in the obsolete formats, `Last-Modified`, `Vary`...) |
//! | `etag=V` | `etag: "V"`; a request whose `If-None-Match` lists it (or `*`) gets 304 |
//! | `hints=1` | a `103 Early Hints` (with a `link` field) before the final response, HTTP/1.1 clients only |
//! | `unsafe_status=N` | the status for any method but GET and HEAD (200–599) |
//! | `ranges=1` | `accept-ranges: bytes`; a GET's `Range` of one `bytes` range gets `206` with `content-range` and those bytes of the body (`416` with `content-range: bytes */SIZE` when it starts past the end); several ranges or a malformed one: the whole `200`. `If-Range` is not read |
//!
//! The last nine are HTTP/1.1 only (the HTTP/2 side ignores them); none costs anything when
//! not asked for.
//!
//! Request bodies (`content-length` or `chunked`) are read in full in bounded memory and
//! discarded, counted in [`OriginStats::bytes_received`]; the response carries
//! `x-received-bytes: N`. With `echo=1` a `content-length` body comes back with the same
//! `content-length` (and `x-received-bytes`); a chunked body comes back chunked, without
//! `x-received-bytes` (its total is unknown when the head is sent). An echo holds at most one
//! read of the body, so the client must read the response while it sends. `expect:
//! 100-continue` is answered with `100 Continue`.
//!
//! Two endpoints report on the origin itself:
//!
//! - `/__origin/stats`: `{"name", "requests", "connections", "bytes_received",
//!   "tls_handshakes", "tls_resumed"}` as JSON.
//!   Stats requests are **not** counted in `requests`, so polling them does not disturb
//!   what a test measures; their connections are counted in `connections`.
//! - `/__origin/request`: the request as received (`method`, `path`, `query`, `version`,
//!   `headers` as `[name, value]` pairs in order, `peer`), for tests of forwarding headers
//!   and rewrites. Counted as a request.
//!
//! # HTTP/2
//!
//! A clear-text connection that opens with the HTTP/2 preface is served as HTTP/2 (h2c with
//! prior knowledge); over TLS, ALPN `h2` is accepted when the client offers it without
//! `http/1.1`. Same behaviour, one task per stream: see `h2.rs`. The `connections` count
//! lets a test check that a proxy multiplexes requests over few connections.
//!
//! # TLS
//!
//! [`Origin::with_tls`] (`switchyard origin --tls-cert FILE --tls-key FILE`) serves the same
//! HTTP/1.1 over TLS (rustls, ALPN `http/1.1`, or `h2` below; session resumption on); with a client CA
//! (`--tls-client-ca FILE`) it requires a client certificate that chains to it. The stats
//! then also count handshakes (`tls_handshakes`) and, of those, resumed sessions
//! (`tls_resumed`); a failed handshake closes the connection and counts nothing else.
//!
//! A malformed request (head, framing, chunk encoding, query value) is answered 400 with
//! `connection: close`, and the connection closes; it is not counted as a request. Nothing a
//! peer sends can make the origin panic.

mod body;
pub use body::BodyKind;
mod conn;
mod h2;
mod http;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

/// How long [`Origin::serve`] waits, after shutdown, for open connections to finish.
const DRAIN_GRACE: Duration = Duration::from_secs(5);
/// How long a TLS client may take to complete its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Counters of what an origin has seen, shared with its connections.
#[derive(Debug, Default)]
pub struct OriginStats {
    requests: AtomicU64,
    connections: AtomicU64,
    bytes_received: AtomicU64,
    tls_handshakes: AtomicU64,
    tls_resumed: AtomicU64,
}

impl OriginStats {
    /// Requests answered or being answered (not counting `/__origin/stats` nor 400s).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Connections accepted.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Request body bytes read (after removing chunked framing).
    pub fn bytes_received(&self) -> u64 {
        self.bytes_received.load(Ordering::Relaxed)
    }

    /// TLS handshakes completed (TLS origins only).
    pub fn tls_handshakes(&self) -> u64 {
        self.tls_handshakes.load(Ordering::Relaxed)
    }

    /// Completed TLS handshakes that resumed an earlier session.
    pub fn tls_resumed(&self) -> u64 {
        self.tls_resumed.load(Ordering::Relaxed)
    }
}

/// What every connection of one origin shares.
struct Shared {
    name: Box<str>,
    /// `x-origin: NAME\r\n`, ready to copy into each response head.
    origin_header: Box<[u8]>,
    stats: Arc<OriginStats>,
}

impl Shared {
    fn stats_json(&self) -> Vec<u8> {
        let stats = serde_json::json!({
            "name": &*self.name,
            "requests": self.stats.requests(),
            "connections": self.stats.connections(),
            "bytes_received": self.stats.bytes_received(),
            "tls_handshakes": self.stats.tls_handshakes(),
            "tls_resumed": self.stats.tls_resumed(),
        });
        let mut body = serde_json::to_vec(&stats).unwrap_or_default();
        body.push(b'\n');
        body
    }
}

/// A bound origin simulator, ready to [`serve`](Origin::serve).
pub struct Origin {
    listener: TcpListener,
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    tls: Option<TlsAcceptor>,
}

impl Origin {
    /// Binds a listener on `addr` (IPv4 or IPv6, `SO_REUSEADDR`; port 0 picks a free port,
    /// see [`local_addr`](Origin::local_addr)). `name` is sent in every `x-origin` header,
    /// so it must be a valid header value (printable ASCII).
    pub async fn bind(addr: SocketAddr, name: &str) -> io::Result<Origin> {
        if !name.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("origin name {name:?} is not a valid header value (printable ASCII)"),
            ));
        }
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        socket.listen(4096)?;
        let listener = TcpListener::from_std(socket.into())?;
        let local_addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            name: name.into(),
            origin_header: format!("x-origin: {name}\r\n").into_bytes().into_boxed_slice(),
            stats: Arc::default(),
        });
        Ok(Origin { listener, local_addr, shared, tls: None })
    }

    /// Serves HTTPS with `config` (see [`tls_config`]) instead of clear text.
    pub fn with_tls(mut self, config: Arc<rustls::ServerConfig>) -> Origin {
        self.tls = Some(TlsAcceptor::from(config));
        self
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The origin's counters; they stay readable after `serve` returns.
    pub fn stats(&self) -> Arc<OriginStats> {
        Arc::clone(&self.shared.stats)
    }

    /// Accepts connections, one task each, until `shutdown` resolves. Then it stops
    /// accepting; idle connections close, busy ones finish their current response (with
    /// `connection: close`) and close. Returns once all have closed, or after a grace
    /// period of 5 s, whichever is first.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> io::Result<()> {
        let Origin { listener, shared, tls, .. } = self;
        let (stop, _) = watch::channel(false);
        tokio::pin!(shutdown);
        loop {
            let accepted = tokio::select! {
                biased;
                () = &mut shutdown => break,
                accepted = listener.accept() => accepted,
            };
            match accepted {
                Ok((stream, peer)) => {
                    shared.stats.connections.fetch_add(1, Ordering::Relaxed);
                    // Small responses must not wait for Nagle.
                    let _ = stream.set_nodelay(true);
                    let (shared, stop) = (Arc::clone(&shared), stop.subscribe());
                    match &tls {
                        None => drop(tokio::spawn(serve_plain(stream, peer, shared, stop))),
                        Some(tls) => drop(tokio::spawn(serve_tls(tls.clone(), stream, peer, shared, stop))),
                    }
                }
                Err(error) => {
                    // Out of file descriptors and the like: do not spin, and do not die.
                    tracing::warn!(%error, "origin accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
        drop(listener);
        stop.send_replace(true);
        // Every connection task holds a receiver; `closed` resolves when the last one ends.
        let _ = tokio::time::timeout(DRAIN_GRACE, stop.closed()).await;
        Ok(())
    }
}

/// Runs the TLS handshake of one accepted connection, then serves it.
async fn serve_tls(
    tls: TlsAcceptor,
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
) {
    let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(stream)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            tracing::debug!(%peer, %error, "origin TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "origin TLS handshake timed out");
            return;
        }
    };
    shared.stats.tls_handshakes.fetch_add(1, Ordering::Relaxed);
    if stream.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
        shared.stats.tls_resumed.fetch_add(1, Ordering::Relaxed);
    }
    if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
        h2::serve(stream, peer, shared, stop).await;
    } else {
        conn::serve(stream, peer, shared, stop).await;
    }
}

/// Serves a clear-text connection: HTTP/2 when it opens with the preface (prior
/// knowledge), HTTP/1.x otherwise. The preface is looked at without being consumed.
async fn serve_plain(stream: TcpStream, peer: SocketAddr, shared: Arc<Shared>, stop: watch::Receiver<bool>) {
    let mut first = [0u8; h2::PREFACE.len()];
    let deadline = tokio::time::Instant::now() + HANDSHAKE_TIMEOUT;
    let http2 = loop {
        let n = match tokio::time::timeout_at(deadline, stream.peek(&mut first)).await {
            Ok(Ok(n)) => n,
            // Closed, failed or silent: the HTTP/1.1 side ends it the usual way.
            _ => break false,
        };
        if n == 0 || !h2::PREFACE.starts_with(&first[..n]) {
            break false;
        }
        if n == first.len() {
            break true;
        }
        // A partial preface: peeking again at once would see the same bytes.
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    if http2 {
        h2::serve(stream, peer, shared, stop).await;
    } else {
        conn::serve(stream, peer, shared, stop).await;
    }
}

/// A TLS server configuration for an origin: the certificate chain and key (PEM), and
/// optionally the CA (PEM) client certificates must chain to, which makes one required.
pub fn tls_config(cert: &[u8], key: &[u8], client_ca: Option<&[u8]>) -> io::Result<Arc<rustls::ServerConfig>> {
    let invalid =
        |what: &str, e: &dyn std::fmt::Display| io::Error::new(io::ErrorKind::InvalidData, format!("{what}: {e}"));
    let chain =
        CertificateDer::pem_slice_iter(cert).collect::<Result<Vec<_>, _>>().map_err(|e| invalid("certificate", &e))?;
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| invalid("private key", &e))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("protocol versions", &e))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(ca) {
                roots.add(cert.map_err(|e| invalid("client CA", &e))?).map_err(|e| invalid("client CA", &e))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| invalid("client CA", &e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| invalid("certificate and key", &e))?;
    // Clients that offer both get HTTP/1.1, as before HTTP/2 was served; `h2` goes to
    // those that offer only it (switchyard's pools with protocol = "h2").
    config.alpn_protocols = vec![b"http/1.1".to_vec(), b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// The PEM files of `switchyard origin --tls-cert FILE --tls-key FILE [--tls-client-ca FILE]`.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// Certificate chain, leaf first.
    pub cert: PathBuf,
    /// The leaf's private key.
    pub key: PathBuf,
    /// CA that client certificates must chain to; `None`: none asked for.
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    /// Reads the files and builds the server configuration ([`tls_config`]).
    pub fn load(&self) -> io::Result<Arc<rustls::ServerConfig>> {
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
        };
        let client_ca = self.client_ca.as_ref().map(read).transpose()?;
        tls_config(&read(&self.cert)?, &read(&self.key)?, client_ca.as_deref())
    }
}

/// Blocking entry point of `switchyard origin --listen ADDR --name NAME [--threads N]
/// [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]`: builds a multi-thread tokio
/// runtime with `threads` workers (at least 1), binds, and serves (over TLS when `tls` is
/// given) until SIGINT or SIGTERM.
pub fn run(addr: SocketAddr, name: &str, threads: usize, tls: Option<&TlsFiles>) -> io::Result<()> {
    let tls = tls.map(TlsFiles::load).transpose()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .thread_name("origin")
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut origin = Origin::bind(addr, name).await?;
        let secure = tls.is_some();
        if let Some(config) = tls {
            origin = origin.with_tls(config);
        }
        tracing::info!(addr = %origin.local_addr(), name, tls = secure, "origin listening");
        origin.serve(termination()).await
    })
}

/// Resolves on SIGINT or SIGTERM. If a handler cannot be installed, that signal is ignored
/// rather than taken as a request to stop.
async fn termination() {
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::warn!(%error, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut sigterm) => {
                sigterm.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
