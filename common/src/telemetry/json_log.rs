//! The JSON log line (`LOG_FORMAT=json`): one object per event with `timestamp`, `level`,
//! `target`, `message` and the event's other fields; the fields of every span the event
//! happened in (innermost wins), so `prediction_id` appears on every line of a job or a
//! webhook; `span`, the innermost span's name; and `trace_id` and `span_id` of the current
//! span, the same ids its OpenTelemetry span carries, so logs and traces join.

use std::{
    fmt,
    sync::{Arc, OnceLock},
};

use opentelemetry::trace::TraceContextExt;
use serde_json::{Map, Value};
use tracing::{Dispatch, Event, Subscriber, dispatcher::WeakDispatch, field::Field};
use tracing_subscriber::{
    fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields, format::Writer},
    registry::LookupSpan,
};

/// The JSON event format; use it with `JsonFields` as the field formatter, so each span's
/// fields are stored as a JSON object. The trace ids are read from the OpenTelemetry layer of
/// the dispatcher it is [`attach`](JsonLog::attach)ed to (no current dispatcher can be asked
/// while an event is being written).
#[derive(Clone, Default)]
pub struct JsonLog {
    dispatch: Arc<OnceLock<WeakDispatch>>,
}

impl JsonLog {
    /// Reads trace ids through `dispatch`, the dispatcher this format's layer is part of.
    pub fn attach(&self, dispatch: &Dispatch) {
        let _ = self.dispatch.set(dispatch.downgrade());
    }

    /// The trace and span ids of the span `id`, as hex, when it has valid ones.
    fn ids_of(&self, id: &tracing::span::Id) -> Option<(String, String)> {
        let dispatch = self.dispatch.get()?.upgrade()?;
        let cx = tracing_opentelemetry::get_otel_context(id, &dispatch)?;
        let span = cx.span();
        let sc = span.span_context();
        sc.is_valid().then(|| (sc.trace_id().to_string(), sc.span_id().to_string()))
    }
}

/// Collects an event's fields into a JSON object.
struct Fields<'a>(&'a mut Map<String, Value>);

impl tracing::field::Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), Value::from(format!("{value:?}")));
    }
}

impl<S, N> FormatEvent<S, N> for JsonLog
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let mut line = Map::new();
        line.insert(
            "timestamp".into(),
            Value::from(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
        );
        line.insert("level".into(), Value::from(event.metadata().level().as_str()));
        line.insert("target".into(), Value::from(event.metadata().target()));
        if let Some((trace_id, span_id)) = ctx.lookup_current().and_then(|span| self.ids_of(&span.id())) {
            line.insert("trace_id".into(), Value::from(trace_id));
            line.insert("span_id".into(), Value::from(span_id));
        }
        if let Some(scope) = ctx.event_scope() {
            let mut innermost = None;
            for span in scope.from_root() {
                innermost = Some(span.name());
                let extensions = span.extensions();
                let stored = extensions.get::<FormattedFields<N>>().map(|f| f.fields.as_str()).unwrap_or_default();
                if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(stored) {
                    line.extend(fields);
                }
            }
            if let Some(name) = innermost {
                line.insert("span".into(), Value::from(name));
            }
        }
        event.record(&mut Fields(&mut line));
        writeln!(writer, "{}", Value::Object(line))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::{fmt::MakeWriter, prelude::*};

    use super::*;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    #[test]
    fn a_line_carries_the_spans_fields_and_the_trace_ids() {
        let captured = Captured::default();
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let format = JsonLog::default();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")))
            .with(
                tracing_subscriber::fmt::layer()
                    .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
                    .event_format(format.clone())
                    .with_writer(captured.clone()),
            );
        let dispatch = Dispatch::new(subscriber);
        format.attach(&dispatch);
        tracing::dispatcher::with_default(&dispatch, || {
            let span = tracing::info_span!("job", prediction_id = "p_123", model = "demo/echo");
            let _entered = span.enter();
            tracing::info!(attempt = 2, "webhook delivered");
        });
        let text = String::from_utf8(captured.0.lock().expect("lock").clone()).expect("utf-8");
        let line: Value = serde_json::from_str(text.trim()).expect("one JSON object");
        assert_eq!(line["message"], "webhook delivered");
        assert_eq!(line["attempt"], 2);
        assert_eq!(line["prediction_id"], "p_123");
        assert_eq!(line["span"], "job");
        assert_eq!(line["level"], "INFO");
        assert_eq!(line["trace_id"].as_str().map(str::len), Some(32), "{line}");
        assert_eq!(line["span_id"].as_str().map(str::len), Some(16), "{line}");
    }
}
