//! The highest priority each account may ask for (`max_priority`, set by the operator with
//! `api admin set-priority`; `normal` by default), read from `accounts` at most every
//! [`LIMIT_TTL`] per account: a create checks its `priority` against it.

use std::time::Duration;

use common::{
    cache::TtlCache,
    domain::{AccountId, Priority},
    store::{Accounts, StoreError},
};

/// How long an account's limit is used before it is read again: a change by the operator
/// applies within this.
pub const LIMIT_TTL: Duration = Duration::from_secs(5);

/// Accounts' priority limits, cached.
pub struct PriorityLimits {
    accounts: Accounts,
    cache: TtlCache<AccountId, Priority>,
}

impl PriorityLimits {
    /// Limits read from `accounts`.
    pub fn new(accounts: Accounts) -> Self {
        Self { accounts, cache: TtlCache::new(LIMIT_TTL, 100_000) }
    }

    /// The highest priority `account` may ask for.
    pub async fn max(&self, account: &AccountId) -> Result<Priority, StoreError> {
        self.cache.get_or_load(account, self.accounts.max_priority(account)).await
    }
}
