//! The web dashboard: three static files compiled into the binary.
//!
//! No build step and nothing fetched from elsewhere: plain HTML, CSS and
//! JavaScript under `crates/admin/assets/`, embedded with `include_str!`. The
//! page and its assets need no token (they hold no data); the page asks for
//! one when the API answers 401. The content security policy allows only this
//! origin, and framing is refused so no other site can overlay the buttons.

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::AdminState;

const INDEX_HTML: &str = include_str!("../assets/index.html");
const DASHBOARD_CSS: &str = include_str!("../assets/dashboard.css");
const DASHBOARD_JS: &str = include_str!("../assets/dashboard.js");

const CSP: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
                   connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// The dashboard routes: `/` and `/assets/*`.
pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route("/", get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }))
        .route("/assets/dashboard.css", get(|| async { asset("text/css; charset=utf-8", DASHBOARD_CSS) }))
        .route("/assets/dashboard.js", get(|| async { asset("text/javascript; charset=utf-8", DASHBOARD_JS) }))
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Revalidate every time so an upgraded binary never runs a stale script.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}
