//! W3C trace context across the services: one trace per prediction, from the create request
//! through the job, the model call and every status event to each webhook attempt.
//!
//! The api's request span continues an incoming `traceparent` (or starts a trace). Whatever
//! is published to JetStream while a span is current carries that span's context in the
//! message's NATS headers ([`inject_nats`], used by [`crate::bus`]); the runner's job span and
//! the notifier's webhook span take their parent from the message they handle
//! ([`extract_nats`]). Outgoing HTTP requests (Cog model servers, webhook receivers) carry
//! `traceparent` too ([`inject_http`]). The propagator is the W3C one, installed by
//! [`crate::telemetry`]; with no exporter configured the spans are still linked (so log lines
//! share trace ids) but nothing leaves the process.

use opentelemetry::{
    Context,
    propagation::{Extractor, Injector},
    trace::TraceContextExt,
};
use tracing_opentelemetry::OpenTelemetrySpanExt;

struct NatsHeaders<'a>(&'a mut async_nats::HeaderMap);

impl Injector for NatsHeaders<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key, value.as_str());
    }
}

struct ReadNatsHeaders<'a>(&'a async_nats::HeaderMap);

impl Extractor for ReadNatsHeaders<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(|v| v.as_str())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(k, _)| k.as_ref()).collect()
    }
}

struct HttpHeaders<'a>(&'a mut http::HeaderMap);

impl Injector for HttpHeaders<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) =
            (http::HeaderName::from_bytes(key.as_bytes()), http::HeaderValue::from_str(&value))
        {
            self.0.insert(name, value);
        }
    }
}

struct ReadHttpHeaders<'a>(&'a http::HeaderMap);

impl Extractor for ReadHttpHeaders<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// The current span's context, written into NATS message headers.
pub fn inject_nats(headers: &mut async_nats::HeaderMap) {
    let cx = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&cx, &mut NatsHeaders(headers)));
}

/// The context a message's headers carry (an empty one when they carry none).
pub fn extract_nats(headers: Option<&async_nats::HeaderMap>) -> Context {
    match headers {
        Some(h) => opentelemetry::global::get_text_map_propagator(|p| p.extract(&ReadNatsHeaders(h))),
        None => Context::new(),
    }
}

/// The current span's context, written into HTTP request headers (`traceparent`).
pub fn inject_http(headers: &mut http::HeaderMap) {
    let cx = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&cx, &mut HttpHeaders(headers)));
}

/// The context an HTTP request's headers carry (an empty one when they carry none).
pub fn extract_http(headers: &http::HeaderMap) -> Context {
    opentelemetry::global::get_text_map_propagator(|p| p.extract(&ReadHttpHeaders(headers)))
}

/// Makes `cx` the parent of `span` when it names a remote span; otherwise `span` starts (or
/// stays in) its own trace.
pub fn continue_trace(span: &tracing::Span, cx: Context) {
    if cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}

/// The trace and span ids of the current span, as hex, when it has valid ones.
pub fn current_ids() -> Option<(String, String)> {
    let cx = tracing::Span::current().context();
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid().then(|| (sc.trace_id().to_string(), sc.span_id().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn propagator() {
        opentelemetry::global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());
    }

    #[test]
    fn a_traceparent_survives_nats_and_http_headers() {
        propagator();
        let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let mut incoming = http::HeaderMap::new();
        incoming.insert("traceparent", http::HeaderValue::from_static(traceparent));
        let cx = extract_http(&incoming);
        assert_eq!(cx.span().span_context().trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");

        let mut nats = async_nats::HeaderMap::new();
        opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&cx, &mut NatsHeaders(&mut nats)));
        assert_eq!(nats.get("traceparent").map(|v| v.as_str()), Some(traceparent));
        let back = extract_nats(Some(&nats));
        assert_eq!(back.span().span_context().span_id().to_string(), "00f067aa0ba902b7");
        assert!(!extract_nats(None).span().span_context().is_valid());
    }
}
