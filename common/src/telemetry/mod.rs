//! Telemetry, set up once per process: logs and traces.
//!
//! - **Logs**: `LOG_FORMAT=json` gives one JSON object per line ([`json_log`]: the event's
//!   fields, the fields of the spans it happened in, such as `prediction_id`, and `trace_id`
//!   and `span_id`); the default is readable text. `RUST_LOG` filters (default `info`). Logs go
//!   to stderr, so that a command's own output on stdout (e.g. the key `api admin bootstrap`
//!   prints) stays clean.
//! - **Traces** (OpenTelemetry): every span is also an OpenTelemetry span, linked across the
//!   services by [`crate::trace_context`]. They are exported over OTLP/HTTP (protobuf) only when
//!   `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set and
//!   `OTEL_SDK_DISABLED` is not `true`; the standard `OTEL_*` variables apply (endpoint,
//!   headers, timeout, `OTEL_TRACES_SAMPLER`, `OTEL_SERVICE_NAME`, which defaults to the
//!   binary's name). Without an endpoint the OpenTelemetry layer is not installed at all, so
//!   tracing costs nothing: log lines then carry no trace ids, and no `traceparent` goes out
//!   (an incoming one is not continued).
//! - [`serve_operations`]: `/metrics`, `/health` and `/ready` of the runner and the notifier.

pub mod json_log;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::{Resource, propagation::TraceContextPropagator, trace::SdkTracerProvider};
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// Keeps the trace exporter running; flushes what it holds when dropped (at the end of `main`).
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(Err(e)) = self.provider.take().map(|p| p.shutdown()) {
            eprintln!("traces not flushed: {e}");
        }
    }
}

/// Whether the environment asks for an OTLP exporter.
fn export_requested() -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// The tracer provider of `service`, with a batching OTLP exporter, when export is asked for
/// and the exporter can be built.
fn tracer_provider(service: &'static str) -> Option<SdkTracerProvider> {
    if !export_requested() {
        return None;
    }
    let name = std::env::var("OTEL_SERVICE_NAME").ok().filter(|n| !n.is_empty()).unwrap_or_else(|| service.to_owned());
    let builder = SdkTracerProvider::builder().with_resource(Resource::builder().with_service_name(name).build());
    match opentelemetry_otlp::SpanExporter::builder().with_http().build() {
        Ok(exporter) => Some(builder.with_batch_exporter(exporter).build()),
        Err(e) => {
            eprintln!("OTLP trace exporter not started ({e}); spans are not exported");
            None
        }
    }
}

/// Installs the global subscriber and the W3C propagator; keep the returned guard until the
/// process ends. Calling it again (tests) installs nothing more.
pub fn init(service: &'static str) -> Telemetry {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let provider = tracer_provider(service);
    let otel = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer(service))
            .with_location(false)
            .with_threads(false)
            .with_target(false)
    });
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"));
    let registry = tracing_subscriber::registry().with(filter).with(otel);
    let installed = if json {
        let format = json_log::JsonLog::default();
        let layer = fmt::layer().fmt_fields(fmt::format::JsonFields::new()).event_format(format.clone());
        let dispatch = tracing::Dispatch::new(registry.with(layer.with_writer(std::io::stderr)));
        format.attach(&dispatch);
        tracing::dispatcher::set_global_default(dispatch).is_ok()
    } else {
        registry.with(fmt::layer().with_target(false).with_writer(std::io::stderr)).try_init().is_ok()
    };
    if installed {
        tracing::info!(service, version = crate::VERSION, traces_exported = provider.is_some(), "starting");
    }
    Telemetry { provider }
}

/// Serves the operations endpoints of a service without an API of its own (the runner and
/// the notifier) on `bind` until `shutdown` fires: `GET /metrics` (the OpenMetrics text
/// `render` returns, ending in `# EOF`), `GET /health` (the process serves) and `GET /ready`
/// (MongoDB and NATS answer: 200, else 503 with what failed; see [`crate::readiness`]).
/// Returns the bound address.
pub async fn serve_operations(
    bind: std::net::SocketAddr,
    render: impl Fn() -> String + Clone + Send + Sync + 'static,
    readiness: crate::readiness::Readiness,
    shutdown: tokio_util::sync::CancellationToken,
) -> std::io::Result<std::net::SocketAddr> {
    use axum::{Json, Router, http::StatusCode, http::header, routing::get};
    let listener = tokio::net::TcpListener::bind(bind).await?;
    let addr = listener.local_addr()?;
    let metrics = move || {
        let render = render.clone();
        async move {
            let text = crate::metrics::page(&[&render()]);
            ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text)
        }
    };
    let ready = move || {
        let readiness = readiness.clone();
        async move {
            match readiness.now() {
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
