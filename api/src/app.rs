//! Building and serving the application: connect to MongoDB and NATS, create indexes and
//! streams, assemble the middleware around the routes, serve until the shutdown token fires,
//! then give in-flight requests `SHUTDOWN_GRACE_SECONDS` to finish. `/metrics` is served where
//! `API_METRICS_BIND` says ([`crate::config::MetricsAt`]): on a listener of its own, beside
//! the API, or nowhere.
//!
//! Middleware, outermost first (then, per route, request metrics — see [`crate::state::metrics`]): request id (set, or kept from the client's `X-Request-Id`) →
//! tracing span per request → `X-Request-Id` copied to the response → problem+json rendering
//! → rate-limit headers → panic catching → request timeout → body limit (1 MiB) → the handler
//! in its own task ([`crate::http::run_to_completion`]) → routes.

use common::files::Files;
use std::{future::IntoFuture, time::Duration};

use anyhow::Context;
use axum::{
    Router,
    extract::{DefaultBodyLimit, Request},
    http::{HeaderName, StatusCode},
    middleware,
    routing::get,
    serve::ListenerExt,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;
use tower_http::{
    catch_panic::CatchPanicLayer,
    classify::ServerErrorsFailureClass,
    request_id::{PropagateRequestIdLayer, SetRequestIdLayer},
    timeout::TimeoutLayer,
    trace::{DefaultOnResponse, TraceLayer},
};
use tracing::Level;

use crate::{
    config::{ApiConfig, MetricsAt},
    error::{BaseUrl, render_problems},
    http::request_id::MakeRandomRequestId,
    http::run_to_completion::{RequestDeadline, run_to_completion},
    routes,
    state::AppState,
    state::metrics,
    state::ratelimit::rate_limit_headers,
};

pub use crate::http::MAX_BODY_BYTES;
/// The longest a request may take (above the longest `Prefer: wait` of 60 s).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(90);

/// Binds `API_BIND` and serves until `shutdown` fires.
pub async fn run(config: ApiConfig, shutdown: CancellationToken) -> anyhow::Result<()> {
    let listener = TcpListener::bind(config.bind).await.with_context(|| format!("cannot listen on {}", config.bind))?;
    serve(config, listener, shutdown).await
}

/// Serves on an already bound listener (tests bind port 0) until `shutdown` fires; binds
/// `API_METRICS_BIND` when it names an address.
pub async fn serve(config: ApiConfig, listener: TcpListener, shutdown: CancellationToken) -> anyhow::Result<()> {
    let metrics = match config.metrics {
        MetricsAt::Bind(addr) => {
            Some(TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr} (API_METRICS_BIND)"))?)
        }
        MetricsAt::Off | MetricsAt::Public => None,
    };
    serve_split(config, listener, metrics, shutdown).await
}

/// Serves the API on `listener` and, if given, `/metrics` on `metrics` until `shutdown` fires.
pub async fn serve_split(
    config: ApiConfig,
    listener: TcpListener,
    metrics: Option<TcpListener>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let grace = config.shutdown_grace;
    let state = connect(config).await?;
    // A cancel's end time is stamped by the database's clock (common::store::clock).
    state.store.keep_clock(shutdown.clone());
    let (background, job_outbox) = (state.background.clone(), state.job_outbox.clone());
    let (app, metrics_routes) = routers(state);
    if let Some(metrics) = metrics {
        tracing::info!(addr = %metrics.local_addr()?, "api metrics listening");
        let stop = shutdown.clone().cancelled_owned();
        tokio::spawn(async move {
            if let Err(e) = axum::serve(metrics, metrics_routes).with_graceful_shutdown(stop).await {
                tracing::error!(error = %e, "the metrics listener failed");
            }
        });
    }
    tracing::info!(addr = %listener.local_addr()?, "api listening");
    let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
    // Without TCP_NODELAY an SSE event written after the response head waits for the client's
    // delayed ACK (Nagle): the first streamed `output` arrived 45 ms after the create, not 7.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set on a connection");
        }
    });
    let server = axum::serve(listener, app).with_graceful_shutdown(shutdown.clone().cancelled_owned()).into_future();
    tokio::select! {
        result = server => result.context("server failed")?,
        () = async { shutdown.cancelled().await; tokio::time::sleep(grace).await } => {
            tracing::warn!(?grace, "requests still in flight after the grace period; closing them");
        }
    }
    job_outbox.close();
    background.close();
    if tokio::time::timeout(grace, background.wait()).await.is_err() {
        tracing::warn!("job confirmations still pending after the grace period; the reconciler covers them");
    }
    tracing::info!("api stopped");
    Ok(())
}

/// Connects to MongoDB and NATS and prepares indexes and streams.
pub async fn connect(config: ApiConfig) -> anyhow::Result<AppState> {
    let (store, bus) = common::connect::connect(&config.common, "api").await?;
    let files = Files::open(&store, &config.common.files).await.context("opening the file store")?;
    let readiness = common::connect::readiness(&config.common, "api", &bus).await?;
    Ok(AppState::new(config, store, bus, files, readiness).await?)
}

/// Logs a failed request at ERROR, but a 503: it is the answer of a shed request, a request
/// past its time or an unready service, each counted by `http_requests_total` and logged in
/// summary where it is decided (see [`crate::http::shed`]); a line for each would flood the log
/// just when the service has least time to write it.
fn log_failure(failure: ServerErrorsFailureClass, latency: std::time::Duration, _span: &tracing::Span) {
    if matches!(failure, ServerErrorsFailureClass::StatusCode(StatusCode::SERVICE_UNAVAILABLE)) {
        return;
    }
    tracing::error!(classification = %failure, latency = %format!("{} ms", latency.as_millis()), "response failed");
}

/// The API's routes wrapped in the middleware stack (with `/metrics` when `API_METRICS_BIND`
/// is `public`), and the routes of a metrics listener of its own (`/metrics`, `/health`).
pub fn routers(state: AppState) -> (Router, Router) {
    let request_id = HeaderName::from_static("x-request-id");
    let trace = TraceLayer::new_for_http()
        .make_span_with(|req: &Request| {
            let id = req.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or("");
            let span =
                tracing::info_span!("request", method = %req.method(), path = %req.uri().path(), request_id = %id);
            common::trace_context::continue_trace(&span, common::trace_context::extract_http(req.headers()));
            span
        })
        .on_response(DefaultOnResponse::new().level(Level::INFO))
        .on_failure(log_failure);
    let middleware = ServiceBuilder::new()
        .layer(SetRequestIdLayer::new(request_id.clone(), MakeRandomRequestId))
        .layer(trace)
        .layer(PropagateRequestIdLayer::new(request_id))
        .layer(middleware::from_fn_with_state(BaseUrl(state.base_url().into()), render_problems))
        .layer(middleware::from_fn(rate_limit_headers))
        .layer(CatchPanicLayer::new())
        .layer(TimeoutLayer::with_status_code(StatusCode::SERVICE_UNAVAILABLE, REQUEST_TIMEOUT))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(RequestDeadline(state.config.request_deadline), run_to_completion));
    let metrics = state.metrics.clone();
    let base_url = state.base_url().to_owned();
    let in_flight = crate::http::shed::InFlight::new(state.config.max_in_flight);
    let serve_metrics = {
        let (state, in_flight) = (state.clone(), in_flight.clone());
        get(move || {
            let (state, in_flight) = (state.clone(), in_flight.clone());
            async move {
                let deployments = state.scaling_figures.render(&state.store).await;
                let now = metrics::Now { waits_held: state.wait_slots.held(), in_flight: in_flight.working() };
                metrics::serve(&state.metrics, &state.store, now, &deployments)
            }
        })
    };
    let metrics_routes =
        Router::new().route("/metrics", serve_metrics.clone()).route("/health", get(crate::routes::health::health));
    let public = state.config.metrics == MetricsAt::Public;
    let api = routes::router(state).layer(middleware::from_fn_with_state(in_flight, crate::http::shed::shed));
    let api = if public { api.route("/metrics", serve_metrics) } else { api };
    let api = api
        .route(
            "/openapi.json",
            get(move || std::future::ready(crate::routes::openapi::serve(crate::routes::document(), &base_url))),
        )
        .merge(crate::http::reference::router())
        .layer(middleware::from_fn_with_state(metrics, metrics::track))
        .layer(middleware);
    (api, metrics_routes)
}
