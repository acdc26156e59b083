//! An OTLP/HTTP endpoint on loopback that accepts every trace export and counts them, so the
//! cost of exporting spans can be measured without a collector: `POST /v1/traces` answers 200
//! with an empty protobuf body (an `ExportTraceServiceResponse` with nothing rejected). Started
//! with `keep`, it also decodes and keeps the spans, for the breakdowns of [`waterfall`].

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use axum::{Router, body::Bytes, extract::State, http::header, response::IntoResponse, routing::post};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// One span as exported.
#[derive(Clone, Debug)]
pub struct SpanRecord {
    /// `service.name` of the exporting process.
    pub service: String,
    /// The span's name.
    pub name: String,
    /// Its trace.
    pub trace_id: Vec<u8>,
    /// Its parent span, empty for a root.
    pub parent_span_id: Vec<u8>,
    /// Start and end, nanoseconds since the epoch.
    pub start: u64,
    /// See `start`.
    pub end: u64,
}

/// What the sink received.
#[derive(Default)]
struct Received {
    exports: AtomicU64,
    bytes: AtomicU64,
    keep: bool,
    spans: Mutex<Vec<SpanRecord>>,
}

/// A running sink.
#[derive(Clone)]
pub struct OtlpSink {
    received: Arc<Received>,
    /// The value for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub endpoint: String,
}

impl OtlpSink {
    /// Serves on a free loopback port until `stop`.
    pub async fn start(stop: CancellationToken) -> anyhow::Result<Self> {
        Self::serve(stop, false).await
    }

    /// The same, keeping every span it receives.
    pub async fn keeping_spans(stop: CancellationToken) -> anyhow::Result<Self> {
        Self::serve(stop, true).await
    }

    async fn serve(stop: CancellationToken, keep: bool) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let received = Arc::new(Received { keep, ..Received::default() });
        let sink = Self { received, endpoint: format!("http://{}", listener.local_addr()?) };
        let app = Router::new().route("/v1/traces", post(accept)).with_state(sink.received.clone());
        tokio::spawn(async move { axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await });
        Ok(sink)
    }

    /// Exports and bytes received so far.
    pub fn received(&self) -> (u64, u64) {
        (self.received.exports.load(Ordering::Relaxed), self.received.bytes.load(Ordering::Relaxed))
    }

    /// The spans kept so far.
    pub fn spans(&self) -> Vec<SpanRecord> {
        self.received.spans.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

async fn accept(State(received): State<Arc<Received>>, body: Bytes) -> impl IntoResponse {
    received.exports.fetch_add(1, Ordering::Relaxed);
    received.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
    if received.keep
        && let Ok(request) = ExportTraceServiceRequest::decode(body.as_ref())
    {
        let mut kept = received.spans.lock().unwrap_or_else(|e| e.into_inner());
        for resource in request.resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|a| a.key == "service.name")
                .and_then(|a| a.value.as_ref())
                .and_then(|v| match &v.value {
                    Some(opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(s)) => Some(s.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            for span in resource.scope_spans.into_iter().flat_map(|s| s.spans) {
                kept.push(SpanRecord {
                    service: service.clone(),
                    name: span.name,
                    trace_id: span.trace_id,
                    parent_span_id: span.parent_span_id,
                    start: span.start_time_unix_nano,
                    end: span.end_time_unix_nano,
                });
            }
        }
    }
    ([(header::CONTENT_TYPE, "application/x-protobuf")], Bytes::new())
}

/// A phase of the traces rooted at a span named `root`: its median start after the root's
/// start and its median length, in microseconds, over the traces that have it.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    /// `service` / span name.
    pub name: String,
    /// Median start, from the root's start.
    pub start_us: f64,
    /// Median length.
    pub length_us: f64,
    /// Traces it appears in.
    pub traces: usize,
}

/// The phases of every trace whose root span is named `root` and that has a span named
/// `containing`, ordered by median start: where the time of one request goes across the
/// services.
pub fn waterfall(spans: &[SpanRecord], root: &str, containing: &str) -> Vec<Phase> {
    let mut traces: HashMap<&[u8], Vec<&SpanRecord>> = HashMap::new();
    for span in spans {
        traces.entry(&span.trace_id).or_default().push(span);
    }
    let mut by_name: HashMap<String, (Vec<f64>, Vec<f64>)> = HashMap::new();
    for trace in traces.values() {
        let Some(top) = trace.iter().find(|s| s.parent_span_id.is_empty() && s.name == root) else { continue };
        if !trace.iter().any(|s| s.name == containing) {
            continue;
        }
        for span in trace {
            let entry = by_name.entry(format!("{} / {}", span.service, span.name)).or_default();
            entry.0.push(span.start.saturating_sub(top.start) as f64 / 1e3);
            entry.1.push(span.end.saturating_sub(span.start) as f64 / 1e3);
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut phases: Vec<Phase> = by_name
        .into_iter()
        .map(|(name, (starts, lengths))| Phase {
            name,
            traces: starts.len(),
            start_us: median(starts),
            length_us: median(lengths),
        })
        .collect();
    phases.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
    phases
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(trace: u8, parent: &[u8], name: &str, start: u64, end: u64) -> SpanRecord {
        SpanRecord {
            service: "s".into(),
            name: name.into(),
            trace_id: vec![trace],
            parent_span_id: parent.to_vec(),
            start,
            end,
        }
    }

    #[test]
    fn a_waterfall_gives_median_offsets_and_lengths_from_each_root() {
        let spans = vec![
            span(1, &[], "request", 1_000, 9_000),
            span(1, &[1], "job", 3_000, 8_000),
            span(2, &[], "request", 50_000, 60_000),
            span(2, &[1], "job", 54_000, 59_000),
            span(3, &[], "other", 0, 1),
            span(4, &[], "request", 0, 1),
        ];
        let phases = waterfall(&spans, "request", "job");
        assert_eq!(phases.len(), 2);
        assert_eq!(phases[0], Phase { name: "s / request".into(), start_us: 0.0, length_us: 10.0, traces: 2 });
        assert_eq!(phases[1].name, "s / job");
        assert_eq!(phases[1].start_us, 4.0, "the larger of the two middle values");
        assert_eq!(phases[1].length_us, 5.0);
    }
}
