//! A prediction's webhook deliveries: every attempt the notifiers recorded (scope `read`), and
//! a resend of one delivery (scope `write`).
//!
//! A resend is one more attempt of the same event, with the same payload and `webhook-id`
//! (see [`crate::ops::deliveries`]).

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
};
use chrono::Utc;
use common::{
    domain::WebhookEvent,
    store::webhook_attempts::{AttemptOutcome, WebhookAttempt},
};
use serde::Serialize;

use crate::{
    error::ApiError,
    http::auth::{Authorized, Read, Write},
    ops::owned::owned_prediction,
    ops::{self, deliveries},
    routes::openapi::problems,
    state::AppState,
};

/// One recorded attempt.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeliveryAttemptView {
    /// The delivery's `webhook-id`: the same on every attempt of one event.
    pub webhook_id: String,
    /// The event delivered.
    #[schema(value_type = String, example = "completed")]
    pub event: WebhookEvent,
    /// 1 for the first attempt of the event.
    pub attempt: u32,
    /// Where it was sent.
    pub url: String,
    /// The receiver's HTTP status, `null` if it did not answer.
    pub status_code: Option<u16>,
    /// Milliseconds from sending to the answer (or the failure).
    pub latency_ms: u64,
    /// What went wrong, `null` if nothing did.
    pub error: Option<String>,
    /// `delivered`, `will_retry`, `failed` or `refused`.
    #[schema(value_type = String, example = "delivered")]
    pub outcome: AttemptOutcome,
    /// When the attempt was made.
    pub created_at: chrono::DateTime<Utc>,
}

impl DeliveryAttemptView {
    /// The view of a stored attempt.
    pub fn of(a: &WebhookAttempt) -> Self {
        Self {
            webhook_id: a.webhook_id.clone(),
            event: a.event,
            attempt: a.attempt,
            url: a.url.clone(),
            status_code: a.status_code,
            latency_ms: a.latency_ms,
            error: a.error.clone(),
            outcome: a.outcome,
            created_at: a.at.to_chrono(),
        }
    }
}

/// Every attempt, oldest first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeliveryAttempts {
    /// The attempts.
    pub results: Vec<DeliveryAttemptView>,
}

/// `GET /v1/predictions/{id}/webhook-deliveries`
#[utoipa::path(
    get,
    path = "/predictions/{id}/webhook-deliveries",
    operation_id = "listWebhookDeliveries",
    tag = "predictions",
    params(("id" = String, Path, description = "The prediction id")),
    responses((status = 200, description = "Every recorded delivery attempt of the prediction's webhooks, oldest first", body = DeliveryAttempts), (status = 404, response = inline(problems::NotFound))),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    auth: Authorized<Read>,
    Path(id): Path<String>,
) -> Result<Json<DeliveryAttempts>, ApiError> {
    let prediction = owned_prediction(&state, &auth.caller, &id).await?;
    let attempts = ops::lists::delivery_attempts(&state, &prediction.id).await?;
    Ok(Json(DeliveryAttempts { results: attempts.iter().map(DeliveryAttemptView::of).collect() }))
}

/// What a resend answers.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ResendAccepted {
    /// The delivery's `webhook-id`, which the new attempt carries too.
    pub webhook_id: String,
    /// The event resent.
    #[schema(value_type = String, example = "completed")]
    pub event: WebhookEvent,
    /// Always `queued`: a notifier makes the attempt and records it.
    pub status: &'static str,
}

/// `POST /v1/predictions/{id}/webhook-deliveries/{webhook_id}/resend`
#[utoipa::path(
    post,
    path = "/predictions/{id}/webhook-deliveries/{webhook_id}/resend",
    operation_id = "resendWebhookDelivery",
    tag = "predictions",
    params(
        ("id" = String, Path, description = "The prediction id"),
        ("webhook_id" = String, Path, description = "The delivery's webhook-id"),
    ),
    responses((status = 202, description = "Queued: one more attempt of the event, with the same webhook-id", body = ResendAccepted), (status = 404, response = inline(problems::NotFound)), (status = 409, response = inline(problems::Conflict))),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(prediction_id = %id))]
pub async fn resend(
    State(state): State<AppState>,
    auth: Authorized<Write>,
    Path((id, webhook_id)): Path<(String, String)>,
) -> Result<(StatusCode, Json<ResendAccepted>), ApiError> {
    let event = deliveries::resend(&state, &auth.caller, &id, &webhook_id).await?;
    tracing::info!(webhook_id = %webhook_id, "webhook resend queued");
    Ok((StatusCode::ACCEPTED, Json(ResendAccepted { webhook_id, event, status: "queued" })))
}
