//! Accounts and their keys: creating an account (with its signing secret), issuing keys, and
//! the key operations the API routes and the console share (create as a caller asks, and
//! deactivate).

use crate::problem::FieldError;
use bson::DateTime;
use common::{
    crypto::MasterKey,
    domain::{AccountId, ApiKeyId, ApiKeyValue, Micros, Scope},
    store::{Account, Store, StoreError, is_duplicate_key},
};

use crate::{
    error::ApiError,
    state::AppState,
    store::{ApiCollections, ApiKeyRecord},
    validate::create_api_key::CreateApiKey,
};

/// The account named `name`, created with a fresh signing secret if it does not exist;
/// `true` when this call created it. Safe to race: a concurrent creator's account is returned.
pub async fn ensure_account(store: &Store, master: &MasterKey, name: &str) -> Result<(Account, bool), StoreError> {
    if let Some(existing) = store.accounts().find_by_name(name).await? {
        return Ok((existing, false));
    }
    let (account, _secret) = Account::new(name, master);
    match store.accounts().insert(&account).await {
        Ok(()) => Ok((account, true)),
        Err(e) if is_duplicate_key(&e) => {
            let existing = store.accounts().find_by_name(name).await?;
            existing.map(|a| (a, false)).ok_or(e)
        }
        Err(e) => Err(e),
    }
}

/// Issues a new active key; returns the record and the value, which is shown once.
pub async fn issue_key(
    store: &Store,
    master: &MasterKey,
    account_id: AccountId,
    name: String,
    scopes: Vec<Scope>,
    rate_limit_rpm: u32,
    expires_at: Option<DateTime>,
) -> Result<(ApiKeyRecord, ApiKeyValue), StoreError> {
    let (record, value) = ApiKeyRecord::new(account_id, name, scopes, rate_limit_rpm, expires_at, master);
    store.api_keys().insert(&record).await?;
    Ok((record, value))
}

/// Deactivates key `id` of `account`; answers once every replica has been told (see
/// [`crate::state::keys`]: this replica's cache is emptied at once, and the announcement must come
/// back over NATS, bounded in time, before the answer).
pub async fn deactivate_key(state: &AppState, account: &AccountId, id: &str) -> Result<ApiKeyRecord, ApiError> {
    let missing = || ApiError::not_found(format!("API key {id} not found."));
    let key_id = ApiKeyId::parse(id).map_err(|_| missing())?;
    let record = state.store.api_keys().deactivate(&key_id, account).await?.ok_or_else(missing)?;
    state.keys.forget_all();
    match state.bus.publish_key_deactivated(account, &key_id).await {
        Ok(()) if state.keys.heard(&key_id).await => {}
        Ok(()) => {
            tracing::warn!(%key_id, "deactivation announced but not heard back; other replicas' caches expire within {:?}", crate::state::keys::KEY_CACHE_TTL)
        }
        Err(e) => {
            tracing::warn!(%key_id, error = %e, "deactivation not announced; other replicas' caches expire within {:?}", crate::state::keys::KEY_CACHE_TTL)
        }
    }
    tracing::info!(key_id = %key_id, "API key deactivated");
    Ok(record)
}

const DAY_MS: i64 = 24 * 3600 * 1000;

/// Issues a key of `creator`'s account as `request` asks; a key may only grant scopes its
/// creator holds. Returns the record and the value (shown once).
pub async fn create_key(
    state: &AppState,
    creator: &ApiKeyRecord,
    request: CreateApiKey,
) -> Result<(ApiKeyRecord, ApiKeyValue), ApiError> {
    if let Some(extra) = request.scopes.iter().find(|s| !creator.has_scope(**s)) {
        return Err(ApiError::validation(
            "A key cannot grant a scope its creator lacks.",
            vec![FieldError::invalid("scopes", format!("The calling key lacks the '{extra}' scope."))],
        ));
    }
    let expires_at =
        request.expires_in_days.map(|days| DateTime::from_millis(DateTime::now().timestamp_millis() + days * DAY_MS));
    Ok(issue_key(
        &state.store,
        &state.config.common.master_key,
        creator.account_id.clone(),
        request.name,
        request.scopes,
        request.rate_limit_rpm.unwrap_or(state.config.default_rate_limit_rpm),
        expires_at,
    )
    .await?)
}

/// Account `id` (404 if it is gone: the calling key's account deleted under it).
pub async fn of_key(state: &AppState, id: &AccountId) -> Result<Account, ApiError> {
    let account = state.store.accounts().get(id).await?;
    account.ok_or_else(|| ApiError::not_found("The key's account does not exist."))
}

/// Sets the budget account `id` chose for itself (`None`: none of its own).
pub async fn set_own_budget(state: &AppState, id: &AccountId, budget: Option<Micros>) -> Result<(), ApiError> {
    state.store.accounts().set_own_budget(id, budget).await?;
    Ok(())
}

/// `account`'s API key `id`, if it has one.
pub async fn key_of(state: &AppState, account: &AccountId, id: &ApiKeyId) -> Result<Option<ApiKeyRecord>, ApiError> {
    Ok(state.store.api_keys().get_for_account(id, account).await?)
}
