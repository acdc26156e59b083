//! The `usage_totals` collection: running totals of ended predictions per account, hour (UTC)
//! and group (model, deployment, hardware, API key, kind), written by the [`crate::usage`]
//! ledger of each process that ends predictions (api: cancels; runner: results, failures).
//!
//! A prediction is counted exactly once without a transaction: each writer process has its own
//! id (`writer`) and numbers the batches of predictions it counts (`seq`, increasing, one
//! batch at a time), and keeps its own documents (`writer` is part of `_id`). A batch's sums
//! are added only where the document's `last_seq` is below the batch's `seq`, and `last_seq`
//! set in the same update; so adding the same batch again (after a crash between adding it
//! and marking it counted) matches nothing, and the upsert's insert is refused by the unique
//! `_id` (11000): already counted. Reads add up every writer's documents.

use bson::{DateTime, doc};
use futures::TryStreamExt;
use mongodb::{Collection, Database};
use serde::{Deserialize, Serialize};

use super::{StoreError, is_duplicate_key};
use crate::domain::{AccountId, Metrics, Micros, PredictionStatus};

/// What a usage total is grouped by, besides the account and the hour.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct UsageGroup {
    /// The model, `owner/name`.
    pub model: String,
    /// The deployment it ran through, if any (`owner/name`).
    pub deployment: Option<String>,
    /// The hardware pool it was routed to, if any.
    pub hardware: Option<String>,
    /// The id of the API key that created it (none for predictions made before keys were
    /// recorded with them).
    pub api_key: Option<String>,
    /// `prediction` or `training`.
    pub kind: String,
}

/// One writer's totals of one account, hour and group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageTotal {
    /// `{writer}|{account}|{hour}|{group}`: one document per writer, so each writer's `seq`
    /// orders its own additions.
    #[serde(rename = "_id")]
    pub id: String,
    /// The account.
    pub account_id: AccountId,
    /// The hour (UTC) the predictions ended in.
    pub hour: DateTime,
    /// The group.
    pub group: UsageGroup,
    /// Predictions that succeeded.
    #[serde(default)]
    pub succeeded: i64,
    /// Predictions that failed.
    #[serde(default)]
    pub failed: i64,
    /// Predictions that were canceled.
    #[serde(default)]
    pub canceled: i64,
    /// The sum of their `predict_time`, seconds.
    #[serde(default)]
    pub predict_time: f64,
    /// The sum of their `total_time`, seconds.
    #[serde(default)]
    pub total_time: f64,
    /// The sum of their costs, micro-dollars.
    #[serde(default, rename = "cost_micros")]
    pub cost: Micros,
    /// The writer's last `seq` added here.
    #[serde(default)]
    pub last_seq: i64,
}

/// Ended predictions of one account, hour and group, as a usage total counts them: one, or
/// several added together (a writer adds a batch at once, see [`crate::usage`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Counted {
    /// Their account.
    pub account_id: AccountId,
    /// The hour (UTC) they ended in.
    pub hour: DateTime,
    /// Their group.
    pub group: UsageGroup,
    /// How many succeeded.
    pub succeeded: i64,
    /// How many failed.
    pub failed: i64,
    /// How many were canceled.
    pub canceled: i64,
    /// The sum of their `predict_time`, seconds.
    pub predict_time: f64,
    /// The sum of their `total_time`, seconds.
    pub total_time: f64,
    /// The sum of their costs.
    pub cost: Micros,
}

impl Counted {
    /// One prediction that ended as `status` (not terminal: counts nothing) with `metrics`.
    pub fn one(
        account_id: AccountId,
        hour: DateTime,
        group: UsageGroup,
        status: PredictionStatus,
        metrics: Metrics,
    ) -> Self {
        let is = |s: PredictionStatus| i64::from(status == s);
        Self {
            account_id,
            hour,
            group,
            succeeded: is(PredictionStatus::Succeeded),
            failed: is(PredictionStatus::Failed),
            canceled: is(PredictionStatus::Canceled),
            predict_time: metrics.predict_time,
            total_time: metrics.total_time,
            cost: metrics.cost,
        }
    }

    /// Adds `other` (of the same account, hour and group) to these.
    pub fn merge(&mut self, other: &Self) {
        self.succeeded += other.succeeded;
        self.failed += other.failed;
        self.canceled += other.canceled;
        self.predict_time += other.predict_time;
        self.total_time += other.total_time;
        self.cost += other.cost;
    }

    /// What adding these to a total increments: every sum, by its stored name.
    fn increments(&self) -> bson::Document {
        doc! {
            "succeeded": self.succeeded,
            "failed": self.failed,
            "canceled": self.canceled,
            "predict_time": self.predict_time,
            "total_time": self.total_time,
            "cost_micros": self.cost.0,
        }
    }

    /// The `_id` of `writer`'s total these go into.
    pub fn total_id(&self, writer: &str) -> String {
        total_id(writer, self)
    }
}

/// `counted`, those of the same total added together.
pub fn merged(writer: &str, counted: impl IntoIterator<Item = Counted>) -> Vec<Counted> {
    let mut by_total: Vec<(String, Counted)> = Vec::new();
    for c in counted {
        let id = c.total_id(writer);
        match by_total.iter_mut().find(|(known, _)| *known == id) {
            Some((_, sum)) => sum.merge(&c),
            None => by_total.push((id, c)),
        }
    }
    by_total.into_iter().map(|(_, c)| c).collect()
}

/// Typed access to `usage_totals`.
#[derive(Clone, Debug)]
pub struct UsageTotals {
    coll: Collection<UsageTotal>,
}

impl UsageTotals {
    pub(super) fn new(db: &Database) -> Self {
        Self { coll: db.collection("usage_totals") }
    }

    /// Adds `counted` to the totals of `writer`, as its addition number `seq`; whether it was
    /// added now (false: it had been already).
    pub async fn add(&self, writer: &str, seq: i64, counted: &Counted) -> Result<bool, StoreError> {
        let group = bson::to_bson(&counted.group).map_err(|e| mongodb::error::Error::custom(e.to_string()))?;
        let update = doc! {
            "$inc": counted.increments(),
            "$set": { "last_seq": seq },
            "$setOnInsert": { "account_id": counted.account_id.as_str(), "hour": counted.hour, "group": group },
        };
        let filter = doc! { "_id": counted.total_id(writer), "last_seq": { "$lt": seq } };
        match self.coll.update_one(filter, update).upsert(true).await {
            Ok(_) => Ok(true),
            Err(e) if is_duplicate_key(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Every writer's totals of `account` (every account when `None`) for the hours in
    /// `from..until`.
    pub async fn between(
        &self,
        account: Option<&AccountId>,
        from: DateTime,
        until: DateTime,
    ) -> Result<Vec<UsageTotal>, StoreError> {
        let mut filter = doc! { "hour": { "$gte": from, "$lt": until } };
        if let Some(account) = account {
            filter.insert("account_id", account.as_str());
        }
        self.coll.find(filter).sort(doc! { "hour": 1 }).await?.try_collect().await
    }
}

/// The writer name of the totals that [`UsageTotals::fold`] makes: one document per account,
/// hour and group, holding what every writer had counted there.
pub const FOLDED_WRITER: &str = "folded";

impl UsageTotals {
    /// Folds writers' totals of hours before `until` into one document per account, hour and
    /// group (at most `limit` of them this call); how many it folded. Every process start is a
    /// writer of its own, so without this the totals grew by a document per process, hour and
    /// group, and every read (a budget's, every 2 s) read them all.
    ///
    /// The caller passes an `until` no later than the hour of the oldest prediction whose
    /// usage is still pending: nothing can then be added to a folded hour again (a batch is
    /// only ever added again while its predictions are pending), so a writer's `last_seq`
    /// guard is no longer needed there. Each document is folded on its own, twice-safe: its
    /// sums go into the folded total only where its id is not yet listed in that total's
    /// `folded`, in the same update that lists it (a second folder's repeat matches nothing,
    /// and its upsert is refused by the unique `_id`), and then it is deleted. Between the two
    /// writes a read counts it twice, for a moment, never less than once.
    pub async fn fold(&self, until: DateTime, limit: i64) -> Result<usize, StoreError> {
        let filter = doc! { "hour": { "$lt": until }, "folded": { "$exists": false } };
        let unfolded: Vec<UsageTotal> = self.coll.find(filter).limit(limit).await?.try_collect().await?;
        for total in &unfolded {
            self.fold_one(total).await?;
        }
        Ok(unfolded.len())
    }

    /// Folds one writer's `total` into its folded total, then deletes it (see [`Self::fold`]).
    pub async fn fold_one(&self, total: &UsageTotal) -> Result<(), StoreError> {
        let counted = Counted {
            account_id: total.account_id.clone(),
            hour: total.hour,
            group: total.group.clone(),
            succeeded: total.succeeded,
            failed: total.failed,
            canceled: total.canceled,
            predict_time: total.predict_time,
            total_time: total.total_time,
            cost: total.cost,
        };
        let group = bson::to_bson(&counted.group).map_err(|e| mongodb::error::Error::custom(e.to_string()))?;
        let update = doc! {
            "$inc": counted.increments(),
            "$push": { "folded": &total.id },
            "$setOnInsert": { "account_id": counted.account_id.as_str(), "hour": counted.hour, "group": group, "last_seq": 0_i64 },
        };
        let filter = doc! { "_id": counted.total_id(FOLDED_WRITER), "folded": { "$ne": &total.id } };
        match self.coll.update_one(filter, update).upsert(true).await {
            Ok(_) => {}
            Err(e) if is_duplicate_key(&e) => {}
            Err(e) => return Err(e),
        }
        self.coll.delete_one(doc! { "_id": &total.id }).await.map(drop)
    }

    /// What `account` spent on jobs that ended from `from` on (every writer's totals of those
    /// hours; an index on `{account_id, hour}` finds them).
    pub async fn spent_since(&self, account: &AccountId, from: DateTime) -> Result<Micros, StoreError> {
        let filter = doc! { "account_id": account.as_str(), "hour": { "$gte": from } };
        let costs = self.coll.clone_with_type::<bson::Document>();
        let found: Vec<bson::Document> =
            costs.find(filter).projection(doc! { "cost_micros": 1 }).await?.try_collect().await?;
        let cost =
            |d: &bson::Document| d.get("cost_micros").and_then(|c| c.as_i64().or_else(|| c.as_i32().map(i64::from)));
        Ok(found.iter().filter_map(cost).map(Micros).sum())
    }
}

/// The `_id` of `writer`'s total that `counted` goes into.
fn total_id(writer: &str, counted: &Counted) -> String {
    let g = &counted.group;
    let or_dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    format!(
        "{writer}|{}|{}|{}|{}|{}|{}|{}",
        counted.account_id,
        counted.hour.timestamp_millis(),
        g.model,
        or_dash(&g.deployment),
        or_dash(&g.hardware),
        or_dash(&g.api_key),
        g.kind
    )
}
