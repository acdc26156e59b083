//! What each account may ask of the service, as a create checks it, read from `accounts` at
//! most every [`LIMIT_TTL`] per account: the highest priority it may ask for (`max_priority`,
//! set by the operator with `api admin set-priority`; `normal` by default) and, when it has a
//! monthly budget (docs/spend.md: `api admin set-budget`, lowered by its admins with
//! `PATCH /v1/account`), what it spent this calendar month (UTC) from the usage totals.
//!
//! Every api replica reads them on its own, so a budget raised, lowered or reached takes
//! effect within [`LIMIT_TTL`] plus the usage ledger's gathering (a quarter of a second) on
//! each: well within the 5 s the contract allows. An account without a budget costs one
//! small read every [`LIMIT_TTL`] while it creates.

use std::time::Duration;

use bson::DateTime;
use chrono::Utc;
use common::{
    budget::month_of,
    cache::TtlCache,
    domain::{AccountId, Micros},
    store::{AccountLimits, Accounts, StoreError, usage::UsageTotals},
};

/// How long an account's limits are used before they are read again: a change by the
/// operator, or spending that reaches the budget, applies within this.
pub const LIMIT_TTL: Duration = Duration::from_secs(2);

/// An account's limits and, if it has a budget, what it spent this month.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    /// Its limits.
    pub limits: AccountLimits,
    /// What it spent this month (counted only when it has a budget).
    pub spent_this_month: Micros,
    /// When the month's spending resets (the first of the next month, UTC).
    pub resets_at: chrono::DateTime<Utc>,
}

impl Standing {
    /// Its budget in force, if it is spent: the refusal of every create.
    pub fn exhausted_budget(&self) -> Option<Micros> {
        self.limits.monthly_budget().filter(|budget| self.spent_this_month >= *budget)
    }
}

/// Accounts' limits and spending, cached.
pub struct AccountLimitsCache {
    accounts: Accounts,
    usage: UsageTotals,
    cache: TtlCache<AccountId, Standing>,
}

impl AccountLimitsCache {
    /// Limits read from `accounts`, spending from `usage`.
    pub fn new(accounts: Accounts, usage: UsageTotals) -> Self {
        Self { accounts, usage, cache: TtlCache::new(LIMIT_TTL, 100_000) }
    }

    /// `account`'s limits and spending, at most [`LIMIT_TTL`] old.
    pub async fn standing(&self, account: &AccountId) -> Result<Standing, StoreError> {
        self.cache.get_or_load(account, || read(&self.accounts, &self.usage, account, false)).await
    }

    /// `account`'s limits and spending as stored now, its spending counted even without a
    /// budget (the account's own page, and after it changed its budget).
    pub async fn fresh(&self, account: &AccountId) -> Result<Standing, StoreError> {
        let standing = read(&self.accounts, &self.usage, account, true).await?;
        self.cache.insert(account.clone(), standing);
        Ok(standing)
    }
}

/// `account`'s standing; its spending read only when it has a budget, unless `always_spent`.
async fn read(
    accounts: &Accounts,
    usage: &UsageTotals,
    account: &AccountId,
    always_spent: bool,
) -> Result<Standing, StoreError> {
    let limits = accounts.limits(account).await?;
    let (month, resets_at) = month_of(Utc::now());
    let spent_this_month = if always_spent || limits.monthly_budget().is_some() {
        usage.spent_since(account, DateTime::from_chrono(month)).await?
    } else {
        Micros::ZERO
    };
    Ok(Standing { limits, spent_this_month, resets_at })
}
