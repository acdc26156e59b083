//! Usage per account: each ended prediction counted exactly once in running totals
//! ([`crate::store::usage`]), per hour of its `completed_at` and group (model, deployment,
//! hardware, API key, kind), without scanning predictions to answer.
//!
//! How a prediction is counted, with no transaction across the two collections:
//! 1. its final state is written with `usage.pending: true`, in the same write
//!    ([`mark_pending`]): an ended prediction always says whether it is counted;
//! 2. the writer's [`UsageLedger`] takes what ended within [`GATHER`] as one batch (up to
//!    [`MAX_BATCH`]), claims it under the writer's next number (`usage.writer`, `usage.seq`),
//!    adds its sums to the writer's own totals where their `last_seq` is below that number, and
//!    marks it counted: three writes or so per batch, not per prediction. One task per process
//!    does this, one batch at a time, so a writer's numbers reach its totals in order;
//! 3. a process killed between any two steps leaves `usage.pending`; the runners' sweep
//!    ([`UsageLedger::recover`]) takes predictions still pending [`RECOVER_AFTER`] after they
//!    ended: a claimed batch is added again, whole, under its writer and number (which its
//!    totals refuse where it was added), an unclaimed prediction goes through the sweeping
//!    process's own ledger.
//!
//! So a prediction whose job runs twice (its runner killed) ends once (the final write is
//! conditional) and is counted once; removing its data later leaves the totals as they are.

use std::time::Duration;

use bson::{DateTime, Document, doc};
use tokio::sync::mpsc;

use crate::{
    domain::{Prediction, PredictionId, ids::random_base32},
    store::{
        Predictions, Store, StoreError,
        predictions::PageMark,
        usage::{Counted, UsageGroup, UsageTotals, merged},
    },
};

/// How long after a prediction ended the sweep takes its still pending usage over.
pub const RECOVER_AFTER: Duration = Duration::from_secs(30);
/// The most ended predictions counted as one batch.
pub const MAX_BATCH: usize = 256;
/// How long the ledger gathers what ends after the first of a batch, so a busy process writes
/// a few batches a second rather than one per handful of predictions (three writes a batch:
/// batches of what had ended the moment before cost 0.2 writes and 20 µs of runner CPU a
/// prediction in the cost bench, 8 in flight).
pub const GATHER: Duration = Duration::from_millis(250);
/// How long after an hour ends its writers' totals are folded together (see
/// [`UsageLedger::fold_settled_hours`]).
pub const FOLD_AFTER: Duration = Duration::from_secs(2 * 3600);
/// The pause before a failed step is tried again.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Adds the pending usage mark to the changes of a prediction's final state.
pub fn mark_pending(changes: &mut Document) {
    changes.insert("usage", doc! { "pending": true });
}

/// What `ended` counts as; none for a prediction that has not ended.
pub fn counted(ended: &Prediction) -> Option<Counted> {
    let completed_at = ended.completed_at?;
    if !ended.status.is_terminal() {
        return None;
    }
    let millis = completed_at.timestamp_millis();
    let hour = DateTime::from_millis(millis - millis.rem_euclid(3_600_000));
    let metrics = ended.metrics.unwrap_or_default();
    // A prediction of a trained version counts under the model it names (the destination),
    // not the base that ran it; a training under the model it trained.
    let model = ended.trained_version.as_ref().map_or(&ended.model, |t| &t.model);
    let kind = match ended.kind {
        crate::domain::JobKind::Prediction => "prediction",
        crate::domain::JobKind::Training => "training",
    };
    let group = UsageGroup {
        model: model.to_string(),
        deployment: ended.deployment.clone(),
        // The pool it ran on; else (it never started) the pool its deployment asked for.
        hardware: ended.started_on.as_ref().map(|s| &s.pool).or(ended.hardware.as_ref()).map(|h| h.as_str().to_owned()),
        api_key: ended.api_key_id.as_ref().map(ToString::to_string),
        kind: kind.into(),
    };
    Some(Counted::one(ended.account_id.clone(), hour, group, ended.status, metrics))
}

/// A process's writer of usage totals.
#[derive(Clone, Debug)]
pub struct UsageLedger {
    ended: mpsc::UnboundedSender<Prediction>,
    predictions: Predictions,
    totals: UsageTotals,
}

impl UsageLedger {
    /// Starts the ledger of this process on `store`: a task that counts what [`Self::record`]
    /// sends, in order, until every handle is dropped.
    pub fn start(store: &Store) -> Self {
        let (ended, mut queue) = mpsc::unbounded_channel::<Prediction>();
        let (predictions, totals) = (store.predictions(), store.usage_totals());
        let writer = Writer {
            id: random_base32(16),
            next_seq: 1,
            predictions: predictions.clone(),
            totals: totals.clone(),
            store: store.clone(),
        };
        tokio::spawn(async move {
            let mut writer = writer;
            let mut batch = Vec::with_capacity(MAX_BATCH);
            while queue.recv_many(&mut batch, MAX_BATCH).await > 0 {
                let until = tokio::time::Instant::now() + GATHER;
                while batch.len() < MAX_BATCH {
                    let room = MAX_BATCH - batch.len();
                    match tokio::time::timeout_at(until, queue.recv_many(&mut batch, room)).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                }
                writer.count(&batch).await;
                batch.clear();
            }
        });
        Self { ended, predictions, totals }
    }

    /// Counts `ended`, whose final state was written with [`mark_pending`] (in the background;
    /// a prediction this process dies before counting is the sweep's).
    pub fn record(&self, ended: &Prediction) {
        if ended.status.is_terminal() && self.ended.send(ended.clone()).is_err() {
            tracing::warn!(prediction_id = %ended.id, "the usage ledger has stopped; the sweep counts this prediction");
        }
    }

    /// Counts the predictions whose usage is still pending [`RECOVER_AFTER`] after they ended,
    /// walking them in pages of `limit`; how many it looked at.
    pub async fn recover(&self, limit: i64) -> Result<usize, StoreError> {
        self.recover_ended_before(RECOVER_AFTER, limit).await
    }

    /// [`Self::recover`] of predictions that ended more than `ago` ago (tests). A batch that
    /// cannot be added is logged and passed over (the next sweep tries it again): it holds up
    /// neither the batches after it nor the rest of the walk. Only a page that cannot be read
    /// ends the walk early, with its error.
    pub async fn recover_ended_before(&self, ago: Duration, limit: i64) -> Result<usize, StoreError> {
        let ago = i64::try_from(ago.as_millis()).unwrap_or(i64::MAX);
        let before = DateTime::from_millis(DateTime::now().timestamp_millis().saturating_sub(ago));
        let mut seen = 0;
        let mut from = None;
        let mut done: Vec<(String, i64)> = Vec::new();
        loop {
            let pending = self.predictions.usage_pending_before(before, from.as_ref(), limit).await?;
            seen += pending.len();
            for prediction in &pending {
                match prediction.usage.as_ref().and_then(|u| Some((u.writer.clone()?, u.seq?))) {
                    Some(batch) if !done.contains(&batch) => {
                        if let Err(e) = self.add_again(&batch.0, batch.1).await {
                            tracing::warn!(writer = %batch.0, seq = batch.1, error = %e,
                                "a claimed usage batch was not added; the next sweep tries it again");
                        }
                        done.push(batch);
                    }
                    Some(_) => {}
                    None => self.record(prediction),
                }
            }
            from = PageMark::after_page(&pending, limit, |p| p.completed_at);
            if from.is_none() {
                break;
            }
        }
        if seen > 0 {
            tracing::info!(predictions = seen, "counted the usage of predictions whose writer did not");
        }
        Ok(seen)
    }

    /// Folds the writers' totals of settled hours (see [`UsageTotals::fold`]): hours that
    /// ended [`FOLD_AFTER`] ago or more, and before the oldest prediction whose usage is still
    /// pending; at most `limit` totals a call. How many it folded.
    pub async fn fold_settled_hours(&self, limit: i64) -> Result<usize, StoreError> {
        let hour_of = |millis: i64| millis - millis.rem_euclid(3_600_000);
        let settled = DateTime::now().timestamp_millis() - i64::try_from(FOLD_AFTER.as_millis()).unwrap_or(i64::MAX);
        let mut until = hour_of(settled);
        if let Some(oldest) = self.predictions.oldest_usage_pending().await? {
            until = until.min(hour_of(oldest.timestamp_millis()));
        }
        let folded = self.totals.fold(DateTime::from_millis(until), limit).await?;
        if folded > 0 {
            tracing::info!(folded, "usage totals of settled hours folded into one per account, hour and group");
        }
        Ok(folded)
    }

    /// Adds `writer`'s claimed batch `seq` again, whole (all of it still pending: it is marked
    /// counted only once added), so its totals take it exactly where they had not.
    async fn add_again(&self, writer: &str, seq: i64) -> Result<(), StoreError> {
        let batch = self.predictions.usage_pending_of(writer, seq).await?;
        for sum in merged(writer, batch.iter().filter_map(counted)) {
            self.totals.add(writer, seq, &sum).await?;
        }
        let ids: Vec<&PredictionId> = batch.iter().map(|p| &p.id).collect();
        self.predictions.usage_counted(&ids).await
    }
}

/// The task that counts a process's ended predictions, a batch at a time.
struct Writer {
    id: String,
    next_seq: i64,
    predictions: Predictions,
    totals: UsageTotals,
    /// For the budget notices of the accounts whose spending it adds.
    store: Store,
}

impl Writer {
    /// Claims, adds and marks `ended`, each step tried until it succeeds.
    async fn count(&mut self, ended: &[Prediction]) {
        let countable: Vec<&Prediction> = ended.iter().filter(|p| counted(p).is_some()).collect();
        if countable.is_empty() {
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let ids: Vec<&PredictionId> = countable.iter().map(|p| &p.id).collect();
        let (claimed, first_try) = retried("claim", || self.predictions.claim_usage(&ids, &self.id, seq)).await;
        // Those this writer claimed: all of them when the first claim says so. Otherwise the
        // sweep took some over meanwhile, or a claim whose answer was lost applied before the
        // one that answered (an `updateMany` is not retried by the driver, and sent again it
        // matches nothing): what this writer holds under `seq` is read, not guessed.
        let batch: Vec<Prediction> = if first_try && claimed as usize == ids.len() {
            countable.into_iter().cloned().collect()
        } else {
            retried("read the batch", || self.predictions.usage_pending_of(&self.id, seq)).await.0
        };
        if batch.is_empty() {
            return; // the sweep took them over, or they are counted
        }
        // Sent again after a lost answer, an add is refused by its own `last_seq`: each is
        // applied once.
        for sum in merged(&self.id, batch.iter().filter_map(counted)) {
            retried("add", || self.totals.add(&self.id, seq, &sum)).await;
        }
        let ids: Vec<&PredictionId> = batch.iter().map(|p| &p.id).collect();
        retried("mark counted", || self.predictions.usage_counted(&ids)).await;
        // The accounts whose spending grew: a threshold of a budget may have been crossed.
        let mut spenders: Vec<&crate::domain::AccountId> =
            batch.iter().filter(|p| p.metrics.is_some_and(|m| m.cost.0 > 0)).map(|p| &p.account_id).collect();
        spenders.sort();
        spenders.dedup();
        for account in spenders {
            if let Err(e) = crate::budget::raise_notices(&self.store, account).await {
                tracing::warn!(account = %account, error = %e, "budget thresholds not checked; the next costs check them again");
            }
        }
    }
}

/// `step` until it succeeds, pausing [`RETRY_PAUSE`] between failures; its value, and
/// whether the first try gave it (after a failure, an earlier try may have applied too).
async fn retried<T, F, Fut>(what: &str, mut step: F) -> (T, bool)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let mut first_try = true;
    loop {
        match step().await {
            Ok(value) => return (value, first_try),
            Err(e) => {
                tracing::warn!(step = what, error = %e, "counting usage failed; trying again");
                first_try = false;
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::PredictionStatus;

    #[test]
    fn an_ended_prediction_counts_in_the_hour_it_ended_and_a_running_one_not_at_all() {
        let mut p = Prediction::new_starting(crate::domain::NewPrediction {
            account_id: crate::domain::AccountId::generate(),
            model: "demo/echo".parse().expect("model"),
            version: "v1".into(),
            capability: "text-generation".into(),
            input: serde_json::json!({}),
            model_input: serde_json::json!({}),
            webhook: None,
            webhook_events_filter: None,
            surface: crate::domain::ApiSurface::Canonical,
        });
        assert_eq!(counted(&p), None);
        p.status = PredictionStatus::Succeeded;
        p.completed_at = Some(DateTime::from_millis(3 * 3_600_000 + 59 * 60_000));
        p.metrics = Some(crate::domain::Metrics { predict_time: 1.5, total_time: 2.0, cost: crate::domain::Micros(7) });
        let c = counted(&p).expect("ended");
        assert_eq!(c.hour, DateTime::from_millis(3 * 3_600_000));
        assert_eq!(c.group.model, p.model.to_string());
        assert_eq!(c.group.kind, "prediction");
        assert_eq!((c.succeeded, c.failed, c.canceled), (1, 0, 0));
        assert_eq!((c.predict_time, c.total_time), (1.5, 2.0));
        let mut failed = p.clone();
        failed.status = PredictionStatus::Failed;
        let sums = merged("w", [c.clone(), counted(&failed).expect("ended"), c]);
        assert_eq!(sums.len(), 1, "one total");
        assert_eq!((sums[0].succeeded, sums[0].failed, sums[0].predict_time), (2, 1, 4.5));

        let mut training = p.clone();
        training.kind = crate::domain::JobKind::Training;
        assert_eq!(counted(&training).expect("ended").group.kind, "training");
        let mut tuned = p.clone();
        tuned.trained_version = Some(crate::domain::TrainedVersionRef {
            model: "alice/tuned".parse().expect("model"),
            version: "t1".into(),
            weights: None,
        });
        assert_eq!(counted(&tuned).expect("ended").group.model, "alice/tuned", "the model it names");
    }
}
