//! Monthly budgets (docs/spend.md): the calendar month (UTC) spending is counted in, and the
//! notices raised when an account's spending reaches [`THRESHOLDS`] of its budget.
//!
//! A usage ledger ([`crate::usage`]) calls [`raise_notices`] for each account whose costs it
//! just added, so a threshold is noticed within a batch of being crossed, by the process that
//! counted the spending past it, with no scan of accounts. Each notice is raised once per
//! account, month and threshold (see [`crate::store::budget_notices`]), and the notifier
//! delivers it.

use bson::DateTime;
use chrono::{Datelike, TimeZone, Utc};

use crate::{
    domain::{AccountId, Micros},
    store::{
        Store, StoreError,
        budget_notices::{BudgetNotice, NoticeTarget},
    },
};

/// The shares of the budget, in percent, at which a notice is raised.
pub const THRESHOLDS: [u32; 2] = [80, 100];

/// The start of the calendar month (UTC) `now` is in, and of the next one.
pub fn month_of(now: chrono::DateTime<Utc>) -> (chrono::DateTime<Utc>, chrono::DateTime<Utc>) {
    let start = Utc.with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0).single().unwrap_or(now);
    let (year, month) = if now.month() == 12 { (now.year() + 1, 1) } else { (now.year(), now.month() + 1) };
    let next = Utc.with_ymd_and_hms(year, month, 1, 0, 0, 0).single().unwrap_or(now);
    (start, next)
}

/// Whether `spent` reached `threshold` percent of `budget`.
pub fn reached(spent: Micros, budget: Micros, threshold: u32) -> bool {
    i128::from(spent.0) * 100 >= i128::from(budget.0) * i128::from(threshold)
}

/// Raises the notices `account` is due this month (its spending past a threshold of its
/// budget, and no notice of that threshold yet); how many it raised.
pub async fn raise_notices(store: &Store, account: &AccountId) -> Result<usize, StoreError> {
    let Some(found) = store.accounts().get(account).await? else { return Ok(0) };
    let Some(budget) = found.limits().monthly_budget() else { return Ok(0) };
    let now = Utc::now();
    let (start, _) = month_of(now);
    let month = start.format("%Y-%m").to_string();
    let notices = store.budget_notices();
    let spent = store.usage_totals().spent_since(account, DateTime::from_chrono(start)).await?;
    let mut raised = 0;
    for threshold in THRESHOLDS {
        if !reached(spent, budget, threshold) || notices.raised(account, &month, threshold).await? {
            continue;
        }
        let receivers = notices.receivers(account).await?;
        let targets: Vec<NoticeTarget> = receivers
            .into_iter()
            .map(|r| NoticeTarget { url: r.url, delivered: false, given_up: false, attempts: 0 })
            .collect();
        let notice = BudgetNotice {
            id: BudgetNotice::id_of(account, &month, threshold),
            account_id: account.clone(),
            account: found.name.clone(),
            month: month.clone(),
            threshold,
            monthly_budget: budget,
            spent,
            created_at: DateTime::now(),
            done: targets.is_empty(),
            targets,
            next_at: DateTime::now(),
            claimed_until: DateTime::from_millis(0),
        };
        if notices.raise(&notice).await? {
            tracing::info!(account = %found.name, threshold, budget = %budget, spent = %spent, "budget threshold reached; notice raised");
            raised += 1;
        }
    }
    Ok(raised)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_month_runs_from_its_first_day_to_the_next_months_in_utc() {
        let at = |y, m, d| Utc.with_ymd_and_hms(y, m, d, 13, 5, 0).single().expect("a time");
        let day = |y, m| Utc.with_ymd_and_hms(y, m, 1, 0, 0, 0).single().expect("a day");
        assert_eq!(month_of(at(2026, 11, 27)), (day(2026, 11), day(2026, 12)));
        assert_eq!(month_of(at(2026, 12, 31)), (day(2026, 12), day(2027, 1)));
    }

    #[test]
    fn a_threshold_is_reached_at_its_share_exactly() {
        let budget = Micros(10_000_000);
        assert!(!reached(Micros(7_999_999), budget, 80));
        assert!(reached(Micros(8_000_000), budget, 80));
        assert!(!reached(Micros(9_999_999), budget, 100));
        assert!(reached(Micros(10_000_000), budget, 100));
        assert!(reached(Micros::ZERO, Micros::ZERO, 100), "a budget of 0 is spent at once");
    }
}
