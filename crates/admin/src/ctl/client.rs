//! The blocking HTTP client of `switchyard ctl`: one request per call to the
//! admin API, errors turned into messages an operator can act on.

use std::time::Duration;

use ureq::http::{Method, Request};

/// Longest a single admin call may take (a reload re-reads and applies a file).
const TIMEOUT: Duration = Duration::from_secs(30);
/// Largest answer read (a big Prometheus exposition stays well below).
const MAX_BODY: u64 = 64 * 1024 * 1024;

/// Why a `ctl` command failed.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// Nothing answered at the admin address.
    #[error("cannot reach the admin API at {url}: {reason}\nhint: is switchyard running with an [admin] listener there? (--admin URL, or SWITCHYARD_ADMIN)")]
    Unreachable {
        /// The URL tried.
        url: String,
        /// What the connection attempt said.
        reason: String,
    },
    /// The API answered with an error status.
    #[error("{status} {}: {message}", reason(*status))]
    Refused {
        /// HTTP status.
        status: u16,
        /// The API's message, with a hint when one helps.
        message: String,
        /// Configuration diagnostics (422), one line each.
        diagnostics: Vec<String>,
    },
    /// The answer could not be understood.
    #[error("unexpected answer from {url}: {reason}")]
    Protocol {
        /// The URL asked.
        url: String,
        /// What was wrong with the answer.
        reason: String,
    },
    /// A local problem: unreadable file, unknown pool, bad argument.
    #[error("{0}")]
    Usage(String),
    /// `ctl health`: the node answered but must not hold the virtual address.
    #[error("not ready: {0}")]
    NotReady(String),
}

/// A client bound to one admin API address and token.
pub(crate) struct Client {
    agent: ureq::Agent,
    base: String,
    token: Option<String>,
}

impl Client {
    /// `admin` is `http://host:port` (the scheme may be left out).
    pub(crate) fn new(admin: &str, token: Option<String>) -> Result<Client, CtlError> {
        let base = admin.trim_end_matches('/');
        let base = if base.contains("://") { base.to_owned() } else { format!("http://{base}") };
        if !base.starts_with("http://") {
            return Err(CtlError::Usage(format!(
                "unsupported admin URL `{admin}`: the admin API speaks plain http://"
            )));
        }
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(TIMEOUT))
            .max_redirects(0)
            .build()
            .new_agent();
        Ok(Client { agent, base, token: token.filter(|t| !t.is_empty()) })
    }

    /// Sends one request; returns the body of a 2xx answer, or the API's error.
    pub(crate) fn call(&self, method: Method, path: &str, body: Option<(&str, String)>) -> Result<String, CtlError> {
        let (status, text) = self.call_any(method, path, body)?;
        if (200..300).contains(&status) {
            return Ok(text);
        }
        Err(self.refusal(status, &text))
    }

    /// Sends one request; returns the status and body of whatever answer came.
    pub(crate) fn call_any(
        &self,
        method: Method,
        path: &str,
        body: Option<(&str, String)>,
    ) -> Result<(u16, String), CtlError> {
        let url = format!("{}{path}", self.base);
        let mut request = Request::builder().method(method).uri(&url);
        if let Some(token) = &self.token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let (content_type, body) = body.unwrap_or(("text/plain", String::new()));
        let request = request
            .header("content-type", content_type)
            .body(body)
            .map_err(|e| CtlError::Usage(format!("cannot build a request for {url}: {e}")))?;
        let mut response = self.agent.run(request).map_err(|e| transport_error(&url, e))?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_string()
            .map_err(|e| CtlError::Protocol { url: url.clone(), reason: e.to_string() })?;
        Ok((status, text))
    }

    /// The error for a non-2xx answer, with a hint for the common ones.
    fn refusal(&self, status: u16, body: &str) -> CtlError {
        let json: Option<serde_json::Value> = serde_json::from_str(body).ok();
        let field = |name: &str| json.as_ref().and_then(|j| j.get(name));
        let diagnostics: Vec<String> = field("diagnostics")
            .and_then(|d| d.as_array())
            .map(|lines| lines.iter().filter_map(|l| l.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        let mut message = match field("error").and_then(|e| e.as_str()) {
            Some(m) => m.to_owned(),
            None if !diagnostics.is_empty() => "invalid configuration".to_owned(),
            None => body.trim().to_owned(),
        };
        match status {
            401 if self.token.is_none() => message.push_str("\nhint: pass a token with --token or SWITCHYARD_TOKEN"),
            401 => message.push_str("\nhint: the token given (--token or SWITCHYARD_TOKEN) was not accepted"),
            403 => message.push_str("\nhint: this change needs a token with the admin role"),
            _ => {}
        }
        if message.is_empty() {
            message = "(no message)".to_owned();
        }
        CtlError::Refused { status, message, diagnostics }
    }
}

/// The standard name of an HTTP status (`Not Found`).
fn reason(status: u16) -> &'static str {
    ureq::http::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("Error")
}

fn transport_error(url: &str, error: ureq::Error) -> CtlError {
    let reason = match &error {
        ureq::Error::Io(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
        ureq::Error::Io(e) => e.to_string(),
        ureq::Error::HostNotFound => "host not found".to_owned(),
        ureq::Error::Timeout(_) => format!("no answer within {} s", TIMEOUT.as_secs()),
        other => other.to_string(),
    };
    match error {
        ureq::Error::Protocol(_) | ureq::Error::BadUri(_) => CtlError::Protocol { url: url.to_owned(), reason },
        _ => CtlError::Unreachable { url: url.to_owned(), reason },
    }
}

/// Percent-encodes a query-string value (everything but unreserved characters and `/`).
pub(crate) fn encode_query_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(encode_query_value("conf/a b&c.toml"), "conf/a%20b%26c.toml");
        assert_eq!(encode_query_value("é"), "%C3%A9");
    }

    #[test]
    fn admin_urls_get_a_scheme_and_lose_trailing_slashes() {
        let c = Client::new("127.0.0.1:9090/", None).expect("client");
        assert_eq!(c.base, "http://127.0.0.1:9090");
        assert!(matches!(Client::new("https://x:1", None), Err(CtlError::Usage(_))));
    }

    #[test]
    fn refusals_carry_message_hint_and_diagnostics() {
        let c = Client::new("http://127.0.0.1:1", None).expect("client");
        let e = c.refusal(401, r#"{"error":"unknown token"}"#);
        assert!(e.to_string().starts_with("401 Unauthorized: unknown token\nhint: pass a token"), "{e}");
        let e = c.refusal(422, r#"{"valid":false,"diagnostics":["a.toml:1:1: error: x","  hint: y"]}"#);
        match e {
            CtlError::Refused { status: 422, diagnostics, .. } => assert_eq!(diagnostics.len(), 2),
            other => panic!("unexpected {other:?}"),
        }
    }
}
