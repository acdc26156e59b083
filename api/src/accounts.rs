//! Accounts and their keys: creating an account (with its signing secret) and issuing keys.

use bson::DateTime;
use common::{
    crypto::MasterKey,
    domain::{AccountId, ApiKeyValue, Scope},
    store::{Account, ApiKeyRecord, Store, StoreError, is_duplicate_key},
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
