//! An OTLP/HTTP endpoint on loopback that accepts every trace export and counts them, so the
//! cost of exporting spans can be measured without a collector: `POST /v1/traces` answers 200
//! with an empty protobuf body (an `ExportTraceServiceResponse` with nothing rejected).

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use axum::{Router, body::Bytes, extract::State, http::header, response::IntoResponse, routing::post};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// What the sink received.
#[derive(Default)]
struct Received {
    exports: AtomicU64,
    bytes: AtomicU64,
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
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let sink = Self { received: Arc::default(), endpoint: format!("http://{}", listener.local_addr()?) };
        let app = Router::new().route("/v1/traces", post(accept)).with_state(sink.received.clone());
        tokio::spawn(async move { axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await });
        Ok(sink)
    }

    /// Exports and bytes received so far.
    pub fn received(&self) -> (u64, u64) {
        (self.received.exports.load(Ordering::Relaxed), self.received.bytes.load(Ordering::Relaxed))
    }
}

async fn accept(State(received): State<Arc<Received>>, body: Bytes) -> impl IntoResponse {
    received.exports.fetch_add(1, Ordering::Relaxed);
    received.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
    ([(header::CONTENT_TYPE, "application/x-protobuf")], Bytes::new())
}
