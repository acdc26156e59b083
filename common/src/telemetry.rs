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

/// Serves `GET /metrics` (the OpenMetrics text `render` returns, ending in `# EOF`) and
/// `GET /health` on `bind` until `shutdown` fires: how the runner and the notifier, which have
/// no API of their own, are scraped and probed. Returns the bound address.
pub async fn serve_metrics(
    bind: std::net::SocketAddr,
    render: impl Fn() -> String + Clone + Send + Sync + 'static,
    shutdown: tokio_util::sync::CancellationToken,
) -> std::io::Result<std::net::SocketAddr> {
    use axum::{Router, http::header, routing::get};
    let listener = tokio::net::TcpListener::bind(bind).await?;
    let addr = listener.local_addr()?;
    let metrics = move || {
        let render = render.clone();
        async move {
            let text = format!("{}# EOF\n", render());
            ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text)
        }
    };
    let app = Router::new().route("/metrics", get(metrics)).route("/health", get(|| async { "ok" }));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await;
    });
    tracing::info!(%addr, "metrics listening");
    Ok(addr)
}

/// For tests: logs to the test harness's captured output, filtered by `RUST_LOG`.
pub fn init_for_tests() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::registry().with(filter).with(fmt::layer().with_test_writer()).try_init();
}
