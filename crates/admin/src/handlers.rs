//! The request handlers of the JSON API: decode and check the input, call the
//! [`Backend`] on tokio's blocking pool, encode the answer.
//!
//! Every error leaves as `{"error": "message"}` (plus `"diagnostics"` for a
//! refused configuration) with the status of its [`ApiError`] variant; input
//! problems are 400 with a message saying what was expected, never a panic.

use axum::body::Bytes;
use axum::extract::rejection::{QueryRejection, StringRejection};
use axum::extract::{Path, Query, RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::backend::{ApiError, Backend, ServerOp};
use crate::{AdminState, MetricsFormat};

/// Largest weight the API accepts (the configuration's limit too).
pub const MAX_WEIGHT: u32 = 1000;
/// Persistence entries returned when the request names no `limit`.
pub const DEFAULT_PERSISTENCE_LIMIT: usize = 100;
/// Most persistence entries one request may ask for; larger limits are clamped.
pub const MAX_PERSISTENCE_LIMIT: usize = 10_000;
/// Cache keys listed when the request names no `limit`.
pub const DEFAULT_CACHE_LIMIT: usize = 100;
/// Most cache keys one request may ask for; larger limits are clamped.
pub const MAX_CACHE_LIMIT: usize = 10_000;

/// Content type of the configuration text.
const TOML_TEXT: &str = "text/plain; charset=utf-8";

/// `{"error": message}` with `status`.
pub(crate) fn error_response(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            ApiError::NotFound(m) => error_response(StatusCode::NOT_FOUND, &m),
            ApiError::BadRequest(m) => error_response(StatusCode::BAD_REQUEST, &m),
            ApiError::Conflict(m) => error_response(StatusCode::CONFLICT, &m),
            ApiError::Invalid(diagnostics) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                Json(json!({ "error": "invalid configuration", "diagnostics": diagnostics })),
            )
                .into_response(),
        }
    }
}

/// Runs a backend call on the blocking pool: reloads read files and take
/// locks, and the admin runtime may have a single thread.
async fn call<T, F>(state: &AdminState, f: F) -> Result<T, Response>
where
    T: Send + 'static,
    F: FnOnce(&dyn Backend) -> T + Send + 'static,
{
    let backend = state.inner.backend.clone();
    tokio::task::spawn_blocking(move || f(&*backend))
        .await
        .map_err(|_| error_response(StatusCode::INTERNAL_SERVER_ERROR, "internal error: the backend call failed"))
}

/// `GET /api/v1/health`.
pub(crate) async fn health(State(state): State<AdminState>) -> Response {
    match call(&state, |b| b.health()).await {
        Ok(view) => Json(view).into_response(),
        Err(r) => r,
    }
}

/// `GET /api/v1/cluster`: 200 when this node is ready to hold the virtual
/// address, 503 when not (so a plain HTTP check works too); the body says why.
pub(crate) async fn cluster(State(state): State<AdminState>) -> Response {
    match call(&state, |b| b.cluster()).await {
        Ok(view) if view.ready => Json(view).into_response(),
        Ok(view) => (StatusCode::SERVICE_UNAVAILABLE, Json(view)).into_response(),
        Err(r) => r,
    }
}

/// `GET /api/v1/config`: the running configuration as TOML.
pub(crate) async fn config(State(state): State<AdminState>) -> Response {
    match call(&state, |b| b.config()).await {
        Ok(text) => ([(header::CONTENT_TYPE, TOML_TEXT)], text).into_response(),
        Err(r) => r,
    }
}

/// `GET /api/v1/stats`.
pub(crate) async fn stats(State(state): State<AdminState>) -> Response {
    match call(&state, |b| b.stats()).await {
        Ok(view) => Json(view).into_response(),
        Err(r) => r,
    }
}

/// `GET /metrics`: Prometheus exposition, OpenMetrics or the classic text
/// format as the `Accept` header asks ([`MetricsFormat::negotiate`]), unless
/// the query forces one (`?format=text` or `?format=openmetrics`: for a
/// scraper that cannot choose its `Accept`).
pub(crate) async fn metrics(
    State(state): State<AdminState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let forced = match MetricsFormat::from_query(query.as_deref()) {
        Ok(forced) => forced,
        Err(message) => return error_response(StatusCode::BAD_REQUEST, &message),
    };
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = forced.unwrap_or_else(|| MetricsFormat::negotiate(accept));
    match call(&state, move |b| b.metrics(format)).await {
        Ok(text) => ([(header::CONTENT_TYPE, format.content_type())], text).into_response(),
        Err(r) => r,
    }
}

/// `POST /api/v1/pools/{pool}/servers/{server}/{enable|disable|drain}`.
pub(crate) async fn server_action(
    State(state): State<AdminState>,
    Path((pool, server, action)): Path<(String, String, String)>,
) -> Response {
    let op = match action.as_str() {
        "enable" => ServerOp::Enable,
        "disable" => ServerOp::Disable,
        "drain" => ServerOp::Drain,
        other => {
            let message = format!("unknown server action `{other}` (expected enable, disable or drain)");
            return error_response(StatusCode::NOT_FOUND, &message);
        }
    };
    server_op(&state, pool, server, op).await
}

/// `PUT /api/v1/pools/{pool}/servers/{server}/weight` with `{"weight": N}`.
pub(crate) async fn server_weight(
    State(state): State<AdminState>,
    Path((pool, server)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    match parse_weight(&body) {
        Ok(weight) => server_op(&state, pool, server, ServerOp::Weight(weight)).await,
        Err(message) => error_response(StatusCode::BAD_REQUEST, &message),
    }
}

async fn server_op(state: &AdminState, pool: String, server: String, op: ServerOp) -> Response {
    match call(state, move |b| b.server(&pool, &server, op)).await {
        Ok(Ok(view)) => Json(view).into_response(),
        Ok(Err(e)) => e.into_response(),
        Err(r) => r,
    }
}

/// Decodes `{"weight": N}` with `N` an integer in `0..=MAX_WEIGHT`; the error
/// is a message for the client.
fn parse_weight(body: &[u8]) -> Result<u32, String> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("malformed JSON body: {e}; expected {{\"weight\": N}}"))?;
    let Some(weight) = value.get("weight") else {
        return Err("missing field `weight`; expected {\"weight\": N}".to_owned());
    };
    match weight.as_u64() {
        Some(w) if w <= u64::from(MAX_WEIGHT) => u32::try_from(w).map_err(|_| "weight out of range".to_owned()),
        _ => Err(format!("weight must be an integer from 0 to {MAX_WEIGHT}, got {weight}")),
    }
}

/// `GET /api/v1/pools/{pool}/persistence?limit=N`.
pub(crate) async fn persistence(
    State(state): State<AdminState>,
    Path(pool): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let limit = match parse_limit(query.as_deref()) {
        Ok(limit) => limit,
        Err(message) => return error_response(StatusCode::BAD_REQUEST, &message),
    };
    match call(&state, move |b| b.persistence(&pool, limit)).await {
        Ok(Ok(view)) => Json(view).into_response(),
        Ok(Err(e)) => e.into_response(),
        Err(r) => r,
    }
}

/// The `limit` query parameter: default [`DEFAULT_PERSISTENCE_LIMIT`], clamped
/// to [`MAX_PERSISTENCE_LIMIT`].
fn parse_limit(query: Option<&str>) -> Result<usize, String> {
    let value = query
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(name, _)| *name == "limit")
        .map(|(_, value)| value);
    match value {
        None => Ok(DEFAULT_PERSISTENCE_LIMIT),
        Some(v) => v
            .parse::<usize>()
            .map(|n| n.min(MAX_PERSISTENCE_LIMIT))
            .map_err(|_| format!("limit must be a non-negative integer, got `{v}`")),
    }
}

/// `DELETE /api/v1/pools/{pool}/persistence`.
pub(crate) async fn flush_persistence(State(state): State<AdminState>, Path(pool): Path<String>) -> Response {
    let name = pool.clone();
    match call(&state, move |b| b.flush_persistence(&name)).await {
        Ok(Ok(removed)) => Json(json!({ "pool": pool, "removed": removed })).into_response(),
        Ok(Err(e)) => e.into_response(),
        Err(r) => r,
    }
}

/// Body of `POST /api/v1/cache/purge`: a service and either an exact key or a prefix.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct PurgeRequest {
    service: String,
    key: Option<String>,
    prefix: Option<String>,
}

/// `POST /api/v1/cache/purge` with `{"service", "key"}` or `{"service", "prefix"}`.
pub(crate) async fn purge_cache(
    State(state): State<AdminState>,
    body: Result<Json<PurgeRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let request = match body {
        Ok(Json(r)) => r,
        Err(rejection) => return error_response(rejection.status(), &rejection.body_text()),
    };
    let (key, prefix) = match (request.key, request.prefix) {
        (Some(key), None) => (key, false),
        (None, Some(prefix)) => (prefix, true),
        _ => return error_response(StatusCode::BAD_REQUEST, "give exactly one of `key` and `prefix`"),
    };
    let service = request.service;
    match call(&state, move |b| b.purge_cache(&service, &key, prefix)).await {
        Ok(Ok(purged)) => Json(json!({ "purged": purged })).into_response(),
        Ok(Err(e)) => e.into_response(),
        Err(r) => r,
    }
}

/// `GET /api/v1/certificates`: every certificate from ACME, its state and renewal.
pub(crate) async fn certificates(State(state): State<AdminState>) -> Response {
    match call(&state, |b| b.certificates()).await {
        Ok(view) => Json(json!({ "certificates": view })).into_response(),
        Err(r) => r,
    }
}

/// `GET /api/v1/cache`: every service's cache, its size and counters.
pub(crate) async fn caches(State(state): State<AdminState>) -> Response {
    match call(&state, |b| b.stats()).await {
        Ok(view) => Json(json!({ "caches": view.caches })).into_response(),
        Err(r) => r,
    }
}

/// The query of a cache listing: `key=K` (one key), or `prefix=P` (every
/// key starting with it; neither: every key), and `limit=N`.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct EntriesQuery {
    key: Option<String>,
    prefix: Option<String>,
    limit: Option<usize>,
}

/// `GET /api/v1/cache/{service}/entries?key=K` or `?prefix=P&limit=N`.
pub(crate) async fn cache_entries(
    State(state): State<AdminState>,
    Path(service): Path<String>,
    query: Result<Query<EntriesQuery>, QueryRejection>,
) -> Response {
    let query = match query {
        Ok(Query(q)) => q,
        Err(rejection) => return error_response(StatusCode::BAD_REQUEST, &rejection.body_text()),
    };
    let (key, prefix) = match (query.key, query.prefix) {
        (Some(key), None) => (key, false),
        (None, prefix) => (prefix.unwrap_or_default(), true),
        (Some(_), Some(_)) => return error_response(StatusCode::BAD_REQUEST, "give at most one of `key` and `prefix`"),
    };
    let limit = query.limit.unwrap_or(DEFAULT_CACHE_LIMIT).min(MAX_CACHE_LIMIT);
    match call(&state, move |b| b.cache_entries(&service, &key, prefix, limit)).await {
        Ok(Ok(view)) => Json(view).into_response(),
        Ok(Err(e)) => e.into_response(),
        Err(r) => r,
    }
}

/// `POST /api/v1/config/validate[?name=FILE]` with the TOML text as body.
pub(crate) async fn validate(
    State(state): State<AdminState>,
    query: Result<Query<NameQuery>, QueryRejection>,
    body: Result<String, StringRejection>,
) -> Response {
    let source = match body {
        Ok(source) => source,
        Err(rejection) => return error_response(rejection.status(), &rejection.body_text()),
    };
    let name = query.ok().and_then(|q| q.0.name).unwrap_or_else(|| "<request>".to_owned());
    match call(&state, move |b| b.validate(&source, &name)).await {
        Ok(Ok(warnings)) => Json(json!({ "valid": true, "warnings": warnings })).into_response(),
        Ok(Err(diagnostics)) => {
            (StatusCode::UNPROCESSABLE_ENTITY, Json(json!({ "valid": false, "diagnostics": diagnostics })))
                .into_response()
        }
        Err(r) => r,
    }
}

/// The query of a validation request.
#[derive(serde::Deserialize)]
pub(crate) struct NameQuery {
    name: Option<String>,
}

/// `POST /api/v1/reload`.
pub(crate) async fn reload(State(state): State<AdminState>) -> Response {
    match call(&state, |b| b.reload()).await {
        Ok(Ok(view)) => Json(view).into_response(),
        Ok(Err(e)) => e.into_response(),
        Err(r) => r,
    }
}

/// Any path no route matches.
pub(crate) async fn not_found(uri: Uri) -> Response {
    error_response(StatusCode::NOT_FOUND, &format!("no such endpoint: {}", uri.path()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weight_bodies() {
        assert_eq!(parse_weight(br#"{"weight": 0}"#), Ok(0));
        assert_eq!(parse_weight(br#"{"weight": 1000}"#), Ok(1000));
        for bad in [&br#"{"weight": 1001}"#[..], br#"{"weight": -1}"#, br#"{"weight": 1.5}"#, br#"{"weight": "5"}"#] {
            let message = parse_weight(bad).expect_err("refused");
            assert!(message.contains("0 to 1000"), "{message}");
        }
        assert!(parse_weight(b"{weight").expect_err("malformed").starts_with("malformed JSON"));
        assert!(parse_weight(b"{}").expect_err("missing").contains("missing field"));
        assert!(parse_weight(b"[]").expect_err("array").contains("missing field"));
    }

    #[test]
    fn persistence_limits() {
        assert_eq!(parse_limit(None), Ok(DEFAULT_PERSISTENCE_LIMIT));
        assert_eq!(parse_limit(Some("other=1")), Ok(DEFAULT_PERSISTENCE_LIMIT));
        assert_eq!(parse_limit(Some("limit=5")), Ok(5));
        assert_eq!(parse_limit(Some("x=1&limit=0")), Ok(0));
        assert_eq!(parse_limit(Some("limit=99999999")), Ok(MAX_PERSISTENCE_LIMIT));
        assert!(parse_limit(Some("limit=-1")).is_err());
        assert!(parse_limit(Some("limit=ten")).is_err());
    }
}
