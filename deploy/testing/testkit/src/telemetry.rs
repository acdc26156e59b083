//! The tests' telemetry: logs to the test harness's captured output, and every span the
//! services end kept in memory, so a test can read the trace a request left.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::{EnvFilter, Layer, fmt, layer::SubscriberExt, util::SubscriberInitExt};

/// For tests: logs to the test harness's captured output, filtered by `RUST_LOG`; spans are
/// kept in memory for [`captured_spans`].
pub fn init_for_tests() {
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SimpleSpanProcessor};
    static EXPORTER: std::sync::OnceLock<InMemorySpanExporter> = std::sync::OnceLock::new();
    let mut first = false;
    let exporter = EXPORTER.get_or_init(|| {
        first = true;
        InMemorySpanExporter::default()
    });
    if !first {
        return;
    }
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let provider = SdkTracerProvider::builder().with_span_processor(SimpleSpanProcessor::new(exporter.clone())).build();
    // Only the services' own spans: the in-memory exporter keeps every span it gets.
    let ours = tracing_subscriber::filter::Targets::new()
        .with_target("api", tracing::Level::TRACE)
        .with_target("runner", tracing::Level::TRACE)
        .with_target("notifier", tracing::Level::TRACE)
        .with_target("common", tracing::Level::TRACE);
    let otel = tracing_opentelemetry::layer().with_tracer(provider.tracer("tests")).with_filter(ours);
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    // The spans are wanted whatever RUST_LOG says; the filter applies to the log output only.
    let logs = fmt::layer().with_test_writer().with_filter(filter);
    let _ = tracing_subscriber::registry().with(otel).with(logs).try_init();
    let _ = CAPTURED.set(exporter.clone());
}

static CAPTURED: std::sync::OnceLock<opentelemetry_sdk::trace::InMemorySpanExporter> = std::sync::OnceLock::new();

/// For tests: every span ended so far in this test process (see [`init_for_tests`]).
pub fn captured_spans() -> Vec<opentelemetry_sdk::trace::SpanData> {
    CAPTURED.get().and_then(|e| e.get_finished_spans().ok()).unwrap_or_default()
}
