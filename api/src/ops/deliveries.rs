//! Webhook resends, shared by the API's resend route and the console's Resend button.
//!
//! A resend is one more attempt of the same event: the same payload (read back from the
//! events stream, which keeps events 24 h) and the same `webhook-id`, so a receiver that
//! de-duplicates by id sees one event. The notifier makes exactly one attempt, without the
//! retries of the original, and records it with the next attempt number. A `completed` event
//! no longer in the stream is rebuilt from the stored prediction, which no longer changes
//! once ended; any other event older than the stream keeps is answered 409.

use crate::problem::{Problem, ProblemKind};
use common::{domain::WebhookEvent, messages::PredictionChanged};

use crate::{error::ApiError, http::auth::Caller, ops::owned::owned_prediction, state::AppState};

/// Queues one more attempt of delivery `webhook_id` of prediction `id`; returns its event.
pub async fn resend(state: &AppState, caller: &Caller, id: &str, webhook_id: &str) -> Result<WebhookEvent, ApiError> {
    let prediction = owned_prediction(state, caller, id).await?;
    let attempts = super::lists::delivery_attempts(state, &prediction.id).await?;
    let earlier = attempts
        .iter()
        .find(|a| a.webhook_id == webhook_id)
        .ok_or_else(|| ApiError::not_found(format!("No webhook delivery {webhook_id} for prediction {id}.")))?;
    let change = match state.bus.find_event(&prediction.id, earlier.event, earlier.seq).await? {
        Some(change) => change,
        None if earlier.event == WebhookEvent::Completed && prediction.status.is_terminal() => {
            let mut change = PredictionChanged::of(&prediction, WebhookEvent::Completed, &state.links);
            change.seq = earlier.seq;
            change
        }
        None => {
            return Err(ApiError::Problem(Problem::new(
                ProblemKind::Conflict,
                "This event is no longer kept (events are kept 24 hours); only a completed event can be resent after that.",
            )));
        }
    };
    let event = change.event;
    state.bus.publish_resend(change).await?;
    Ok(event)
}
