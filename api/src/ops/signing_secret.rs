//! The account's webhook signing secret, shared by the API's secret routes and the console:
//! reading it, and rotating it. A rotation is a conditional replace of the sealed secrets (two
//! concurrent rotations cannot both win), announced to every notifier before it returns (see
//! [`common::bus::Bus::publish_secret_rotated`]); the old secret keeps signing beside the new
//! one for the transition window.

use bson::DateTime;
use common::{
    domain::AccountId,
    store::{Account, accounts::SigningSecrets},
};

use crate::{error::ApiError, state::AppState};

/// The default transition window of a rotation, in hours.
pub const DEFAULT_TRANSITION_HOURS: i64 = 24;
/// Hours a rotation's previous secret keeps signing: 1 to 168.
pub type TransitionHours = crate::validate::field::Bounded<1, 168>;

/// How often a rotation retries when another rotation of the same account won the race.
const ROTATE_ATTEMPTS: usize = 3;

async fn account(state: &AppState, account_id: &AccountId) -> Result<Account, ApiError> {
    Ok(state
        .store
        .accounts()
        .get(account_id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("account {account_id} of a valid key does not exist"))?)
}

/// The account's signing secrets as they are now.
pub async fn current(state: &AppState, account_id: &AccountId) -> Result<SigningSecrets, ApiError> {
    Ok(account(state, account_id).await?.signing_secrets(&state.config.common.master_key)?)
}

/// A new secret now; the previous one keeps signing for `hours` (within [`TransitionHours`]).
pub async fn rotate(state: &AppState, account_id: &AccountId, hours: i64) -> Result<SigningSecrets, ApiError> {
    let accounts = state.store.accounts();
    let master = &state.config.common.master_key;
    for _ in 0..ROTATE_ATTEMPTS {
        let account = account(state, account_id).await?;
        let now = DateTime::now();
        let (sealed, _) = account.rotated(master, now, hours * 3_600_000);
        if accounts.replace_secrets(account_id, &account.webhook_secret.current, &sealed).await? {
            tracing::info!(account_id = %account_id, hours, "webhook signing secret rotated");
            // Every notifier drops its cached secrets before this answer can cause a delivery.
            if let Err(e) = state.bus.publish_secret_rotated(account_id).await {
                tracing::warn!(error = %e, "rotation not announced; notifiers pick it up when their cache expires");
            }
            let rotated = Account { webhook_secret: sealed, ..account };
            return Ok(rotated.signing_secrets(master)?);
        }
    }
    Err(anyhow::anyhow!("concurrent rotations of account {account_id} kept conflicting").into())
}
