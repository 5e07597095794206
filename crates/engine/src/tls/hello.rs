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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::io::AsyncWriteExt;

    /// The first flight of a rustls client for `name`, offering `alpn`.
    fn client_hello(name: &str, alpn: &[&[u8]]) -> Vec<u8> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let name = rustls::pki_types::ServerName::try_from(name.to_string()).expect("name");
        let mut conn = rustls::ClientConnection::new(Arc::new(config), name).expect("client");
        let mut out = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut out).expect("write");
        }
        out
    }

    /// Sends `bytes` in two parts over loopback (the first `pre` bytes as if
    /// read before), and reads the ClientHello on the other side.
    async fn read(bytes: Vec<u8>, pre: usize) -> (io::Result<Option<Hello>>, BytesMut) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut buf = BytesMut::from(&bytes[..pre]);
        let rest = bytes[pre..].to_vec();
        let writer = tokio::spawn(async move {
            let mut client = TcpStream::connect(addr).await.expect("connect");
            let (a, b) = rest.split_at(rest.len() / 2);
            client.write_all(a).await.expect("write");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            client.write_all(b).await.expect("write");
            client
        });
        let (mut stream, _) = listener.accept().await.expect("accept");
        let hello = read_hello(&mut stream, &mut buf).await;
        drop(writer.await);
        (hello, buf)
    }

    #[tokio::test]
    async fn the_server_name_is_read_and_every_byte_kept() {
        let bytes = client_hello("a.shops.example", &[b"h2", b"http/1.1"]);
        let (hello, buf) = read(bytes.clone(), 10).await;
        let hello = hello.expect("read").expect("a ClientHello");
        assert_eq!(hello.server_name.as_deref(), Some("a.shops.example"));
        assert!(!hello.validation);
        assert_eq!(&buf[..], &bytes[..], "the handshake gets the same bytes");
    }

    #[tokio::test]
    async fn an_acme_validation_is_told_apart() {
        let (hello, _) = read(client_hello("a.shops.example", &[ACME_TLS_ALPN]), 0).await;
        assert!(hello.expect("read").expect("a ClientHello").validation);
        let (hello, _) = read(client_hello("a.shops.example", &[b"h2", ACME_TLS_ALPN]), 0).await;
        assert!(!hello.expect("read").expect("a ClientHello").validation);
    }

    #[tokio::test]
    async fn not_a_client_hello_is_left_to_the_handshake() {
        let (hello, buf) = read(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n".to_vec(), 0).await;
        assert!(hello.expect("read").is_none());
        assert!(buf.starts_with(b"GET"));
    }
}
