//! The account's webhook signing secret (scope `admin`): `GET /v1/account/webhooks/secret`
//! (and its Replicate-compatible alias `GET /v1/webhooks/default/secret`), and
//! `POST /v1/account/webhooks/secret/rotate`.

use crate::problem::FieldError;
use axum::{Json, extract::State};
use bson::DateTime;
use chrono::Utc;
use common::store::accounts::SigningSecrets;
use serde::Serialize;

use crate::{
    error::ApiError,
    http::auth::{Admin, Authorized},
    http::extract::OptionalJsonObject,
    ops::signing_secret,
    routes::openapi::problems,
    state::AppState,
    validate::body,
};

/// The secret as the API shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SecretView {
    /// The full current secret.
    pub key: String,
    /// The secret with all but its first 10 characters replaced by `*`.
    pub masked: String,
    /// When the current secret was created.
    pub created_at: chrono::DateTime<Utc>,
    /// When the previous secret stops signing; `null` outside a rotation window.
    pub previous_key_expires_at: Option<chrono::DateTime<Utc>>,
}

impl SecretView {
    /// The view of `secrets` at `now` (an expired previous secret is not shown).
    pub fn of(secrets: &SigningSecrets, now: DateTime) -> Self {
        Self {
            key: secrets.current.expose().to_owned(),
            masked: secrets.current.masked(),
            created_at: secrets.created_at.to_chrono(),
            previous_key_expires_at: secrets
                .previous
                .as_ref()
                .map(|(_, expires)| *expires)
                .filter(|expires| now < *expires)
                .map(DateTime::to_chrono),
        }
    }
}

/// `GET /v1/account/webhooks/secret` (also `GET /v1/webhooks/default/secret`)
#[utoipa::path(
    get,
    path = "/account/webhooks/secret",
    operation_id = "getWebhookSecret",
    tag = "account",
    responses((status = 200, description = "The signing secret", body = SecretView)),
    security(("bearer" = []))
)]
pub async fn get(State(state): State<AppState>, auth: Authorized<Admin>) -> Result<Json<SecretView>, ApiError> {
    let secrets = signing_secret::current(&state, &auth.caller.key.account_id).await?;
    Ok(Json(SecretView::of(&secrets, DateTime::now())))
}

/// The rotate request body as the OpenAPI description shows it.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct RotateSecretBody {
    /// Hours during which the previous secret still signs (default 24).
    #[schema(minimum = 1, maximum = 168)]
    transition_hours: Option<i64>,
}

/// The body of the rotate request: `transition_hours`, an integer from 1 to 168 (default 24).
fn transition_hours(body: &serde_json::Map<String, serde_json::Value>) -> Result<i64, ApiError> {
    match body.get("transition_hours") {
        None | Some(serde_json::Value::Null) => Ok(signing_secret::DEFAULT_TRANSITION_HOURS),
        Some(v) => body::integer(v).filter(|h| signing_secret::TRANSITION_HOURS.contains(h)).ok_or_else(|| {
            ApiError::validation(
                "The request has invalid fields; see errors.",
                vec![FieldError::invalid("transition_hours", "Must be an integer from 1 to 168.")],
            )
        }),
    }
}

#[utoipa::path(
    post,
    path = "/account/webhooks/secret/rotate",
    operation_id = "rotateWebhookSecret",
    tag = "account",
    request_body(content = Option<RotateSecretBody>, content_type = "application/json", description = "Optional: `transition_hours` defaults to 24"),
    responses((status = 200, description = "The new secret; `previous_key_expires_at` ends the transition", body = SecretView), (status = 400, response = inline(problems::BadRequest)), (status = 413, response = inline(problems::TooLarge))),
    security(("bearer" = []))
)]
/// `POST /v1/account/webhooks/secret/rotate`: a new secret now (every notifier is told before
/// the answer, see [`common::bus::Bus::publish_secret_rotated`]); the old one keeps signing
/// (beside the new one) for `transition_hours`.
pub async fn rotate(
    State(state): State<AppState>,
    auth: Authorized<Admin>,
    OptionalJsonObject(body): OptionalJsonObject,
) -> Result<Json<SecretView>, ApiError> {
    let hours = transition_hours(&body)?;
    let secrets = signing_secret::rotate(&state, &auth.caller.key.account_id, hours).await?;
    Ok(Json(SecretView::of(&secrets, DateTime::now())))
}
