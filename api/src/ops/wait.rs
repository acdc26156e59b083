//! `Prefer: wait` (`wait`, or `wait=N` with N from 1 to 60 seconds; default 60) on create:
//! the response is held until the prediction reaches a terminal status or the time is up.
//!
//! The handler subscribes to the prediction's status-event subject *before* it publishes the
//! job, so even an instant completion cannot be missed; the `completed` event carries the
//! prediction as `GET` shows it, which becomes the response (an event by reference names it,
//! and the response is read from MongoDB). When the time is up, the prediction is
//! read once more and returned as it stands.

use std::time::Duration;

use async_nats::Subscriber;
use common::{domain::WebhookEvent, messages::StatusEvent, views::PredictionView};
use futures::StreamExt;

/// How a prediction that ended within the wait is shown.
pub enum Ended {
    /// As its `completed` event carries it.
    Shown(Box<PredictionView>),
    /// As stored: its event names it by reference (a value kept in the file store, or too
    /// large to carry).
    Stored,
}

/// Which event a status event is, read without the prediction it carries: the events before
/// `completed` (`start`, and a streaming model's every `output` and `logs`) are passed over
/// without building their prediction.
#[derive(serde::Deserialize)]
struct EventOnly {
    event: WebhookEvent,
}

/// The prediction's end, if its `completed` event arrives within `limit`.
pub async fn completion(mut events: Subscriber, limit: Duration) -> Option<Ended> {
    let wait = async {
        while let Some(message) = events.next().await {
            let is_completed =
                serde_json::from_slice::<EventOnly>(&message.payload).is_ok_and(|e| e.event == WebhookEvent::Completed);
            if is_completed
                && let Some(change) = serde_json::from_slice::<StatusEvent>(&message.payload)
                    .ok()
                    .and_then(StatusEvent::prediction_change)
            {
                return Some(change.prediction.map_or(Ended::Stored, |view| Ended::Shown(Box::new(view))));
            }
        }
        None
    };
    tokio::time::timeout(limit, wait).await.ok().flatten()
}
