//! `switchyard-admin`: the admin API, the Prometheus endpoint, the live web
//! dashboard and the `switchyard ctl` client.
//!
//! The crate does not know the engine: the binary implements [`Backend`]
//! over it and hands it to [`serve`]. Everything a request can do goes
//! through that trait, so the API, the dashboard and `ctl` cannot disagree.
//!
//! Layout: [`backend`] (the boundary and its view types), `auth` (tokens and
//! roles), `handlers` (the JSON API), `events` and `sample` (the live feed),
//! `dashboard` (embedded assets), [`ctl`] (the command-line client).
//!
//! Invariant: an admin listener without tokens is served only on a loopback
//! address; [`serve`] refuses anything else even if validation was skipped.

pub mod backend;
pub mod ctl;

mod auth;
mod dashboard;
mod events;
mod exposition;
mod handlers;
mod sample;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post, put};
use axum::Router;
use switchyard_config::{Admin, AdminToken};

pub use backend::{
    ApiError, Backend, CacheEntriesView, CacheEntryView, CacheKeyView, CachePartialView, CacheView, CertificateView,
    ClassCounts, DatagramCounts, HealthView, HistogramView, OnDemandRefusal, OnDemandView, PersistenceEntryView,
    PersistenceView, PoolView, ReloadView, ServerOp, ServerView, ServiceView, StatsView,
};
pub use exposition::MetricsFormat;
pub use handlers::{
    DEFAULT_CACHE_LIMIT, DEFAULT_PERSISTENCE_LIMIT, MAX_CACHE_LIMIT, MAX_PERSISTENCE_LIMIT, MAX_WEIGHT,
};
pub use sample::percentile;

/// Largest request body the API reads (a configuration to validate); larger → 413.
pub const BODY_LIMIT: usize = 1024 * 1024;

/// Tunables of the live feed.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Time between two dashboard samples.
    pub sample_interval: Duration,
    /// Samples kept for a new dashboard (300 × 1 s = the charts' 5 minutes).
    pub history: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { sample_interval: Duration::from_secs(1), history: 300 }
    }
}

/// Everything the handlers share: the backend, the tokens, the live feed.
/// Cheap to clone.
#[derive(Clone)]
pub struct AdminState {
    inner: Arc<Inner>,
}

struct Inner {
    backend: Arc<dyn Backend>,
    auth: auth::Auth,
    events: events::Events,
}

impl AdminState {
    /// State with the default [`Options`]. `tokens` empty means no authentication.
    pub fn new(backend: Arc<dyn Backend>, tokens: Vec<AdminToken>) -> Self {
        Self::with_options(backend, tokens, Options::default())
    }

    /// State with explicit [`Options`].
    pub fn with_options(backend: Arc<dyn Backend>, tokens: Vec<AdminToken>, options: Options) -> Self {
        let inner = Inner {
            backend,
            auth: auth::Auth::new(tokens),
            events: events::Events::new(options.sample_interval, options.history),
        };
        AdminState { inner: Arc::new(inner) }
    }

    /// Stops the sampler and ends every event stream (dashboards reconnect
    /// to whatever serves next).
    pub fn close(&self) {
        self.inner.events.close();
    }
}

/// The whole admin application, without a socket: what [`serve`] runs, and
/// what tests drive with `tower::ServiceExt::oneshot`. The sampler starts
/// with the first event-stream request (or with [`serve`]).
pub fn router(state: AdminState) -> Router {
    let api = Router::new()
        .route("/api/v1/health", get(handlers::health))
        .route("/api/v1/cluster", get(handlers::cluster))
        .route("/api/v1/config", get(handlers::config))
        .route("/api/v1/config/validate", post(handlers::validate))
        .route("/api/v1/stats", get(handlers::stats))
        .route("/api/v1/reload", post(handlers::reload))
        .route("/api/v1/pools/{pool}/servers/{server}/weight", put(handlers::server_weight))
        .route("/api/v1/pools/{pool}/servers/{server}/{action}", post(handlers::server_action))
        .route("/api/v1/cache", get(handlers::caches))
        .route("/api/v1/certificates", get(handlers::certificates))
        .route("/api/v1/cache/purge", post(handlers::purge_cache))
        .route("/api/v1/cache/{service}/entries", get(handlers::cache_entries))
        .route("/api/v1/pools/{pool}/persistence", get(handlers::persistence).delete(handlers::flush_persistence))
        .route(auth::EVENTS_PATH, get(events::stream))
        .route("/metrics", get(handlers::metrics))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), auth::guard));
    Router::new()
        .merge(api)
        .merge(dashboard::routes())
        .fallback(handlers::not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// Binds the admin listener of `admin` and returns its address and the
/// future that serves it. The future ends after `shutdown` resolves and the
/// open requests finish (event streams end at once).
///
/// # Errors
/// The listener cannot be bound, or it is not on loopback and no token is
/// configured (an open admin API is served only to this host).
pub async fn serve<F>(
    admin: &Admin,
    backend: Arc<dyn Backend>,
    shutdown: F,
) -> io::Result<(SocketAddr, impl Future<Output = ()> + Send + 'static)>
where
    F: Future<Output = ()> + Send + 'static,
{
    serve_with(admin.listen, AdminState::new(backend, admin.tokens.clone()), shutdown).await
}

/// [`serve`] with a prepared [`AdminState`] (explicit [`Options`]).
///
/// # Errors
/// As [`serve`].
pub async fn serve_with<F>(
    listen: SocketAddr,
    state: AdminState,
    shutdown: F,
) -> io::Result<(SocketAddr, impl Future<Output = ()> + Send + 'static)>
where
    F: Future<Output = ()> + Send + 'static,
{
    if state.inner.auth.is_open() && !listen.ip().is_loopback() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("admin listener {listen} is not a loopback address and has no tokens; refusing to serve an open admin API"),
        ));
    }
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let local = listener.local_addr()?;
    events::start_sampler(&state);
    let closer = state.clone();
    let stop = async move {
        shutdown.await;
        closer.close();
    };
    let app = router(state);
    let served = async move {
        if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(stop).await {
            tracing::error!("admin listener {local}: {e}");
        }
    };
    Ok((local, served))
}
