//! Who may call the admin API, checked before any handler runs.
//!
//! - With tokens configured, every API request carries `Authorization: Bearer
//!   SECRET` (or `?token=` on the event stream only, because `EventSource`
//!   cannot set headers). Missing or unknown → 401 with `WWW-Authenticate`.
//!   A read-only token may not change anything (403), except validating a
//!   configuration, which is a POST that changes nothing.
//! - Without tokens (allowed only on loopback) the API is open, so it guards
//!   against the two ways a web page in the operator's browser could reach
//!   it: DNS rebinding (the `Host` must be a loopback name) and cross-site
//!   form posts (a changing request whose `Origin` is not this host is refused).
//!
//! Secrets are compared in constant time and every configured token is
//! compared on every request, so timing says nothing about which one matched.

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use switchyard_config::{AdminToken, Role};

use crate::handlers::error_response;
use crate::AdminState;

/// The one path that also accepts its token in the query string.
pub(crate) const EVENTS_PATH: &str = "/api/v1/events";
/// The one changing method that a read-only token may use.
const VALIDATE_PATH: &str = "/api/v1/config/validate";

/// The configured tokens; empty means the API is open (loopback only).
#[derive(Debug, Clone, Default)]
pub(crate) struct Auth {
    tokens: Vec<AdminToken>,
}

impl Auth {
    pub(crate) fn new(tokens: Vec<AdminToken>) -> Self {
        Auth { tokens }
    }

    /// True when no token is configured.
    pub(crate) fn is_open(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The role of `secret`, if it is one of the configured tokens.
    fn role_of(&self, secret: &str) -> Option<Role> {
        let mut found = None;
        for token in &self.tokens {
            // No early exit: the time taken does not depend on which token matched.
            if constant_time_eq(token.secret.as_bytes(), secret.as_bytes()) {
                found = Some(token.role);
            }
        }
        found
    }
}

/// Compares two byte strings in time that depends only on their lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= x ^ y;
    }
    diff == 0
}

/// Why a request was turned away; becomes a 401 or 403 JSON answer.
#[derive(Debug)]
struct Refusal {
    status: StatusCode,
    message: String,
}

impl Refusal {
    fn into_response(self) -> Response {
        let mut response = error_response(self.status, &self.message);
        if self.status == StatusCode::UNAUTHORIZED {
            let challenge = HeaderValue::from_static("Bearer realm=\"switchyard\"");
            response.headers_mut().insert(header::WWW_AUTHENTICATE, challenge);
        }
        response
    }
}

fn unauthorized(message: &str) -> Refusal {
    Refusal { status: StatusCode::UNAUTHORIZED, message: message.to_owned() }
}

fn forbidden(message: impl Into<String>) -> Refusal {
    Refusal { status: StatusCode::FORBIDDEN, message: message.into() }
}

/// Middleware in front of every API route.
pub(crate) async fn guard(State(state): State<AdminState>, request: Request, next: Next) -> Response {
    if let Err(refusal) = check(&state.inner.auth, &request) {
        return refusal.into_response();
    }
    next.run(request).await
}

fn check(auth: &Auth, request: &Request) -> Result<(), Refusal> {
    let changes = changes_state(request.method(), request.uri().path());
    if matches!(*request.method(), Method::POST | Method::PUT | Method::DELETE) {
        check_origin(request.headers())?;
    }
    if auth.is_open() {
        return check_loopback_host(request.headers());
    }
    let Some(secret) = presented_token(request) else {
        return Err(unauthorized("this admin API requires a bearer token (Authorization: Bearer TOKEN)"));
    };
    match auth.role_of(&secret) {
        None => Err(unauthorized("unknown token")),
        Some(Role::ReadOnly) if changes => Err(forbidden("this token is read-only; changes need an admin token")),
        Some(_) => Ok(()),
    }
}

/// True for the requests a read-only token may not make.
fn changes_state(method: &Method, path: &str) -> bool {
    matches!(*method, Method::POST | Method::PUT | Method::DELETE) && path != VALIDATE_PATH
}

/// The bearer token of the request: the `Authorization` header, or `?token=`
/// on the event stream.
fn presented_token(request: &Request) -> Option<String> {
    if let Some(value) = request.headers().get(header::AUTHORIZATION) {
        let value = value.to_str().ok()?;
        let (scheme, secret) = value.split_once(' ')?;
        return scheme.eq_ignore_ascii_case("bearer").then(|| secret.trim().to_owned());
    }
    if request.uri().path() != EVENTS_PATH {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct TokenQuery {
        token: Option<String>,
    }
    axum::extract::Query::<TokenQuery>::try_from_uri(request.uri()).ok()?.0.token
}

/// Refuses a changing request sent by a page of another origin. Clients
/// other than browsers send no `Origin` and pass.
fn check_origin(headers: &HeaderMap) -> Result<(), Refusal> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let origin_authority = origin.to_str().ok().and_then(|o| o.split_once("://")).map(|(_, authority)| authority);
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    match (origin_authority, host) {
        (Some(o), Some(h)) if o.eq_ignore_ascii_case(h) => Ok(()),
        _ => Err(forbidden("cross-origin request refused")),
    }
}

/// Without tokens, answers only requests addressed to a loopback name, so a
/// hostile domain re-pointed at 127.0.0.1 (DNS rebinding) gets nothing.
fn check_loopback_host(headers: &HeaderMap) -> Result<(), Refusal> {
    let Some(host) = headers.get(header::HOST) else {
        return Ok(()); // HTTP/1.0 or in-process: no browser sends a request without Host.
    };
    let host = host.to_str().unwrap_or_default();
    if is_loopback_host(host) {
        return Ok(());
    }
    Err(forbidden(format!("host `{host}` refused: without tokens the admin API answers only loopback names")))
}

/// True for `localhost`, `127.x.y.z` and `[::1]`, with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else {
        host.rsplit_once(':').map_or(host, |(name, _port)| name)
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_compares_whole_strings() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn role_of_finds_the_matching_token() {
        let auth = Auth::new(vec![
            AdminToken { secret: "ro".into(), role: Role::ReadOnly },
            AdminToken { secret: "rw".into(), role: Role::Admin },
        ]);
        assert_eq!(auth.role_of("ro"), Some(Role::ReadOnly));
        assert_eq!(auth.role_of("rw"), Some(Role::Admin));
        assert_eq!(auth.role_of("r"), None);
    }

    #[test]
    fn loopback_hosts() {
        for host in ["localhost", "LOCALHOST:9090", "127.0.0.1", "127.0.0.1:9090", "127.9.9.9:1", "[::1]:9090", "[::1]"]
        {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in ["evil.example", "evil.example:9090", "10.0.0.1:9090", "[::2]:9090", "localhost.evil.example", ""] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }

    #[test]
    fn validate_is_the_only_post_a_reader_may_make() {
        assert!(!changes_state(&Method::POST, VALIDATE_PATH));
        assert!(!changes_state(&Method::GET, "/api/v1/stats"));
        assert!(changes_state(&Method::POST, "/api/v1/reload"));
        assert!(changes_state(&Method::PUT, "/api/v1/pools/a/servers/b/weight"));
        assert!(changes_state(&Method::DELETE, "/api/v1/pools/a/persistence"));
    }
}
