//! The data-path error: which side failed, whether a retry is safe, and what
//! the client is told.
//!
//! Every failure on a request becomes one [`ProxyError`]. Its [`Kind`] alone
//! decides the status code sent to the client (when a response can still be
//! sent) and the short reason written to the log, so the mapping lives in one
//! table below instead of being scattered over the pipeline.

use std::fmt;

/// Which party a failure is attributed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client sent something wrong, too slowly, or went away.
    Client,
    /// The server refused, stalled, or answered something invalid.
    Server,
    /// The proxy itself (configuration, resources).
    Internal,
}

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Malformed request head or framing (smuggling vectors included).
    BadRequest(&'static str),
    /// The request head did not arrive in time.
    ClientHeaderTimeout,
    /// The request carries an `Expect` the proxy cannot meet.
    ExpectationFailed,
    /// The request head or one of its parts is larger than allowed.
    HeaderTooLarge,
    /// The request body is larger than allowed.
    BodyTooLarge,
    /// The request target is longer than allowed.
    UriTooLong,
    /// Client protection refused the client (address lists, connection cap, rates).
    Refused(Refusal),
    /// The client closed or reset the connection mid-request.
    ClientClosed,
    /// The client stopped sending the body in time.
    ClientBodyTimeout,
    /// No rule chose a pool and the service has no default pool.
    NoPool,
    /// Every server of the pool is down or at its connection limit.
    NoServer,
    /// Every server was at its connection limit and the pool's queue was full.
    QueueFull,
    /// The request waited in the pool's queue for its whole timeout.
    QueueTimeout,
    /// Connecting to the server failed (refused, unreachable).
    ConnectFailed,
    /// Connecting to the server took longer than the connect timeout.
    ConnectTimeout,
    /// The TLS handshake with the server failed: certificate not trusted or
    /// not valid for the name, no common protocol, a client certificate
    /// refused, or a server that does not speak TLS.
    ServerTls,
    /// A pool with `protocol = "h2"` reached a server over TLS that did not
    /// select `h2` in ALPN.
    ServerNotH2,
    /// A protocol switch (WebSocket) was asked of a pool that speaks HTTP/2
    /// to its servers: an HTTP/2 stream cannot carry the switched connection.
    SwitchToH2Pool,
    /// The server did not start its response in time, or stalled mid-body.
    ServerTimeout,
    /// The server closed the connection before a complete response.
    ServerClosed,
    /// The server's response could not be parsed.
    BadResponse(&'static str),
}

/// Why a client was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The address is denied, or not allowed (403 / close).
    Denied,
    /// The client holds `max_connections_per_client` connections (429 / close).
    TooManyConnections,
    /// The client opens connections faster than `connection_rate` (429 / close).
    ConnectionRate,
    /// The client sends requests faster than `request_rate` (429); the
    /// whole seconds until the next one is allowed (`Retry-After`).
    RequestRate(u32),
}

impl Refusal {
    /// The reason in layer-4 access log lines and as a metric label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Denied => "denied",
            Refusal::TooManyConnections => "too-many-connections",
            Refusal::ConnectionRate => "connection-rate-limited",
            Refusal::RequestRate(_) => "rate-limited",
        }
    }
}

/// A failure on the data path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyError {
    kind: Kind,
    retry_safe: bool,
}

impl ProxyError {
    /// A failure that must not be retried.
    pub fn new(kind: Kind) -> Self {
        ProxyError { kind, retry_safe: false }
    }

    /// A failure after which sending the request again (elsewhere) is safe:
    /// the server cannot have acted on it.
    pub fn retryable(kind: Kind) -> Self {
        ProxyError { kind, retry_safe: true }
    }

    /// What went wrong.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Whether a retry is safe.
    pub fn is_retry_safe(&self) -> bool {
        self.retry_safe
    }

    /// Which side failed.
    pub fn side(&self) -> Side {
        match self.kind {
            Kind::BadRequest(_)
            | Kind::ExpectationFailed
            | Kind::ClientHeaderTimeout
            | Kind::HeaderTooLarge
            | Kind::BodyTooLarge
            | Kind::UriTooLong
            | Kind::Refused(_)
            | Kind::ClientClosed
            | Kind::ClientBodyTimeout => Side::Client,
            Kind::NoPool | Kind::NoServer | Kind::QueueFull | Kind::QueueTimeout | Kind::SwitchToH2Pool => {
                Side::Internal
            }
            Kind::ConnectFailed
            | Kind::ConnectTimeout
            | Kind::ServerTimeout
            | Kind::ServerClosed
            | Kind::ServerTls
            | Kind::ServerNotH2
            | Kind::BadResponse(_) => Side::Server,
        }
    }

    /// The status sent to the client, if one can be sent at all.
    pub fn status(&self) -> Option<u16> {
        Some(match self.kind {
            Kind::BadRequest(_) => 400,
            Kind::ClientHeaderTimeout | Kind::ClientBodyTimeout => 408,
            Kind::BodyTooLarge => 413,
            Kind::UriTooLong => 414,
            Kind::Refused(Refusal::Denied) => 403,
            Kind::Refused(_) => 429,
            Kind::ExpectationFailed => 417,
            Kind::HeaderTooLarge => 431,
            Kind::ClientClosed => return None,
            Kind::NoPool | Kind::NoServer | Kind::QueueFull | Kind::QueueTimeout => 503,
            Kind::ConnectFailed
            | Kind::ServerClosed
            | Kind::ServerTls
            | Kind::ServerNotH2
            | Kind::SwitchToH2Pool
            | Kind::BadResponse(_) => 502,
            Kind::ConnectTimeout | Kind::ServerTimeout => 504,
        })
    }

    /// Seconds a refused client should wait (`Retry-After`), for a request rate refusal.
    pub fn retry_after(&self) -> Option<u32> {
        match self.kind {
            Kind::Refused(Refusal::RequestRate(secs)) => Some(secs),
            _ => None,
        }
    }

    /// A short, stable reason for logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self.kind {
            Kind::BadRequest(why) => why,
            Kind::ClientHeaderTimeout => "client header timeout",
            Kind::HeaderTooLarge => "request head too large",
            Kind::ExpectationFailed => "unsupported expectation",
            Kind::BodyTooLarge => "request body too large",
            Kind::UriTooLong => "uri too long",
            Kind::Refused(why) => why.label(),
            Kind::ClientClosed => "client closed",
            Kind::ClientBodyTimeout => "client body timeout",
            Kind::NoPool => "no pool for request",
            Kind::NoServer => "no server available",
            Kind::QueueFull => "queue full",
            Kind::QueueTimeout => "queue timeout",
            Kind::ConnectFailed => "server connect failed",
            Kind::ConnectTimeout => "server connect timeout",
            Kind::ServerTimeout => "server response timeout",
            Kind::ServerClosed => "server closed connection",
            Kind::ServerTls => "server tls failed",
            Kind::ServerNotH2 => "server did not select h2",
            Kind::SwitchToH2Pool => "protocol switch to an h2 pool",
            Kind::BadResponse(why) => why,
        }
    }
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}

impl std::error::Error for ProxyError {}

/// The reason phrase for a status code.
pub fn reason_phrase(status: u16) -> &'static str {
    // RFC 9110 15 (and 102, 103, 429, 431 from their RFCs): a head that
    // comes without a phrase of its own (HTTP/2, HTTP/3, the proxy's) gets
    // the standard one towards an HTTP/1.1 client.
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        102 => "Processing",
        103 => "Early Hints",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_maps_to_its_status_and_side() {
        let table = [
            (Kind::BadRequest("x"), Some(400), Side::Client),
            (Kind::ClientHeaderTimeout, Some(408), Side::Client),
            (Kind::HeaderTooLarge, Some(431), Side::Client),
            (Kind::ExpectationFailed, Some(417), Side::Client),
            (Kind::BodyTooLarge, Some(413), Side::Client),
            (Kind::UriTooLong, Some(414), Side::Client),
            (Kind::Refused(Refusal::Denied), Some(403), Side::Client),
            (Kind::Refused(Refusal::TooManyConnections), Some(429), Side::Client),
            (Kind::Refused(Refusal::ConnectionRate), Some(429), Side::Client),
            (Kind::Refused(Refusal::RequestRate(3)), Some(429), Side::Client),
            (Kind::ClientClosed, None, Side::Client),
            (Kind::NoServer, Some(503), Side::Internal),
            (Kind::NoPool, Some(503), Side::Internal),
            (Kind::QueueFull, Some(503), Side::Internal),
            (Kind::QueueTimeout, Some(503), Side::Internal),
            (Kind::ConnectFailed, Some(502), Side::Server),
            (Kind::ConnectTimeout, Some(504), Side::Server),
            (Kind::ServerTimeout, Some(504), Side::Server),
            (Kind::ServerClosed, Some(502), Side::Server),
            (Kind::ServerTls, Some(502), Side::Server),
            (Kind::ServerNotH2, Some(502), Side::Server),
            (Kind::SwitchToH2Pool, Some(502), Side::Internal),
            (Kind::BadResponse("y"), Some(502), Side::Server),
        ];
        for (kind, status, side) in table {
            let e = ProxyError::new(kind);
            assert_eq!(e.status(), status, "{kind:?}");
            assert_eq!(e.side(), side, "{kind:?}");
            assert!(!e.is_retry_safe());
        }
        assert!(ProxyError::retryable(Kind::ConnectFailed).is_retry_safe());
    }
}
