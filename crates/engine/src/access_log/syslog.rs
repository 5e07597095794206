//! Syslog messages (RFC 5424) to a Unix datagram socket such as `/dev/log`
//! (RFC 5424 over the local socket, as rsyslog's and syslog-ng's inputs read
//! it) or over UDP (RFC 5426): one message per datagram,
//! `<PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID - MSG`.
//!
//! A [`Sender`] belongs to one thread (the access log's writer, the event
//! log's sender). Sends never wait long: a socket whose receiver is behind
//! fails the send after [`SEND_TIMEOUT`] (blocking mode) or at once
//! (non-blocking), and the caller drops and counts the message. A Unix socket
//! whose receiver restarted (a new socket file) is reconnected once per
//! failed send.

use std::io;
use std::net::UdpSocket;
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, SystemTime};

use switchyard_config::{Syslog, SyslogAddress};

use super::format::Clock;

/// Longest a blocking send waits for a slow receiver.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(1);

/// Severity: informational (access log lines).
pub const INFO: u8 = 6;

/// A connected syslog transport.
#[derive(Debug)]
pub struct Sender {
    config: Syslog,
    socket: Socket,
    blocking: bool,
    /// `HOSTNAME APP-NAME PROCID `, fixed for the process.
    origin: String,
    clock: Clock,
    datagram: Vec<u8>,
}

#[derive(Debug)]
enum Socket {
    Unix(UnixDatagram),
    Udp(UdpSocket),
}

impl Sender {
    /// Connects to the configured receiver as `app`; `blocking`: whether a
    /// send may wait (up to [`SEND_TIMEOUT`]) for a receiver that is behind.
    ///
    /// # Errors
    /// The socket cannot be created or connected (no such socket file, …).
    pub fn connect(config: &Syslog, app: &str, blocking: bool) -> io::Result<Sender> {
        let socket = open(&config.address, blocking)?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let host: String = host.trim().chars().filter(|c| c.is_ascii_graphic()).take(255).collect();
        let host = if host.is_empty() { "-".to_string() } else { host };
        let origin = format!("{host} {app} {} ", std::process::id());
        Ok(Sender { config: config.clone(), socket, blocking, origin, clock: Clock::new(), datagram: Vec::new() })
    }

    /// Sends `msg` (one line, no trailing newline needed) with `severity`
    /// (0 emergency … 7 debug) and `msgid`.
    ///
    /// # Errors
    /// The receiver is gone or behind; the message is lost.
    pub fn send(&mut self, severity: u8, msgid: &str, msg: &[u8]) -> io::Result<()> {
        let msg = msg.strip_suffix(b"\n").unwrap_or(msg);
        self.datagram.clear();
        let pri = u16::from(self.config.facility) * 8 + u16::from(severity.min(7));
        let (rfc3339, _, ms) = self.clock.at(SystemTime::now());
        self.datagram.push(b'<');
        self.datagram.extend_from_slice(itoa::Buffer::new().format(pri).as_bytes());
        self.datagram.extend_from_slice(b">1 ");
        self.datagram.extend_from_slice(rfc3339);
        let millis = [b'.', b'0' + (ms / 100) as u8, b'0' + (ms / 10 % 10) as u8, b'0' + (ms % 10) as u8];
        self.datagram.extend_from_slice(&millis);
        self.datagram.extend_from_slice(b"Z ");
        self.datagram.extend_from_slice(self.origin.as_bytes());
        self.datagram.extend_from_slice(msgid.as_bytes());
        self.datagram.extend_from_slice(b" - ");
        self.datagram.extend_from_slice(msg);
        match self.send_datagram() {
            Err(e) if matches!(self.socket, Socket::Unix(_)) && e.kind() != io::ErrorKind::WouldBlock => {
                // The receiver may have restarted with a new socket file.
                self.socket = open(&self.config.address, self.blocking)?;
                self.send_datagram()
            }
            other => other,
        }
    }

    fn send_datagram(&self) -> io::Result<()> {
        let sent = match &self.socket {
            Socket::Unix(s) => s.send(&self.datagram)?,
            Socket::Udp(s) => s.send(&self.datagram)?,
        };
        if sent < self.datagram.len() {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "syslog datagram truncated"));
        }
        Ok(())
    }
}

fn open(address: &SyslogAddress, blocking: bool) -> io::Result<Socket> {
    let timeout = blocking.then_some(SEND_TIMEOUT);
    match address {
        SyslogAddress::Unix(path) => {
            let s = UnixDatagram::unbound()?;
            s.connect(path)?;
            s.set_nonblocking(!blocking)?;
            s.set_write_timeout(timeout)?;
            Ok(Socket::Unix(s))
        }
        SyslogAddress::Udp(addr) => {
            let local: std::net::SocketAddr =
                if addr.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { (std::net::Ipv6Addr::UNSPECIFIED, 0).into() };
            let s = UdpSocket::bind(local)?;
            s.connect(addr)?;
            s.set_nonblocking(!blocking)?;
            s.set_write_timeout(timeout)?;
            Ok(Socket::Udp(s))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_have_the_rfc5424_header() {
        let receiver = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let config = Syslog { address: SyslogAddress::Udp(receiver.local_addr().expect("addr")), facility: 16 };
        let mut sender = Sender::connect(&config, "switchyard", true).expect("connect");
        sender.send(INFO, "access", b"{\"status\":200}\n").expect("send");
        let mut buf = [0u8; 2048];
        let n = receiver.recv(&mut buf).expect("receive");
        let text = std::str::from_utf8(&buf[..n]).expect("utf-8");
        let re = regex::Regex::new(
            r#"^<134>1 \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \S+ switchyard \d+ access - \{"status":200\}$"#,
        )
        .expect("regex");
        assert!(re.is_match(text), "{text}");
    }

    #[test]
    fn a_unix_receiver_that_restarts_is_reconnected() {
        let dir = std::env::temp_dir().join(format!("sy-syslog-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("log.sock");
        let _ = std::fs::remove_file(&path);
        let first = UnixDatagram::bind(&path).expect("bind");
        let config = Syslog { address: SyslogAddress::Unix(path.clone()), facility: 3 };
        let mut sender = Sender::connect(&config, "switchyard", true).expect("connect");
        sender.send(3, "event", b"one").expect("send");
        let mut buf = [0u8; 512];
        let n = first.recv(&mut buf).expect("receive");
        assert!(buf[..n].starts_with(b"<27>1 ") && buf[..n].ends_with(b" event - one"));
        drop(first);
        std::fs::remove_file(&path).expect("remove");
        let second = UnixDatagram::bind(&path).expect("rebind");
        sender.send(3, "event", b"two").expect("send after the restart");
        let n = second.recv(&mut buf).expect("receive");
        assert!(buf[..n].ends_with(b" event - two"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
