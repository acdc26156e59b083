//! `GET /v1/predictions/{id}/stream` (and on `/replicate/v1`): Server-Sent Events as the
//! prediction runs, in the shape Replicate's clients read (docs/replicate.md):
//!
//! - `output` and `logs` carry what was added since the previous event (the whole text when it
//!   was replaced). An output that is an array (an iterator's items, on `/replicate/v1`) sends
//!   its new items: text items joined, one link as it is, several links or other items as the
//!   compact JSON array of the new ones; any other value its compact JSON text when it
//!   changed. A failed prediction ends with `error` (`{"detail": message}`); every stream
//!   ends with `done`: `{}` after success, `{"reason":"canceled"}`, or `{"reason":"error"}`.
//!   Nothing else is sent: replicate-python raises on any other event name.
//! - Every event has an `id:` that grows per prediction: `4 × seq + k`, where `seq` is the
//!   prediction's change sequence and `k` orders the kinds (output 0, logs 1, error 2, done 3).
//!   The same changes always give the same ids, so a client that reconnects with
//!   `Last-Event-ID` is sent only what came after it, on any replica.
//! - Keep-alives are comment lines every [`KEEP_ALIVE`].
//!
//! Access: the `token` query parameter of `urls.stream` (a capability bound to the prediction,
//! see [`common::links`]) opens the stream without `Authorization`, as a browser's
//! `EventSource` needs; a token that does not open this prediction is 401. Without a token the
//! caller's key must hold `read`, as on every other route.
//!
//! The events are the prediction's, read back from its first (`Bus::prediction_events`, the
//! reader a webhook resend uses too): a client that connects late still receives everything,
//! then follows live. A prediction that has ended is answered from MongoDB
//! directly (its events may have aged out of the stream), unless the client resumes and the
//! stream still holds its events, which are then replayed so the ids line up.

use std::{convert::Infallible, time::Duration};

use crate::problem::{Problem, ProblemKind};
use async_nats::jetstream::stream::LastRawMessageErrorKind;
use axum::{
    extract::{FromRequestParts, Path, RawQuery, State},
    http::{HeaderMap, request::Parts},
    response::sse::{Event, KeepAlive, Sse},
};
use common::{
    domain::{Prediction, PredictionId, WebhookEvent},
    messages::PredictionChanged,
    views::{PredictionView, StatusView},
};
use futures::{Stream, StreamExt, stream};
use serde_json::json;

use super::predictions::owned_prediction;
use crate::{
    error::ApiError,
    http::auth::{Authorized, Read},
    http::surface::Surface,
    routes::openapi::problems,
    state::AppState,
};

/// How often a comment line keeps an idle stream open (replicate-python reads with a 30 s
/// timeout).
pub const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// The order of event kinds within one change: the last part of an event id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Output = 0,
    Logs = 1,
    Error = 2,
    Done = 3,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::Output => "output",
            Self::Logs => "logs",
            Self::Error => "error",
            Self::Done => "done",
        }
    }
}

/// One Server-Sent Event of the stream.
// What the stream sends, before it is encoded, and its OpenAPI description at once.
#[derive(Debug, Clone, PartialEq, Eq, utoipa::ToSchema)]
pub struct StreamEvent {
    /// Grows with every event of the prediction (`4 × seq + kind`); send it back as
    /// `Last-Event-ID` to resume after it.
    #[schema(value_type = String)]
    id: u64,
    /// `output` and `logs` carry the text added; `error` `{"detail": message}`; `done` `{}`,
    /// `{"reason":"canceled"}` or `{"reason":"error"}`.
    #[schema(value_type = String, pattern = "^(output|logs|error|done)$")]
    event: Kind,
    /// The event's data.
    data: String,
}

impl StreamEvent {
    fn encoded(&self) -> Event {
        Event::default().id(self.id.to_string()).event(self.event.name()).data(&self.data)
    }
}

/// What a client has been sent so far.
#[derive(Default)]
struct Sent {
    output: Option<serde_json::Value>,
    logs: String,
    seq: i64,
}

/// The data of the `output` event that brings a client from `before` to `now`, if any.
fn output_added(before: Option<&serde_json::Value>, now: &serde_json::Value) -> Option<String> {
    use serde_json::Value;
    if before == Some(now) {
        return None;
    }
    match (before, now) {
        (Some(Value::String(before)), Value::String(now)) => Some(added(before, now).to_owned()),
        (_, Value::String(now)) => Some(now.clone()),
        (before, Value::Array(items)) => {
            let known = match before {
                Some(Value::Array(sent)) if items.starts_with(sent) => sent.len(),
                _ => 0,
            };
            let new = &items[known..];
            let texts: Option<Vec<&str>> = new.iter().map(Value::as_str).collect();
            Some(match texts {
                Some(texts) if texts.len() == 1 => texts[0].to_owned(),
                Some(texts) if !texts.iter().any(|t| t.starts_with("http://") || t.starts_with("https://")) => {
                    texts.concat()
                }
                _ => Value::Array(new.to_vec()).to_string(),
            })
        }
        (_, other) => Some(other.to_string()),
    }
}

/// The text added to `before` to make `now` (all of `now` if it was replaced).
fn added<'a>(before: &str, now: &'a str) -> &'a str {
    now.strip_prefix(before).unwrap_or(now)
}

impl Sent {
    /// The steps that bring the client up to `view`, the prediction at change `seq`; a
    /// `completed` change also ends the stream. A change older than one already sent (events
    /// of one prediction can be published out of order) is skipped, so ids only grow.
    fn catch_up(&mut self, view: &PredictionView, seq: i64, completed: bool) -> Vec<StreamEvent> {
        if seq < self.seq && !completed {
            return Vec::new();
        }
        self.seq = self.seq.max(seq);
        let base = u64::try_from(self.seq).unwrap_or(0) * 4;
        let step = |kind: Kind, data: String| StreamEvent { id: base + kind as u64, event: kind, data };
        let mut steps = Vec::new();
        if let Some(output) = &view.output
            && let Some(data) = output_added(self.output.as_ref(), output)
        {
            steps.push(step(Kind::Output, data));
            self.output = Some(output.clone());
        }
        if view.logs != self.logs {
            steps.push(step(Kind::Logs, added(&self.logs, &view.logs).to_owned()));
            self.logs = view.logs.clone();
        }
        if completed {
            let reason = match view.status {
                StatusView::Failed => {
                    let detail = view.error.as_ref().map_or("The prediction failed.", |e| e.message());
                    steps.push(step(Kind::Error, json!({ "detail": detail }).to_string()));
                    json!({"reason": "error"})
                }
                StatusView::Canceled | StatusView::Aborted => json!({"reason": "canceled"}),
                _ => json!({}),
            };
            steps.push(step(Kind::Done, reason.to_string()));
        }
        steps
    }
}

/// The `Last-Event-ID` a reconnecting client sends, if it is one of ours.
fn last_event_id(headers: &HeaderMap) -> Option<u64> {
    headers.get("last-event-id")?.to_str().ok()?.trim().parse().ok()
}

/// The `token` query parameter, if any.
fn token(query: Option<&str>) -> Option<String> {
    url::form_urlencoded::parse(query?.as_bytes()).find(|(k, _)| k == "token").map(|(_, v)| v.into_owned())
}

/// `GET /v1/predictions/{id}/stream`
#[utoipa::path(
    get,
    path = "/predictions/{id}/stream",
    operation_id = "streamPrediction",
    tag = "predictions",
    params(
        ("id" = String, Path, description = "The prediction id"),
        ("token" = Option<String>, Query, description = "The capability token of `urls.stream`; opens the stream without `Authorization`"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event id"),
    ),
    responses((status = 200, description = "Server-Sent Events `output`, `logs`, `error`, then `done`; each with an `id`", content_type = "text/event-stream", body = StreamEvent), (status = 404, response = inline(problems::NotFound))),
    security((), ("bearer" = []))
)]
pub async fn stream(
    State(state): State<AppState>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    mut parts: Parts,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let prediction = match token(query.as_deref()) {
        Some(token) => opened_by_token(&state, &id, &token).await?,
        None => {
            let auth = Authorized::<Read>::from_request_parts(&mut parts, &state).await?;
            owned_prediction(&state, &auth.caller, &id).await?
        }
    };
    let Surface(surface) = Surface::from_request_parts(&mut parts, &state).await.unwrap_or_else(|e| match e {});
    let after = last_event_id(&parts.headers);

    let from_record = prediction.status.is_terminal() && (after.is_none() || !has_events(&state, &prediction.id).await);
    let steps: stream::BoxStream<'static, StreamEvent> = if from_record {
        let view = prediction.view(&state.links, surface);
        stream::iter(Sent::default().catch_up(&view, prediction.seq, true)).boxed()
    } else {
        live(&state, &prediction).await?
    };
    let events = steps.filter(move |s| std::future::ready(after.is_none_or(|a| s.id > a))).map(|s| Ok(s.encoded()));
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
}

/// The prediction whose stream `token` opens; 401 for a token that does not open `id`.
async fn opened_by_token(state: &AppState, id: &str, token: &str) -> Result<Prediction, ApiError> {
    let missing = || ApiError::not_found(format!("Prediction {id} not found."));
    let prediction_id = PredictionId::parse(id).map_err(|_| missing())?;
    if !state.links.stream_token_opens(&prediction_id, token) {
        return Err(ApiError::Problem(Problem::new(
            ProblemKind::Unauthorized,
            "This stream token does not open this prediction; use its urls.stream, or send an API key.",
        )));
    }
    crate::ops::owned::by_id(state, &prediction_id).await?.ok_or_else(missing)
}

/// Whether the events stream still holds the prediction's events.
async fn has_events(state: &AppState, id: &PredictionId) -> bool {
    let subjects = state.bus.subjects();
    let Ok(events) = state.bus.jetstream().get_stream_no_info(subjects.events_stream()).await else { return false };
    match events.get_last_raw_message_by_subject(&subjects.events(id)).await {
        Ok(_) => true,
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => false,
        Err(e) => {
            tracing::warn!(error = %e, "events stream not readable; answering from the stored prediction");
            false
        }
    }
}

/// The prediction's steps from its first status event, following live until `completed`.
async fn live(state: &AppState, prediction: &Prediction) -> Result<stream::BoxStream<'static, StreamEvent>, ApiError> {
    let events = state.bus.prediction_events(&prediction.id).await?;
    let changes = events.filter_map(|read| async move { read.ok()?.change });
    let state = state.clone();
    // Ends right after the `completed` step, without waiting for another event.
    let steps = stream::unfold((changes.boxed(), Sent::default(), false), move |(mut changes, mut sent, finished)| {
        let state = state.clone();
        async move {
            if finished {
                return None;
            }
            let change: PredictionChanged = changes.next().await?;
            let completed = change.event == WebhookEvent::Completed;
            let (view, seq) = match change.prediction {
                Some(view) => (view, change.seq),
                None => stored_view(&state, &change.prediction_id).await?,
            };
            let steps = sent.catch_up(&view, seq, completed);
            Some((stream::iter(steps), (changes, sent, completed)))
        }
    });
    Ok(steps.flatten().boxed())
}

/// The stored prediction and its change sequence, for an event by reference (it may be newer
/// than the event; [`Sent::catch_up`] takes it as the state at its own `seq`), as
/// [`crate::ops::owned::with_output`] reads it: a stream does not show the input.
async fn stored_view(state: &AppState, id: &PredictionId) -> Option<(PredictionView, i64)> {
    match crate::ops::owned::with_output(state, id).await {
        Ok(Some(p)) => Some((p.view(&state.links, p.surface), p.seq)),
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(
                error = format!("{e:#}"),
                "prediction not readable for an event by reference; the stream ends"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::{
        crypto::MasterKey,
        domain::{ApiSurface, PredictionError, PredictionStatus},
        links::Links,
        samples::starting_prediction,
    };

    fn view(p: &Prediction) -> PredictionView {
        let links = Links::new("http://h", MasterKey::from_base64(&MasterKey::generate_base64()).expect("key"));
        p.view(&links, ApiSurface::Replicate)
    }

    fn running() -> Prediction {
        let mut p =
            starting_prediction(common::domain::AccountId::generate(), "demo/echo".parse().expect("model"), json!({}));
        p.status = PredictionStatus::Processing;
        p
    }

    #[test]
    fn only_the_added_text_is_sent_unless_it_was_replaced() {
        assert_eq!(added("hello", "hello world"), " world");
        assert_eq!(added("", "abc"), "abc");
        assert_eq!(added("abc", "xyz"), "xyz");
    }

    #[test]
    fn an_iterators_events_carry_its_new_items() {
        let a = json!(["Hel"]);
        let b = json!(["Hel", "lo", " world"]);
        assert_eq!(output_added(None, &a).as_deref(), Some("Hel"));
        assert_eq!(output_added(Some(&a), &b).as_deref(), Some("lo world"));
        assert_eq!(output_added(Some(&b), &b), None);
        let files = json!(["http://h/f/1/download", "http://h/f/2/download"]);
        assert_eq!(output_added(None, &files).as_deref(), Some(r#"["http://h/f/1/download","http://h/f/2/download"]"#));
        let one = json!(["http://h/f/1/download"]);
        assert_eq!(output_added(Some(&one), &files).as_deref(), Some("http://h/f/2/download"));
        assert_eq!(output_added(None, &json!({"x": 1})).as_deref(), Some(r#"{"x":1}"#));
    }

    #[test]
    fn ids_grow_with_the_change_and_order_the_kinds_within_it() {
        let mut sent = Sent::default();
        let mut p = running();
        p.output = Some("a".into());
        p.logs = "l1\n".into();
        let first = sent.catch_up(&view(&p), 2, false);
        assert_eq!(first.iter().map(|s| (s.id, s.event)).collect::<Vec<_>>(), vec![(8, Kind::Output), (9, Kind::Logs)]);
        p.output = Some("ab".into());
        p.status = PredictionStatus::Succeeded;
        let last = sent.catch_up(&view(&p), 3, true);
        assert_eq!(
            last,
            vec![
                StreamEvent { id: 12, event: Kind::Output, data: "b".into() },
                StreamEvent { id: 15, event: Kind::Done, data: "{}".into() },
            ]
        );
    }

    #[test]
    fn a_stale_change_sends_nothing() {
        let mut sent = Sent::default();
        let mut p = running();
        p.output = Some("new".into());
        sent.catch_up(&view(&p), 5, false);
        p.output = Some("old".into());
        assert!(sent.catch_up(&view(&p), 4, false).is_empty());
    }

    #[test]
    fn a_failure_ends_with_error_then_done_and_a_cancel_with_its_reason() {
        let mut p = running();
        p.status = PredictionStatus::Failed;
        p.error = Some(PredictionError { code: "MODEL_ERROR".into(), message: "boom".into() });
        let steps = Sent::default().catch_up(&view(&p), 1, true);
        let named: Vec<_> = steps.iter().map(|s| (s.event.name(), s.data.as_str())).collect();
        assert_eq!(named, vec![("error", r#"{"detail":"boom"}"#), ("done", r#"{"reason":"error"}"#)]);
        p.status = PredictionStatus::Canceled;
        p.error = None;
        let steps = Sent::default().catch_up(&view(&p), 1, true);
        assert_eq!(steps.last().map(|s| s.data.as_str()), Some(r#"{"reason":"canceled"}"#));
    }

    #[test]
    fn the_last_event_id_and_the_token_are_read_from_the_request() {
        let mut headers = HeaderMap::new();
        assert_eq!(last_event_id(&headers), None);
        headers.insert("last-event-id", "17".parse().expect("header"));
        assert_eq!(last_event_id(&headers), Some(17));
        assert_eq!(token(Some("a=1&token=abc_-")), Some("abc_-".into()));
        assert_eq!(token(Some("a=1")), None);
        assert_eq!(token(None), None);
    }
}
