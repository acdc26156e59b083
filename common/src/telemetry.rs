//! Logging, set up once per process. `LOG_FORMAT=json` gives one JSON object per line for
//! production; the default is readable text. `RUST_LOG` filters (default `info`). Logs go to
//! stderr, so that a command's own output on stdout (e.g. the key `api admin bootstrap` prints)
//! stays clean.

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// Installs the global subscriber. Calling it again (tests) is harmless.
pub fn init(service: &'static str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"));
    let registry = tracing_subscriber::registry().with(filter);
    let installed = if json {
        registry.with(fmt::layer().json().with_current_span(true).with_writer(std::io::stderr)).try_init()
    } else {
        registry.with(fmt::layer().with_target(false).with_writer(std::io::stderr)).try_init()
    };
    if installed.is_ok() {
        tracing::info!(service, version = crate::VERSION, "starting");
    }
}

/// Serves the operations endpoints of a service without an API of its own (the runner and
/// the notifier) on `bind` until `shutdown` fires: `GET /metrics` (the OpenMetrics text
/// `render` returns, ending in `# EOF`), `GET /health` (the process serves) and `GET /ready`
/// (MongoDB and NATS answer: 200, else 503 with what failed; see [`crate::readiness`]).
/// Returns the bound address.
pub async fn serve_operations(
    bind: std::net::SocketAddr,
    render: impl Fn() -> String + Clone + Send + Sync + 'static,
    store: crate::store::Store,
    bus: crate::bus::Bus,
    shutdown: tokio_util::sync::CancellationToken,
) -> std::io::Result<std::net::SocketAddr> {
    use axum::{Json, Router, http::StatusCode, http::header, routing::get};
    let listener = tokio::net::TcpListener::bind(bind).await?;
    let addr = listener.local_addr()?;
    let metrics = move || {
        let render = render.clone();
        async move {
            let text = format!("{}# EOF\n", render());
            ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text)
        }
    };
    let ready = move || {
        let (store, bus) = (store.clone(), bus.clone());
        async move {
            match crate::readiness::check(&store, &bus).await {
                Ok(()) => (StatusCode::OK, Json(serde_json::json!({"status": "ready", "version": crate::VERSION}))),
                Err(not_ready) => {
                    tracing::warn!(mongodb = ?not_ready.mongodb, nats = ?not_ready.nats, "not ready");
                    let body = serde_json::json!({"status": "not_ready", "mongodb": not_ready.mongodb, "nats": not_ready.nats});
                    (StatusCode::SERVICE_UNAVAILABLE, Json(body))
                }
            }
        }
    };
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/health", get(|| async { "ok" }))
        .route("/ready", get(ready));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await;
    });
    tracing::info!(%addr, "metrics, health and readiness listening");
    Ok(addr)
}

/// For tests: logs to the test harness's captured output, filtered by `RUST_LOG`.
pub fn init_for_tests() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::registry().with(filter).with(fmt::layer().with_test_writer()).try_init();
}
