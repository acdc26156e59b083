//! The `queue_lanes` collection: a ticket counter per lane, so that a waiting prediction's
//! place in its lane costs one small document, however long the queue.
//!
//! A lane is what a runner takes turns between: one model's jobs of one route (version and
//! pool), one account and one priority level ([`Lane`], whose `store_key` is the document's
//! `_id`). Each new prediction takes the lane's next **ticket**
//! (`taken`, a counter) before it is stored, and keeps it (`Prediction::queue_ticket`); a busy
//! lane's tickets are taken in blocks, the rest given back shortly
//! ([`QueueLanes::return_unused`], see the api's ticket desk). Jobs
//! of a lane start in ticket order, so one mark says how far the lane has moved:
//! `started_through`, the highest ticket a runner has started (`$max`, so marks may arrive in
//! any order and twice). A prediction that leaves the lane without starting (canceled or
//! failed while waiting, or never stored after taking its ticket) is listed in `skipped`
//! until the lane moves past it. So the predictions of the lane waiting ahead of ticket `t`
//! are the tickets between `started_through` and `t` less the skipped ones among them
//! ([`LaneCounters::ahead_of`]), and the lane's waiting count is the same up to `taken`.
//!
//! What it gives up for its constant cost, each bounded and mended by the next start in the
//! lane (the `$max` moves past whatever was missed):
//! - a departure whose mark was lost (a process killed between the prediction's write and
//!   the lane's) counts as waiting until the lane moves past its ticket;
//! - a job started out of turn (redelivered after a runner died) moves the mark past tickets
//!   still waiting, which then stand first;
//! - the skipped list keeps the [`SKIPPED_KEPT`] newest entries.
//!
//! A lane that no longer moves keeps what it missed, so lanes are tended
//! ([`QueueLanes::idle_since`], by the runners' retention sweep): one whose counters were not
//! written for [`RECOUNT_IDLE`] (no create can still be taking a ticket of it) has them checked
//! against its predictions still waiting, and set right ([`recount`], [`QueueLanes::correct`])
//! unless written meanwhile; one that has no waiting prediction and was not written for
//! [`PRUNE_IDLE`] is removed ([`QueueLanes::remove_unused`]), so a model's lanes, read whole
//! for its queue's figures, are only those in use.

use bson::{Document, doc};
use futures::TryStreamExt;
use mongodb::{Collection, Database, options::ReturnDocument};
use serde::{Deserialize, Serialize};

use super::StoreError;
use crate::{
    domain::{ModelRef, Prediction, Priority},
    lane::Lane,
};

/// How often a runner writes the start marks it gathered: a lane's mark trails its starts by
/// up to this much (see the runner's `lane_marks`).
pub const START_MARK_INTERVAL: std::time::Duration = std::time::Duration::from_millis(250);

/// The most skipped tickets a lane keeps (the newest).
pub const SKIPPED_KEPT: i64 = 1_000;

/// How long a lane's counters go unwritten before they are checked against its predictions:
/// longer than any create may take a ticket and then store its prediction (a request's
/// deadline), so every ticket it gave out is stored or never will be.
pub const RECOUNT_IDLE: std::time::Duration = std::time::Duration::from_secs(120);

/// How long a lane with no waiting prediction goes unwritten before it is removed.
pub const PRUNE_IDLE: std::time::Duration = std::time::Duration::from_secs(3600);

/// What a lane can tell from another lane's stored counters.
impl Lane {
    /// Whether the lane of `counters` is of the same model, route and level, of another
    /// account: one the runners of this lane take turns with.
    pub fn shares_turns_with(&self, counters: &LaneCounters) -> bool {
        self.same_route(counters)
            && counters.priority == self.level
            && counters.account_id.as_str() != self.account.as_str()
    }

    /// Whether the lane of `counters` is of the same model and route at a higher level (of
    /// any account): its waiting jobs start before this lane's.
    pub fn ranks_below(&self, counters: &LaneCounters) -> bool {
        self.same_route(counters) && counters.priority.above(self.level)
    }

    fn same_route(&self, counters: &LaneCounters) -> bool {
        counters.model == self.model.to_string() && counters.route == self.route_key()
    }
}

/// A lane's counters as stored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LaneCounters {
    /// The lane ([`Lane::store_key`]).
    #[serde(rename = "_id")]
    pub id: String,
    /// Its model (`owner/name`).
    pub model: String,
    /// Its route: version and pool (`any` for none), `|` between.
    #[serde(default)]
    pub route: String,
    /// Its account.
    pub account_id: String,
    /// Its level (`normal` for lanes of before levels).
    #[serde(default)]
    pub priority: Priority,
    /// Tickets taken: the last one given out.
    pub taken: i64,
    /// The highest ticket started.
    #[serde(default)]
    pub started_through: i64,
    /// Tickets above `started_through` that left without starting.
    #[serde(default)]
    pub skipped: Vec<i64>,
    /// When a ticket of it was last taken, started or given back (none for lanes of before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub touched_at: Option<bson::DateTime>,
    /// When the runners' sweep last looked at it idle (none: never): the sweep takes the lanes
    /// it looked at longest ago first, so lanes that need nothing do not keep the others out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tended_at: Option<bson::DateTime>,
}

impl LaneCounters {
    /// The predictions of the lane waiting ahead of ticket `ticket`.
    pub fn ahead_of(&self, ticket: i64) -> u64 {
        let between = ticket - 1 - self.started_through;
        let skipped = self.skipped.iter().filter(|s| **s > self.started_through && **s < ticket).count();
        u64::try_from(between - i64::try_from(skipped).unwrap_or(i64::MAX)).unwrap_or(0)
    }

    /// The predictions of the lane waiting.
    pub fn waiting(&self) -> u64 {
        self.ahead_of(self.taken + 1)
    }
}

/// The counters (`started_through`, `skipped`) a lane read as `seen` should hold, given the
/// tickets of its predictions still waiting; `None` when its count of waiting is right. Only
/// tickets between its mark and `taken` count: one at or below the mark (passed by a job
/// started out of turn) stands first whatever the counters say.
pub fn recount(seen: &LaneCounters, waiting: &[i64]) -> Option<(i64, Vec<i64>)> {
    let mut waiting: Vec<i64> =
        waiting.iter().copied().filter(|t| *t > seen.started_through && *t <= seen.taken).collect();
    waiting.sort_unstable();
    waiting.dedup();
    if seen.waiting() == waiting.len() as u64 {
        return None;
    }
    let Some(first) = waiting.first() else { return Some((seen.taken, Vec::new())) };
    let mark = seen.started_through.max(first - 1);
    let mut skipped: Vec<i64> = (mark + 1..=seen.taken).filter(|t| waiting.binary_search(t).is_err()).collect();
    let excess = skipped.len().saturating_sub(usize::try_from(SKIPPED_KEPT).unwrap_or(usize::MAX));
    skipped.drain(..excess);
    Some((mark, skipped))
}

/// Typed access to the `queue_lanes` collection.
#[derive(Clone, Debug)]
pub struct QueueLanes {
    coll: Collection<LaneCounters>,
}

impl QueueLanes {
    pub(super) fn new(db: &Database) -> Self {
        Self { coll: db.collection("queue_lanes") }
    }

    /// Takes `count` tickets of `lane` at once; returns the first
    /// (the others follow it).
    pub async fn take(&self, lane: &Lane, count: u64) -> Result<i64, StoreError> {
        let count = i64::try_from(count).unwrap_or(i64::MAX);
        let after = self
            .coll
            .clone_with_type::<Document>()
            .find_one_and_update(
                doc! { "_id": lane.store_key() },
                doc! {
                    "$inc": { "taken": count },
                    "$set": { "touched_at": bson::DateTime::now() },
                    "$setOnInsert": {
                        "model": lane.model.to_string(), "route": lane.route_key(),
                        "account_id": lane.account.as_str(),
                        "priority": lane.level.as_str(), "started_through": 0_i64, "skipped": [],
                    },
                },
            )
            .upsert(true)
            .return_document(ReturnDocument::After)
            .projection(doc! { "taken": 1 })
            .await?;
        let taken = after.and_then(|d| super::integer(d.get("taken"))).unwrap_or(count);
        Ok(taken - count + 1)
    }

    /// Marks `ticket` of `lane` started: the lane has moved at least that far.
    pub async fn mark_started(&self, lane: &Lane, ticket: i64) -> Result<(), StoreError> {
        self.coll
            .update_one(
                doc! { "_id": lane.store_key() },
                doc! {
                    "$max": { "started_through": ticket },
                    "$pull": { "skipped": { "$lte": ticket } },
                    "$set": { "touched_at": bson::DateTime::now() },
                },
            )
            .await?;
        Ok(())
    }

    /// Marks `ticket` of `lane` gone without starting (unless the lane has moved past it).
    pub async fn skipped(&self, lane: &Lane, ticket: i64) -> Result<(), StoreError> {
        self.coll
            .update_one(
                doc! { "_id": lane.store_key(), "started_through": { "$lt": ticket } },
                doc! {
                    "$push": { "skipped": { "$each": [ticket], "$slice": -SKIPPED_KEPT } },
                    "$set": { "touched_at": bson::DateTime::now() },
                },
            )
            .await?;
        Ok(())
    }

    /// Gives back tickets `from..end` of `lane`, taken and never given to a prediction (a
    /// block the api's ticket desk held for creates that did not come): while they are still
    /// the lane's last tickets its counter goes back over them, so they will be taken again;
    /// otherwise they are listed as skipped, as a departure's ticket is.
    pub async fn return_unused(&self, lane: &Lane, from: i64, end: i64) -> Result<(), StoreError> {
        if end <= from {
            return Ok(());
        }
        let now = bson::DateTime::now();
        let rolled_back = self
            .coll
            .update_one(
                doc! { "_id": lane.store_key(), "taken": end - 1 },
                doc! { "$inc": { "taken": from - end }, "$set": { "touched_at": now } },
            )
            .await?;
        if rolled_back.matched_count == 0 {
            let tickets: Vec<i64> = (from..end).collect();
            self.coll
                .update_one(
                    doc! { "_id": lane.store_key(), "started_through": { "$lt": end - 1 } },
                    doc! {
                        "$push": { "skipped": { "$each": tickets, "$slice": -SKIPPED_KEPT } },
                        "$set": { "touched_at": now },
                    },
                )
                .await?;
        }
        Ok(())
    }

    /// Gives the ticket of `prediction`, which left its lane without starting (canceled or
    /// failed while waiting, or never stored), back to its lane ([`Self::skipped`]); a write
    /// that fails is logged, and mended by the lane's next start.
    pub async fn give_back(&self, prediction: &Prediction) {
        if let Some(ticket) = prediction.queue_ticket
            && let Err(e) = self.skipped(&Lane::of(prediction), ticket).await
        {
            tracing::warn!(prediction_id = %prediction.id, error = %e, "a ticket was not given back to its queue lane");
        }
    }

    /// The lane `lane`, if a ticket of it was ever taken.
    pub async fn get(&self, lane: &Lane) -> Result<Option<LaneCounters>, StoreError> {
        self.coll.find_one(doc! { "_id": lane.store_key() }).max_time(super::read_limit()).await
    }

    /// Up to `limit` lanes whose counters were not written since `before` (those of before
    /// lanes were timed too): those never tended first, then those tended longest ago
    /// ([`Self::mark_tended`]), each the longest idle first.
    pub async fn idle_since(&self, before: bson::DateTime, limit: i64) -> Result<Vec<LaneCounters>, StoreError> {
        let filter = doc! { "$or": [{ "touched_at": { "$lt": before } }, { "touched_at": null }] };
        self.coll
            .find(filter)
            .sort(doc! { "tended_at": 1, "touched_at": 1 })
            .limit(limit)
            .max_time(super::read_limit())
            .await?
            .try_collect()
            .await
    }

    /// Sets the counters of the lane read as `seen` to `started_through` and `skipped` (see
    /// [`recount`]), unless a ticket of it was taken, started or given back since; whether it did.
    pub async fn correct(
        &self,
        seen: &LaneCounters,
        started_through: i64,
        skipped: &[i64],
    ) -> Result<bool, StoreError> {
        let update = doc! { "$max": { "started_through": started_through }, "$set": { "skipped": skipped } };
        let done = self.coll.update_one(unchanged(seen), update).await?;
        Ok(done.modified_count == 1)
    }

    /// Removes the lane read as `seen` (no prediction of it waits), unless a ticket of it was
    /// taken, started or given back since; whether it did.
    pub async fn remove_unused(&self, seen: &LaneCounters) -> Result<bool, StoreError> {
        Ok(self.coll.delete_one(unchanged(seen)).await?.deleted_count == 1)
    }

    /// Notes that the sweep looked at the lanes `ids` now (one write for all of them).
    pub async fn mark_tended(&self, ids: &[&str]) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        let now = bson::DateTime::now();
        self.coll.update_many(doc! { "_id": { "$in": ids } }, doc! { "$set": { "tended_at": now } }).await.map(drop)
    }

    /// Every lane of `model`.
    pub async fn of_model(&self, model: &ModelRef) -> Result<Vec<LaneCounters>, StoreError> {
        self.coll.find(doc! { "model": model.to_string() }).max_time(super::read_limit()).await?.try_collect().await
    }
}

/// The lane read as `seen`, as long as none of its counters was written since.
fn unchanged(seen: &LaneCounters) -> Document {
    doc! {
        "_id": &seen.id,
        "taken": seen.taken,
        "started_through": seen.started_through,
        "touched_at": seen.touched_at.map_or(bson::Bson::Null, bson::Bson::DateTime),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane(taken: i64, started_through: i64, skipped: &[i64]) -> LaneCounters {
        LaneCounters { taken, started_through, skipped: skipped.to_vec(), ..Default::default() }
    }

    #[test]
    fn the_tickets_between_the_mark_and_a_prediction_wait_ahead_of_it() {
        assert_eq!(lane(10, 0, &[]).ahead_of(1), 0, "the first ticket waits behind nobody");
        assert_eq!(lane(10, 0, &[]).ahead_of(4), 3);
        assert_eq!(lane(10, 3, &[]).ahead_of(4), 0, "three started");
        assert_eq!(lane(10, 3, &[]).waiting(), 7);
    }

    #[test]
    fn skipped_tickets_ahead_do_not_count_and_those_behind_or_passed_do_not_matter() {
        let state = lane(10, 2, &[1, 4, 9]);
        assert_eq!(state.ahead_of(6), 2, "3 and 5; 4 left, 1 was passed");
        assert_eq!(state.ahead_of(4), 1, "3 only");
        assert_eq!(state.waiting(), 6, "3, 5, 6, 7, 8, 10");
    }

    #[test]
    fn a_recount_sets_the_counters_to_the_tickets_still_waiting() {
        assert_eq!(recount(&lane(10, 2, &[4, 9]), &[3, 5, 6, 7, 8, 10]), None, "right already");
        assert_eq!(recount(&lane(10, 2, &[]), &[]), Some((10, vec![])), "nothing waits: the lane moves to its end");
        let (mark, skipped) = recount(&lane(10, 2, &[]), &[6, 8]).expect("two wait, not eight");
        assert_eq!((mark, skipped.clone()), (5, vec![7, 9, 10]));
        let fixed = LaneCounters { started_through: mark, skipped, ..lane(10, 2, &[]) };
        assert_eq!((fixed.waiting(), fixed.ahead_of(8)), (2, 1));
        assert_eq!(recount(&lane(10, 5, &[]), &[1, 2]), Some((10, vec![])), "tickets passed already stand first");
    }

    #[test]
    fn a_recount_keeps_the_newest_skipped_tickets() {
        let (_, skipped) = recount(&lane(5_000, 0, &[]), &[1]).expect("one waits");
        assert_eq!(skipped.len(), SKIPPED_KEPT as usize);
        assert_eq!(skipped.last(), Some(&5_000));
    }

    #[test]
    fn a_mark_past_a_ticket_still_waiting_puts_it_first() {
        assert_eq!(lane(10, 8, &[]).ahead_of(5), 0, "started out of turn ahead of it");
    }
}
