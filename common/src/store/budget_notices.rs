//! Budget notices (docs/spend.md): when an account's spending this month reaches 80 % and again
//! 100 % of its monthly budget, one notice each, delivered at least once to the webhook
//! receivers of its predictions that asked for `account.budget` in their
//! `webhook_events_filter`.
//!
//! - `budget_receivers`: `{_id: "<account>|<url>", account_id, url, asked_at}`, written when a
//!   prediction asking for the event is created (only then; one upsert).
//! - `budget_notices`: `{_id: "<account>|<month>|<threshold>", ...}`, raised by the usage ledger
//!   that counted the spending past the threshold; the unique `_id` makes it once per account,
//!   month and threshold, whoever raises it first. The notifier delivers it: it claims a due
//!   notice for a lease (`claimed_until`), attempts each receiver not yet delivered, and writes
//!   what came of it; a notice not settled within its lease (a notifier that died) is claimed
//!   again. Failed receivers are tried again on the notifier's retry schedule, then given up.

use bson::{DateTime, doc};
use futures::TryStreamExt;
use mongodb::{Collection, Database, options::ReturnDocument};
use serde::{Deserialize, Serialize};

use super::{StoreError, is_duplicate_key};
use crate::domain::{AccountId, Micros, WebhookUrl};

/// A receiver of an account's budget notices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetReceiver {
    /// `<account>|<url>`.
    #[serde(rename = "_id")]
    pub id: String,
    /// The account.
    pub account_id: AccountId,
    /// Where notices go.
    pub url: WebhookUrl,
    /// When a prediction last asked for them.
    pub asked_at: DateTime,
}

/// One receiver of a notice, and how its delivery stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoticeTarget {
    /// Where it goes.
    pub url: WebhookUrl,
    /// Whether it was delivered (a 2xx).
    pub delivered: bool,
    /// Whether it was given up (its attempts ran out, or the receiver refused it for good).
    #[serde(default)]
    pub given_up: bool,
    /// Attempts made.
    pub attempts: u32,
}

/// A notice that an account's spending reached a share of its monthly budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetNotice {
    /// `<account>|<month>|<threshold>`: also the notice's `webhook-id`.
    #[serde(rename = "_id")]
    pub id: String,
    /// The account.
    pub account_id: AccountId,
    /// Its name, as the notice's `account` shows it.
    pub account: String,
    /// The calendar month (UTC), `YYYY-MM`.
    pub month: String,
    /// The share of the budget reached, in percent (80 or 100).
    pub threshold: u32,
    /// The budget in force when it was reached.
    #[serde(rename = "monthly_budget_micros")]
    pub monthly_budget: Micros,
    /// What was spent this month then.
    #[serde(rename = "spent_micros")]
    pub spent: Micros,
    /// When it was raised.
    pub created_at: DateTime,
    /// Its receivers.
    pub targets: Vec<NoticeTarget>,
    /// When its next delivery is due.
    pub next_at: DateTime,
    /// Whether every receiver was delivered or given up.
    pub done: bool,
    /// Until when a notifier holds it.
    pub claimed_until: DateTime,
}

impl BudgetNotice {
    /// The id of account `account`'s notice of `threshold` % in `month`.
    pub fn id_of(account: &AccountId, month: &str, threshold: u32) -> String {
        format!("{account}|{month}|{threshold}")
    }

    /// The webhook body: `{type, account, monthly_budget, spent_this_month, threshold}`.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "account.budget",
            "account": self.account,
            "monthly_budget": self.monthly_budget.dollars(),
            "spent_this_month": self.spent.dollars(),
            "threshold": self.threshold,
        })
    }
}

/// Typed access to `budget_receivers` and `budget_notices`.
#[derive(Clone, Debug)]
pub struct BudgetNotices {
    receivers: Collection<BudgetReceiver>,
    notices: Collection<BudgetNotice>,
}

impl BudgetNotices {
    pub(super) fn new(db: &Database) -> Self {
        Self { receivers: db.collection("budget_receivers"), notices: db.collection("budget_notices") }
    }

    /// Records that `url` asked for `account`'s budget notices.
    pub async fn add_receiver(&self, account: &AccountId, url: &WebhookUrl) -> Result<(), StoreError> {
        let id = format!("{account}|{url}");
        let update = doc! {
            "$set": { "asked_at": DateTime::now() },
            "$setOnInsert": { "account_id": account.as_str(), "url": url.as_str() },
        };
        self.receivers.update_one(doc! { "_id": id }, update).upsert(true).await?;
        Ok(())
    }

    /// The receivers of `account`'s notices.
    pub async fn receivers(&self, account: &AccountId) -> Result<Vec<BudgetReceiver>, StoreError> {
        self.receivers.find(doc! { "account_id": account.as_str() }).limit(100).await?.try_collect().await
    }

    /// Raises `notice`; whether it is new (false: that account, month and threshold had one).
    pub async fn raise(&self, notice: &BudgetNotice) -> Result<bool, StoreError> {
        match self.notices.insert_one(notice).await {
            Ok(_) => Ok(true),
            Err(e) if is_duplicate_key(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Whether `account` has the notice of `threshold` % in `month` already.
    pub async fn raised(&self, account: &AccountId, month: &str, threshold: u32) -> Result<bool, StoreError> {
        let id = BudgetNotice::id_of(account, month, threshold);
        // Only the `_id` is read: not a whole notice.
        let ids = self.notices.clone_with_type::<bson::Document>();
        Ok(ids.find_one(doc! { "_id": id }).projection(doc! { "_id": 1 }).await?.is_some())
    }

    /// A notice due for delivery at `now`, held until `until` by the caller (none is due).
    pub async fn claim_due(&self, now: DateTime, until: DateTime) -> Result<Option<BudgetNotice>, StoreError> {
        let filter = doc! { "done": false, "next_at": { "$lte": now }, "claimed_until": { "$lte": now } };
        self.notices
            .find_one_and_update(filter, doc! { "$set": { "claimed_until": until } })
            .sort(doc! { "next_at": 1 })
            .return_document(ReturnDocument::After)
            .await
    }

    /// Extends the claim on `notice` (held until its `claimed_until`) to `until`, and records
    /// what its round has done so far; `false` when the claim is no longer this holder's (its
    /// lease ran out and another claimed it): the round must stop. A round extends its claim
    /// before each attempt, so however many receivers it has, no one else claims the notice
    /// while it delivers, and a receiver delivered before the extension is never sent twice.
    pub async fn extend(&self, notice: &mut BudgetNotice, until: DateTime) -> Result<bool, StoreError> {
        let targets = bson::to_bson(&notice.targets)?;
        let filter = doc! { "_id": &notice.id, "claimed_until": notice.claimed_until };
        let update = doc! { "$set": { "claimed_until": until, "targets": targets } };
        let extended = self.notices.update_one(filter, update).await?.matched_count == 1;
        if extended {
            notice.claimed_until = until;
        }
        Ok(extended)
    }

    /// Writes what came of a delivery round of `notice`: its targets, when the next round is
    /// due and whether it is done; the claim is released. Only while the claim is still this
    /// holder's (`claimed_until` as it holds it): `false` otherwise, and nothing is written.
    pub async fn settle(&self, notice: &BudgetNotice) -> Result<bool, StoreError> {
        let targets = bson::to_bson(&notice.targets)?;
        let update = doc! { "$set": {
            "targets": targets,
            "next_at": notice.next_at,
            "done": notice.done,
            "claimed_until": DateTime::from_millis(0),
        } };
        let filter = doc! { "_id": &notice.id, "claimed_until": notice.claimed_until };
        Ok(self.notices.update_one(filter, update).await?.matched_count == 1)
    }

    /// The notices of `account` (tests and the console).
    pub async fn of_account(&self, account: &AccountId) -> Result<Vec<BudgetNotice>, StoreError> {
        self.notices.find(doc! { "account_id": account.as_str() }).sort(doc! { "_id": 1 }).await?.try_collect().await
    }
}
