//! Reading a connection's ClientHello before its handshake starts, for
//! services that decide something from it first (on-demand certificates:
//! the server name may need a certificate issued before the handshake can
//! answer).
//!
//! The bytes read are kept and handed to the handshake afterwards
//! ([`super::feed`]), so the handshake sees the connection from its first
//! byte. rustls's [`Acceptor`] parses the message (records, fragmentation,
//! its own size limits); this module only bounds the bytes it reads.

use std::io;

use bytes::BytesMut;
use rustls::server::Acceptor;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::acme::resolve::ACME_TLS_ALPN;

/// Bytes read at most while looking for the end of the ClientHello.
pub const MAX_HELLO: usize = 64 * 1024;

/// What a ClientHello asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The server name (SNI), as sent.
    pub server_name: Option<String>,
    /// It offers ALPN `acme-tls/1` alone: an ACME tls-alpn-01 validation.
    pub validation: bool,
}

/// Reads from `stream` into `buf` (which may hold bytes read before) until
/// `buf` holds a whole ClientHello; `Ok(None)` when the bytes are not one
/// rustls accepts or pass [`MAX_HELLO`] (the handshake then says why).
/// An error: the connection failed or closed first.
pub async fn read_hello(stream: &mut TcpStream, buf: &mut BytesMut) -> io::Result<Option<Hello>> {
    let mut acceptor = Acceptor::default();
    let mut fed = 0;
    loop {
        while fed < buf.len() {
            let mut rest = &buf[fed..];
            match acceptor.read_tls(&mut rest) {
                Ok(0) | Err(_) => return Ok(None),
                Ok(n) => fed += n,
            }
            match acceptor.accept() {
                Ok(Some(accepted)) => return Ok(Some(describe(&accepted.client_hello()))),
                Ok(None) => {}
                Err(_) => return Ok(None),
            }
        }
        if buf.len() >= MAX_HELLO {
            return Ok(None);
        }
        buf.reserve(4096);
        if stream.read_buf(buf).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
}

fn describe(hello: &rustls::server::ClientHello<'_>) -> Hello {
    let validation = hello.alpn().is_some_and(|protocols| {
        let mut offered = protocols.peekable();
        offered.peek().is_some() && offered.all(|p| p == ACME_TLS_ALPN)
    });
    Hello { server_name: hello.server_name().map(str::to_string), validation }
}
