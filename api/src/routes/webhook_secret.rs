//! The account's webhook signing secret: `GET /v1/account/webhooks/secret` and its
//! Replicate-compatible alias `GET /v1/webhooks/default/secret` (scope `admin`).

use axum::{Json, extract::State};
use bson::DateTime;
use chrono::Utc;
use common::store::accounts::SigningSecrets;
use serde::Serialize;

use crate::{
    auth::{Admin, Authorized},
    error::ApiError,
    state::AppState,
};

/// The secret as the API shows it.
#[derive(Debug, Serialize)]
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

/// `GET /v1/account/webhooks/secret`
pub async fn get(State(state): State<AppState>, auth: Authorized<Admin>) -> Result<Json<SecretView>, ApiError> {
    let account_id = &auth.caller.key.account_id;
    let account = state
        .store
        .accounts()
        .get(account_id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("account {account_id} of a valid key does not exist"))?;
    let secrets = account.signing_secrets(&state.config.common.master_key)?;
    Ok(Json(SecretView::of(&secrets, DateTime::now())))
}
