//! Canceling a prediction, shared by the API's cancel route and the console's Cancel button:
//! `starting` or `processing` becomes `canceled` at once.
//!
//! The change is a conditional update on the status just read (so the metrics computed from
//! it are right), followed by the `completed` event and, for a `processing` prediction, the
//! cancel broadcast that makes the runner holding it abort the model call. A `starting` one
//! gives its ticket back to its queue lane, so those behind it move up.

use crate::problem::FieldError;
use bson::doc;
use common::{
    domain::{JobKind, Prediction, PredictionStatus, WebhookEvent},
    messages::{Announcement, PredictionChanged},
};

use crate::{error::ApiError, http::auth::Caller, ops::owned::owned_job, state::AppState};

/// How often cancel re-reads a prediction whose status changed under it.
const CANCEL_ATTEMPTS: usize = 3;

/// Cancels prediction (or training: `kind`) `id` of the caller's account; returns it
/// canceled. 400 when it has ended already, 404 when the account has no such job.
pub async fn cancel(state: &AppState, caller: &Caller, id: &str, kind: JobKind) -> Result<Prediction, ApiError> {
    let predictions = state.store.predictions();
    for _ in 0..CANCEL_ATTEMPTS {
        let current = owned_job(state, caller, id, kind).await?;
        let prediction_id = current.id.clone();
        if current.status.is_terminal() {
            let (title, noun, nouns) = match kind {
                JobKind::Prediction => ("Prediction", "prediction", "predictions"),
                JobKind::Training => ("Training", "training", "trainings"),
            };
            return Err(ApiError::validation(
                format!(
                    "{title} {id} is already {}; only starting or processing {nouns} can be canceled.",
                    current.status
                ),
                vec![FieldError::invalid("status", format!("The {noun} is {}.", current.status))],
            ));
        }
        let now = state.store.clock().now();
        let metrics = current.metrics_at(now);
        let mut changes = doc! { "completed_at": now, "metrics": bson::to_bson(&metrics)? };
        common::usage::mark_pending(&mut changes);
        let Some(canceled) =
            predictions.transition_from(&prediction_id, current.status, PredictionStatus::Canceled, changes).await?
        else {
            continue;
        };
        let canceled = crate::ops::owned::whole(state, canceled).await?;
        tracing::info!(was = %current.status, "prediction canceled");
        state.usage.record(&canceled);
        if current.status == PredictionStatus::Starting {
            state.store.queue_lanes().give_back(&canceled).await;
        }
        if current.status == PredictionStatus::Processing
            && let Err(e) = state.bus.publish_cancel(&prediction_id).await
        {
            tracing::warn!(error = %e, "cancel broadcast failed; the runner notices at its next status check");
        }
        let change = PredictionChanged::of(&canceled, WebhookEvent::Completed, &state.links);
        if let Err(e) = state.bus.publish_event(change, Announcement::First).await {
            tracing::error!(error = %e, "completed event of a canceled prediction not published");
        }
        return Ok(canceled);
    }
    Err(anyhow::anyhow!("prediction {id} kept changing status during cancel").into())
}
