//! `GET /v1/predictions/{id}/stream` (scope `read`): Server-Sent Events as the prediction
//! runs: `output` and `logs` carry what was added since the previous event (the whole text
//! when it was replaced), `done` ends the stream with `{"status": ...}`.
//!
//! The events come from the status-event stream through an ordered consumer filtered to this
//! prediction, delivering from its first event: a client that connects late still receives
//! everything, then follows live. A prediction that has already ended is answered from
//! MongoDB directly (its events may have aged out of the stream).

use std::convert::Infallible;

use async_nats::jetstream::consumer::{DeliverPolicy, pull::OrderedConfig};
use axum::{
    extract::{Path, State},
    response::sse::{Event, KeepAlive, Sse},
};
use common::{
    domain::{PredictionView, WebhookEvent},
    messages::StatusEvent,
};
use futures::{Stream, StreamExt, stream};
use serde_json::json;

use super::predictions::owned_prediction;
use crate::{
    auth::{Authorized, Read},
    error::ApiError,
    state::AppState,
};

/// What a client has been sent so far.
#[derive(Default)]
struct Sent {
    output: String,
    logs: String,
}

/// The text added to `before` to make `now` (all of `now` if it was replaced).
fn added<'a>(before: &str, now: &'a str) -> &'a str {
    now.strip_prefix(before).unwrap_or(now)
}

impl Sent {
    /// The events that bring the client up to `view`.
    fn catch_up(&mut self, view: &PredictionView, completed: bool) -> Vec<Event> {
        let mut events = Vec::new();
        let output = view.output.as_deref().unwrap_or("");
        if output != self.output {
            events.push(Event::default().event("output").data(added(&self.output, output)));
            self.output = output.to_owned();
        }
        if view.logs != self.logs {
            events.push(Event::default().event("logs").data(added(&self.logs, &view.logs)));
            self.logs = view.logs.clone();
        }
        if completed {
            events.push(Event::default().event("done").data(json!({"status": view.status}).to_string()));
        }
        events
    }
}

/// `GET /v1/predictions/{id}/stream`
#[utoipa::path(
    get,
    path = "/v1/predictions/{id}/stream",
    operation_id = "streamPrediction",
    tag = "predictions",
    params(("id" = String, Path, description = "The prediction id")),
    responses((status = 200, description = "Server-Sent Events `output`, `logs`, then `done`", content_type = "text/event-stream", body = String)),
    security(("bearer" = []))
)]
pub async fn stream(
    State(state): State<AppState>,
    auth: Authorized<Read>,
    Path(id): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let prediction = owned_prediction(&state, &auth.caller, &id).await?;

    let events: stream::BoxStream<'static, Event> = if prediction.status.is_terminal() {
        let done = Sent::default().catch_up(&prediction.view(state.base_url()), true);
        stream::iter(done).boxed()
    } else {
        let subjects = state.bus.subjects();
        let consumer = state
            .bus
            .jetstream()
            .get_stream_no_info(subjects.events_stream())
            .await?
            .create_consumer(OrderedConfig {
                filter_subject: subjects.events(&prediction.id),
                deliver_policy: DeliverPolicy::All,
                ..Default::default()
            })
            .await?;
        let messages = consumer.messages().await?;
        let changes = messages.filter_map(|m| async move {
            let message = m.ok()?;
            match serde_json::from_slice::<StatusEvent>(&message.payload).ok()? {
                StatusEvent::PredictionChangedV1(change) => Some(change),
            }
        });
        // Ends right after the `completed` step, without waiting for another event.
        stream::unfold((changes.boxed(), Sent::default(), false), |(mut changes, mut sent, finished)| async move {
            if finished {
                return None;
            }
            let change = changes.next().await?;
            let completed = change.event == WebhookEvent::Completed;
            let events = sent.catch_up(&change.prediction, completed);
            Some((stream::iter(events), (changes, sent, completed)))
        })
        .flatten()
        .boxed()
    };
    Ok(Sse::new(events.map(Ok)).keep_alive(KeepAlive::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_added_text_is_sent_unless_it_was_replaced() {
        assert_eq!(added("hello", "hello world"), " world");
        assert_eq!(added("", "abc"), "abc");
        assert_eq!(added("abc", "xyz"), "xyz");
    }
}
