//! The accounts' signing secrets, read from MongoDB, opened with the master key and cached for
//! `NOTIFIER_SECRET_CACHE_SECONDS` (5 s by default): a rotation, and the end of its transition
//! window, take effect on every replica within that time.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use common::{
    cache::TtlCache,
    crypto::MasterKey,
    domain::AccountId,
    store::{Accounts, accounts::SigningSecrets},
};

/// Signing secrets by account.
pub struct SecretCache {
    accounts: Accounts,
    master: MasterKey,
    cache: TtlCache<AccountId, Arc<SigningSecrets>>,
}

impl SecretCache {
    /// A cache over the `accounts` collection.
    pub fn new(accounts: Accounts, master: MasterKey, ttl: Duration) -> Self {
        Self { accounts, master, cache: TtlCache::new(ttl, 10_000) }
    }

    /// The secrets of `account`.
    pub async fn get(&self, account: &AccountId) -> anyhow::Result<Arc<SigningSecrets>> {
        if let Some(s) = self.cache.get(account) {
            return Ok(s);
        }
        let found = self.accounts.get(account).await?.with_context(|| format!("account {account} does not exist"))?;
        let secrets = Arc::new(found.signing_secrets(&self.master)?);
        self.cache.insert(account.clone(), secrets.clone());
        Ok(secrets)
    }
}
