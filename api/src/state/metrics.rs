//! Prometheus metrics of the api, served without authentication at `GET /metrics` in the
//! OpenMetrics text format (scrape it from inside the deployment's network):
//!
//! - `http_requests_total{method, route, status}`: requests answered;
//! - `http_request_duration_seconds{method, route, status}`: their latency (histogram);
//! - `api_predictions_created_total{model}`: predictions stored by this replica;
//! - `api_prefer_wait_held`: `Prefer: wait` creates held open now (see [`crate::state::wait_slots`]);
//! - `api_requests_in_flight`: requests worked on now inside the `API_MAX_IN_FLIGHT` bound (see
//!   [`crate::http::shed`]);
//! - `deployment_pending_predictions{deployment}`, `deployment_desired_instances{deployment}`,
//!   `model_pending_predictions{model}`:
//!   what an autoscaler reads (see [`crate::state::scaling`]);
//! - `mongodb_commands_total{command}`, `mongodb_command_duration_seconds{command}`: MongoDB
//!   commands this process sent and how long each took (driver command
//!   monitoring), to see what each request costs the database; only with
//!   `MONGODB_COMMAND_METRICS=true`, as the monitoring costs CPU.
//!
//! `route` is the route template (`/v1/predictions/{id}`), never the raw path, so ids do not
//! multiply the series; requests that match no route count as `unmatched`.

use std::{sync::Arc, time::Instant};

use common::{metrics::ModelLabel, store::Store};

use axum::{
    extract::{MatchedPath, Request, State},
    http::{HeaderValue, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use common::metrics::kit::*;

/// The labels of one request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    route: String,
    status: String,
}

/// The api's metrics.
pub struct HttpMetrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RequestLabels, Histogram>,
    created: Family<ModelLabel, Counter>,
    waits_held: Gauge,
    in_flight: Gauge,
}

impl Default for HttpMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl HttpMetrics {
    /// Empty metrics, registered.
    pub fn new() -> Self {
        let requests = Family::<RequestLabels, Counter>::default();
        let latency: Family<RequestLabels, Histogram> =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.0005, 2.0, 16)));
        let created = Family::<ModelLabel, Counter>::default();
        let waits_held = Gauge::default();
        let in_flight = Gauge::default();
        let mut registry = Registry::default();
        registry.register("http_requests", "HTTP requests answered", requests.clone());
        registry.register("http_request_duration_seconds", "HTTP request latency", latency.clone());
        registry.register("api_predictions_created", "Predictions stored by this replica", created.clone());
        registry.register("api_prefer_wait_held", "Prefer: wait creates held open now", waits_held.clone());
        registry.register(
            "api_requests_in_flight",
            "Requests worked on now inside the in-flight bound",
            in_flight.clone(),
        );
        Self { registry, requests, latency, created, waits_held, in_flight }
    }

    /// A prediction of `model` was stored.
    pub fn created(&self, model: &str) {
        self.created.get_or_create(&ModelLabel::of(model)).inc();
    }

    fn observe(&self, labels: RequestLabels, seconds: f64) {
        self.requests.get_or_create(&labels).inc();
        self.latency.get_or_create(&labels).observe(seconds);
    }

    /// The metrics in the OpenMetrics text format (without the closing `# EOF`).
    pub fn render(&self) -> String {
        common::metrics::families(&self.registry)
    }
}

/// Counts and times every request.
pub async fn track(State(metrics): State<Arc<HttpMetrics>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().to_string();
    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", |p| p.as_str()).to_owned();
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    metrics.observe(RequestLabels { method, route, status }, started.elapsed().as_secs_f64());
    response
}

/// What the api counts now, read as `/metrics` is served.
pub struct Now {
    /// `Prefer: wait` creates held open.
    pub waits_held: usize,
    /// Requests inside the in-flight bound.
    pub in_flight: usize,
}

/// `GET /metrics`, with the gauges read `now` and the autoscalers' figures
/// ([`crate::state::scaling`]).
pub fn serve(metrics: &HttpMetrics, store: &Store, now: Now, deployments: &str) -> Response {
    metrics.waits_held.set(i64::try_from(now.waits_held).unwrap_or(i64::MAX));
    metrics.in_flight.set(i64::try_from(now.in_flight).unwrap_or(i64::MAX));
    let text = common::metrics::page(&[&metrics.render(), deployments, &store.command_counts().openmetrics()]);
    let mut response = text.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observed_requests_appear_by_route_and_status() {
        let m = HttpMetrics::new();
        let labels = RequestLabels { method: "GET".into(), route: "/v1/predictions/{id}".into(), status: "404".into() };
        m.observe(labels.clone(), 0.002);
        m.observe(labels, 0.003);
        let text = m.render();
        assert!(
            text.contains(r#"http_requests_total{method="GET",route="/v1/predictions/{id}",status="404"} 2"#),
            "{text}"
        );
        assert!(text.contains("http_request_duration_seconds_count"), "{text}");
    }

    #[test]
    fn creates_are_counted_by_model() {
        let m = HttpMetrics::new();
        m.created("demo/echo");
        m.waits_held.set(3);
        let text = m.render();
        assert!(text.contains(r#"api_predictions_created_total{model="demo/echo"} 1"#), "{text}");
        assert!(text.contains("api_prefer_wait_held 3"), "{text}");
    }
}
