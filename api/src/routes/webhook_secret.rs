//! The account's webhook signing secret: `GET /v1/account/webhooks/secret` and
//! `POST /v1/account/webhooks/secret/rotate` (scope `admin`, as every `/v1/account/...`
//! route), and Replicate's path, `GET /webhooks/default/secret` on both surfaces (scope `read`:
//! on Replicate any token of the account reads it, and a receiver's setup code reads it with
//! the token that creates its predictions; rotating keeps `admin`).

use crate::problem::FieldError;
use axum::{Json, extract::State};
use bson::DateTime;
use chrono::Utc;
use common::store::accounts::SigningSecrets;
use serde::Serialize;

use crate::{
    error::ApiError,
    http::auth::{self, Admin, Authorized},
    http::extract::OptionalBody,
    ops::signing_secret,
    routes::openapi::problems,
    state::AppState,
    validate::{
        FromBody,
        field::{Field, Read},
    },
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

/// `GET /v1/account/webhooks/secret` (admin; Replicate's path is [`get_default`])
#[utoipa::path(
    get,
    path = "/account/webhooks/secret",
    operation_id = "getWebhookSecret",
    tag = "account",
    responses((status = 200, description = "The signing secret", body = SecretView)),
    security(("bearer" = []))
)]
pub async fn get(State(state): State<AppState>, auth: Authorized<Admin>) -> Result<Json<SecretView>, ApiError> {
    shown(&state, &auth.caller.key.account_id).await
}

/// The account's current secret as both reads answer it.
async fn shown(state: &AppState, account: &common::domain::AccountId) -> Result<Json<SecretView>, ApiError> {
    let secrets = signing_secret::current(state, account).await?;
    Ok(Json(SecretView::of(&secrets, DateTime::now())))
}

/// `GET /v1/webhooks/default/secret`: the same answer, to any key of the account (`read`).
#[utoipa::path(
    get,
    path = "/webhooks/default/secret",
    operation_id = "getDefaultWebhookSecret",
    tag = "account",
    responses((status = 200, description = "The signing secret (Replicate's path; scope `read`)", body = SecretView)),
    security(("bearer" = []))
)]
pub async fn get_default(
    State(state): State<AppState>,
    auth: Authorized<auth::Read>,
) -> Result<Json<SecretView>, ApiError> {
    shown(&state, &auth.caller.key.account_id).await
}

/// The body of a rotation: optional, and no body at all is `{}`.
// As sent; `Rotation` is it checked.
#[derive(Debug, Default, serde::Deserialize, utoipa::ToSchema)]
pub struct RotateSecretBody {
    /// Hours during which the previous secret still signs (default 24).
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 168)]
    transition_hours: Option<Field<signing_secret::TransitionHours>>,
}

/// A rotation asked for: how long the previous secret keeps signing.
pub struct Rotation {
    /// Hours, 1 to 168.
    transition_hours: i64,
}

impl FromBody for Rotation {
    type Sent = RotateSecretBody;

    fn check(body: RotateSecretBody) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        let hours = body.transition_hours.optional("transition_hours", &mut errors);
        let transition_hours = hours.map_or(signing_secret::DEFAULT_TRANSITION_HOURS, |h| h.0);
        if errors.is_empty() { Ok(Self { transition_hours }) } else { Err(errors) }
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
    OptionalBody(rotation): OptionalBody<Rotation>,
) -> Result<Json<SecretView>, ApiError> {
    let secrets = signing_secret::rotate(&state, &auth.caller.key.account_id, rotation.transition_hours).await?;
    Ok(Json(SecretView::of(&secrets, DateTime::now())))
}
