//! The HTTP/3 client side, on `quinn` (QUIC, rustls with aws-lc-rs), `h3` and `h3-quinn`:
//! the QUIC client configuration, one client endpoint (one UDP socket) per generator
//! thread, the connection handshake, and one request/response exchange on a request
//! stream. The requests themselves are HTTP/2's ([`super::http2::Requests`]): the same
//! absolute URIs and headers, which `h3` turns into its pseudo-header fields.
//!
//! Independent of the engine: this is a client of the same crates, written for the
//! generator. Each generator thread owns one endpoint, which is how a multi-connection
//! QUIC client works (connections are told apart by connection ID, not by socket); its
//! driver task runs on the thread's own runtime.

use std::cell::RefCell;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use http::header::{CONTENT_ENCODING, SET_COOKIE};
use http::Request;

use super::http1::{Jar, Response};
use super::spec::{Protocol, TlsSpec};

/// The sending side of an HTTP/3 connection (cheap to clone: one per stream loop).
pub type Sender = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;
/// The HTTP/3 connection's control side; polled (its own task) until the connection ends.
pub type Driver = h3::client::Connection<h3_quinn::Connection, Bytes>;

/// Stream-level receive window (bytes), as HTTP/2's, so a 128 KB response never waits
/// for credit.
const STREAM_WINDOW: u32 = 1 << 20;
/// Connection-level receive window (bytes), as HTTP/2's.
const CONNECTION_WINDOW: u32 = 16 << 20;
/// The QUIC idle timeout the client proposes (the effective one is the smaller of the
/// two peers'): longer than any run, so connections end by being closed, not by idling.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Application close code of a connection the generator is done with: `H3_NO_ERROR`.
const H3_NO_ERROR: u32 = 0x100;

/// What every connection of a run needs: the QUIC client configuration and the server
/// name (SNI, and the name the certificate would be checked against).
#[derive(Clone)]
pub struct Quic {
    config: quinn::ClientConfig,
    server_name: String,
}

impl Quic {
    /// The QUIC client for `tls` (ALPN `h3`, TLS 1.3, the run's key-exchange group).
    pub fn new(tls: &TlsSpec) -> io::Result<Quic> {
        let rustls = super::tls::client_config(tls, Protocol::Http3)?;
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(rustls)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("QUIC TLS configuration: {e}")))?;
        let mut transport = quinn::TransportConfig::default();
        transport
            .stream_receive_window(STREAM_WINDOW.into())
            .receive_window(CONNECTION_WINDOW.into())
            .max_idle_timeout(Some(
                quinn::IdleTimeout::try_from(IDLE_TIMEOUT).map_err(|e| io::Error::other(e.to_string()))?,
            ));
        let mut config = quinn::ClientConfig::new(Arc::new(crypto));
        config.transport_config(Arc::new(transport));
        Ok(Quic { config, server_name: tls.server_name.clone() })
    }

    /// A client endpoint (one UDP socket on an ephemeral port of the family of
    /// `target`). Must be called inside a tokio runtime: its driver is spawned there.
    pub fn endpoint(&self, target: SocketAddr) -> io::Result<quinn::Endpoint> {
        let any = match target {
            SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
            SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
        };
        let mut endpoint = quinn::Endpoint::client(any)?;
        endpoint.set_default_client_config(self.config.clone());
        Ok(endpoint)
    }

    /// Opens a QUIC connection to `target` from `endpoint` and starts HTTP/3 on it. The
    /// returned [`Driver`] must be polled for any stream to make progress; the
    /// [`quinn::Connection`] is kept to close the connection when the generator is done.
    pub async fn connect(
        &self,
        endpoint: &quinn::Endpoint,
        target: SocketAddr,
    ) -> io::Result<(quinn::Connection, Driver, Sender)> {
        let connecting = endpoint.connect(target, &self.server_name).map_err(io::Error::other)?;
        let connection = connecting.await.map_err(io::Error::other)?;
        let (driver, sender) =
            h3::client::new(h3_quinn::Connection::new(connection.clone())).await.map_err(io::Error::other)?;
        Ok((connection, driver, sender))
    }
}

/// Closes a connection the generator is done with (`H3_NO_ERROR`), so the target frees
/// it at once rather than at its idle timeout.
pub fn close(connection: &quinn::Connection) {
    connection.close(H3_NO_ERROR.into(), b"done");
}

/// Sends `request` on a new request stream (waiting for the peer's stream credit) and
/// reads its response to the end; cookies go to `jar` when given.
pub async fn exchange(send: &mut Sender, request: Request<()>, jar: Option<&RefCell<Jar>>) -> io::Result<Response> {
    let mut stream = send.send_request(request).await.map_err(io::Error::other)?;
    stream.finish().await.map_err(io::Error::other)?;
    let response = stream.recv_response().await.map_err(io::Error::other)?;
    let status = response.status().as_u16();
    let encoded = response.headers().get(CONTENT_ENCODING).is_some_and(|v| v.as_bytes() != b"identity");
    if let Some(jar) = jar {
        let mut jar = jar.borrow_mut();
        for value in response.headers().get_all(SET_COOKIE) {
            jar.set(value.as_bytes());
        }
    }
    let mut body_bytes = 0u64;
    while let Some(data) = stream.recv_data().await.map_err(io::Error::other)? {
        body_bytes += data.remaining() as u64;
    }
    Ok(Response { status, body_bytes, encoded, close: false })
}
