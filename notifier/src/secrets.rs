//! The accounts' signing secrets, read from MongoDB, opened with the master key and cached for
//! `NOTIFIER_SECRET_CACHE_SECONDS` (5 s by default).
//!
//! A rotation takes effect at once: the api announces it on NATS (and flushes) before it
//! answers, and every look-up first applies the announcements this replica has received. A
//! delivery caused by anything after the answer arrives on the same connection after the
//! announcement, so it is always signed with the new secret. The cache's expiry bounds what a
//! lost announcement (NATS down at that moment) can cost. The end of a transition window needs
//! no announcement: the previous secret's expiry is checked at each signing.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::Context;
use async_nats::Subscriber;
use common::{
    cache::TtlCache,
    crypto::MasterKey,
    domain::AccountId,
    messages::SecretMessage,
    store::{Accounts, accounts::SigningSecrets},
};
use futures::{FutureExt, StreamExt};

/// Signing secrets by account.
pub struct SecretCache {
    accounts: Accounts,
    master: MasterKey,
    cache: TtlCache<AccountId, Arc<SigningSecrets>>,
    rotations: Mutex<Subscriber>,
}

impl SecretCache {
    /// A cache over the `accounts` collection, dropping an account's entry when `rotations`
    /// (the subscription to the rotation announcements) names it.
    pub fn new(accounts: Accounts, master: MasterKey, ttl: Duration, rotations: Subscriber) -> Self {
        Self { accounts, master, cache: TtlCache::new(ttl, 10_000), rotations: Mutex::new(rotations) }
    }

    /// Drops the entries of every rotation announced so far (without waiting for more).
    fn apply_rotations(&self) {
        let mut rotations = self.rotations.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(Some(message)) = rotations.next().now_or_never() {
            match serde_json::from_slice::<SecretMessage>(&message.payload) {
                Ok(SecretMessage::SecretRotatedV1 { account_id }) => {
                    tracing::debug!(%account_id, "signing secret rotated; cached copy dropped");
                    self.cache.remove(&account_id);
                }
                Err(e) => tracing::warn!(error = %e, "undecodable rotation announcement ignored"),
            }
        }
    }

    /// The secrets of `account`, as they are since the last rotation announced.
    pub async fn get(&self, account: &AccountId) -> anyhow::Result<Arc<SigningSecrets>> {
        self.apply_rotations();
        let load = || async {
            let found =
                self.accounts.get(account).await?.with_context(|| format!("account {account} does not exist"))?;
            Ok(Arc::new(found.signing_secrets(&self.master)?))
        };
        self.cache.get_or_load(account, load).await
    }
}
