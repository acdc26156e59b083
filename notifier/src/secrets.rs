//! The accounts' signing secrets, read from MongoDB, opened with the master key and cached for
//! [`SECRET_CACHE_TTL`]: a rotation takes effect on every replica within that time.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use common::{
    cache::TtlCache,
    crypto::MasterKey,
    domain::AccountId,
    store::{Accounts, accounts::SigningSecrets},
};

/// How long opened secrets are trusted.
pub const SECRET_CACHE_TTL: Duration = Duration::from_secs(5);

/// Signing secrets by account.
pub struct SecretCache {
    accounts: Accounts,
    master: MasterKey,
    cache: TtlCache<AccountId, Arc<SigningSecrets>>,
}

impl SecretCache {
    /// A cache over the `accounts` collection.
    pub fn new(accounts: Accounts, master: MasterKey) -> Self {
        Self { accounts, master, cache: TtlCache::new(SECRET_CACHE_TTL, 10_000) }
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
