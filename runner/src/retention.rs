//! Retention: `RETENTION_SECONDS` (1 hour by default) after a prediction ended, its input,
//! output, logs and files are deleted and `data_removed` becomes `true`. Every runner sweeps,
//! in batches of [`BATCH`]; the update is conditional on `data_removed` still being false, so
//! sweepers never trip over each other. Files go first: a crash between the two steps leaves
//! a prediction that the next pass finishes, never a file that nothing points to.
//!
//! The usage of predictions whose writer died before counting it is counted here too
//! ([`UsageLedger::recover`]).
//!
//! Uploads cut off mid-write (a killed process) are swept here too, once they are older than
//! the upload timeout: [`Files::sweep_unfinished`] removes their partial bytes from the store.
//!
//! Uploads of the Files API expire at their `expires_at` (`FILES_RETENTION_HOURS` after the
//! upload) and the same passes delete them, bytes first, then record. A file that a prediction
//! which has not ended names in its input is kept: its expiry moves [`IN_USE_GRACE`] on, and a
//! later pass looks again. A file a trained version names as its weights is kept for good (its
//! expiry removed): weights are stored expiring and kept once their version is recorded (see
//! `crate::execute::training`), and a version's delete lets them expire before it removes the
//! version, so whichever of those steps failed, the weights end kept or removed with their
//! version.
//!
//! Queue lanes are tended here too ([`Sweeper::tend_lanes`]): one left idle has its counters
//! checked against its predictions still waiting (a ticket whose give-back was lost counts no
//! more), and one nothing waits in is removed after an hour unused (see
//! `common::store::queue_lanes`).
//!
//! Each sweep walks all it has to do in pages of [`BATCH`], and an item that fails (a file the
//! object store will not delete, say) is logged and passed over, tried again by the next pass:
//! it holds up neither the items after it nor the other sweeps.

use std::{collections::HashMap, time::Duration};

use bson::DateTime;
use common::{
    domain::{AccountId, ModelRef},
    files::Files,
    store::{
        Store,
        predictions::PageMark,
        queue_lanes::{self, LaneCounters},
    },
    usage::UsageLedger,
};
use tokio_util::sync::CancellationToken;

/// The size of a page each sweep reads.
pub const BATCH: i64 = 100;
/// How far an expired file still in use as an input, or one that could not be deleted, is
/// postponed.
pub const IN_USE_GRACE: Duration = Duration::from_secs(600);

/// The most idle lanes one pass tends (those looked at longest ago first).
pub const LANES_PER_PASS: i64 = 1_000;

/// The time `d` ago (the reconciler's scans use it too).
pub(crate) fn ago(d: Duration) -> DateTime {
    DateTime::from_millis(
        DateTime::now().timestamp_millis().saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
    )
}

/// What one pass did: items done and items that failed (each logged), over every sweep.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Items cleared, swept, counted or postponed.
    pub done: usize,
    /// Items that failed, and sweeps that could not read what they had to do.
    pub failed: usize,
}

impl Swept {
    fn add(&mut self, other: Swept) {
        self.done += other.done;
        self.failed += other.failed;
    }

    fn one(&mut self, result: anyhow::Result<()>, what: &str) {
        match result {
            Ok(()) => self.done += 1,
            Err(e) => {
                self.failed += 1;
                tracing::warn!(error = format!("{e:#}"), "{what} failed; the next pass tries it again");
            }
        }
    }
}

/// The retention sweeper of one runner.
pub struct Sweeper {
    store: Store,
    files: Files,
    usage: Option<UsageLedger>,
    retention: Duration,
    interval: Duration,
    lanes_per_pass: i64,
}

impl Sweeper {
    /// A sweeper clearing data `retention` after completion, every `interval`.
    pub fn new(store: Store, files: Files, retention: Duration, interval: Duration) -> Self {
        Self { store, files, usage: None, retention, interval, lanes_per_pass: LANES_PER_PASS }
    }

    /// Tends at most `n` idle lanes a pass instead of [`LANES_PER_PASS`] (tests).
    pub fn with_lanes_per_pass(mut self, n: i64) -> Self {
        self.lanes_per_pass = n;
        self
    }

    /// Also counts the usage of predictions whose writer died before counting it.
    pub fn with_usage(mut self, usage: UsageLedger) -> Self {
        self.usage = Some(usage);
        self
    }

    /// Sweeps until `shutdown` fires.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(self.interval) => {}
            }
            let swept = self.pass().await;
            if swept.failed > 0 {
                tracing::warn!(done = swept.done, failed = swept.failed, "retention pass left items for the next");
            } else if swept.done > 0 {
                tracing::info!(done = swept.done, "retention pass done");
            }
        }
    }

    /// One pass of every sweep, each walking all it has to do.
    pub async fn pass(&self) -> Swept {
        let mut swept = Swept::default();
        swept.add(self.clear_data().await);
        match self.files.sweep_unfinished(BATCH).await {
            Ok(n) => swept.done += n,
            Err(e) => swept.one(Err(e.into()), "the sweep of unfinished uploads"),
        }
        if let Some(usage) = &self.usage {
            match usage.recover(BATCH).await {
                Ok(n) => swept.done += n,
                Err(e) => swept.one(Err(e.into()), "the usage sweep"),
            }
            // After the recovery: what it counted is no longer pending, so more hours settle.
            match usage.fold_settled_hours(BATCH).await {
                Ok(n) => swept.done += n,
                Err(e) => swept.one(Err(e.into()), "the fold of settled usage totals"),
            }
        }
        swept.add(self.expire_files(&self.files).await);
        swept.add(self.tend_lanes().await);
        swept
    }

    /// Tends the lanes left idle for [`queue_lanes::RECOUNT_IDLE`]: removes those nothing waits
    /// in once unused for [`queue_lanes::PRUNE_IDLE`], and sets right the counters of the
    /// others where they miscount their waiting predictions (each write only if the lane was
    /// not written meanwhile).
    pub async fn tend_lanes(&self) -> Swept {
        let lanes = self.store.queue_lanes();
        let mut swept = Swept::default();
        let idle = match lanes.idle_since(ago(queue_lanes::RECOUNT_IDLE), self.lanes_per_pass).await {
            Ok(idle) => idle,
            Err(e) => {
                swept.one(Err(e.into()), "reading the idle queue lanes");
                return swept;
            }
        };
        let unused_before = ago(queue_lanes::PRUNE_IDLE);
        let mut waiting_of: HashMap<(String, String), Vec<(common::lane::Lane, i64)>> = HashMap::new();
        for lane in &idle {
            let tended = async {
                let (Ok(model), Ok(account)) = (lane.model.parse::<ModelRef>(), AccountId::parse(&lane.account_id))
                else {
                    return anyhow::Ok(());
                };
                let key = (lane.account_id.clone(), lane.model.clone());
                if !waiting_of.contains_key(&key) {
                    let found = self.store.predictions().waiting_tickets(&account, &model).await?;
                    waiting_of.insert(key.clone(), found);
                }
                let waiting: Vec<i64> =
                    waiting_of[&key].iter().filter(|(of, _)| of.store_key() == lane.id).map(|(_, t)| *t).collect();
                self.tend_lane(lane, &waiting, unused_before).await
            };
            swept.one(tended.await, &format!("tending queue lane {}", lane.id));
        }
        // Looked at, whatever came of it: the next pass takes the lanes looked at longest ago,
        // so more than a pass's worth of lanes that need nothing (a version no runner serves,
        // its predictions waiting) never keep the others from their turn.
        let ids: Vec<&str> = idle.iter().map(|lane| lane.id.as_str()).collect();
        swept.one(lanes.mark_tended(&ids).await.map_err(Into::into), "noting the queue lanes tended");
        swept
    }

    /// Tends one idle lane, whose predictions still waiting hold tickets `waiting`.
    async fn tend_lane(&self, lane: &LaneCounters, waiting: &[i64], unused_before: DateTime) -> anyhow::Result<()> {
        let lanes = self.store.queue_lanes();
        if waiting.is_empty() && lane.touched_at.is_none_or(|at| at < unused_before) {
            if lanes.remove_unused(lane).await? {
                tracing::info!(lane = %lane.id, "removed a queue lane unused for an hour");
            }
        } else if let Some((mark, skipped)) = queue_lanes::recount(lane, waiting)
            && lanes.correct(lane, mark, &skipped).await?
        {
            tracing::warn!(lane = %lane.id, counted = lane.waiting(), waiting = waiting.len(),
                "a queue lane's counters missed tickets that left it; set right");
        }
        Ok(())
    }

    /// Deletes the files, then the data, of every prediction that ended more than the
    /// retention ago: files first, so a crash between the two leaves a prediction the next
    /// pass finishes, never a file that nothing points to.
    async fn clear_data(&self) -> Swept {
        let before = ago(self.retention);
        let mut swept = Swept::default();
        let mut from = None;
        loop {
            let page = match self.store.predictions().data_expired(before, from.as_ref(), BATCH).await {
                Ok(page) => page,
                Err(e) => {
                    swept.one(Err(e.into()), "reading the predictions whose data expired");
                    return swept;
                }
            };
            for p in &page {
                let cleared = async {
                    self.files.delete_outputs_of(&p.id).await?;
                    self.store.predictions().remove_data(&p.id).await?;
                    Ok(())
                };
                swept.one(cleared.await, &format!("clearing the data of {}", p.id));
            }
            from = PageMark::after_page(&page, BATCH, |p| p.completed_at);
            if from.is_none() {
                return swept;
            }
        }
    }

    /// Deletes every expired upload, postponing those still in use (and those it could not
    /// delete, which go behind the others).
    pub async fn expire_files(&self, files: &Files) -> Swept {
        let now = DateTime::now();
        let grace = i64::try_from(IN_USE_GRACE.as_millis()).unwrap_or(i64::MAX);
        let later = DateTime::from_millis(now.timestamp_millis().saturating_add(grace));
        let mut swept = Swept::default();
        loop {
            let expired = match files.records().expired(now, BATCH).await {
                Ok(expired) => expired,
                Err(e) => {
                    swept.one(Err(e.into()), "reading the expired files");
                    return swept;
                }
            };
            let mut moved = 0;
            for file in &expired {
                let done = async {
                    if self.store.model_versions().names_weights(&file.id).await? {
                        // Weights whose version is recorded: kept for good.
                        files.records().keep(&file.id).await?;
                    } else if self.store.predictions().file_in_use(&file.id).await? {
                        files.records().postpone(&file.id, later).await?;
                    } else {
                        files.delete(&file.id).await?;
                    }
                    anyhow::Ok(())
                };
                match done.await {
                    Ok(()) => {
                        moved += 1;
                        swept.done += 1;
                    }
                    Err(e) => {
                        swept.one(Err(e), &format!("expiring file {}", file.id));
                        // Behind the others, so the next page does not read it again.
                        if files.records().postpone(&file.id, later).await.is_ok() {
                            moved += 1;
                        }
                    }
                }
            }
            if !expired.is_empty() {
                tracing::info!(files = expired.len(), "retention looked at expired files");
            }
            // A short page was the last; a page where nothing moved would be read again.
            if expired.len() < usize::try_from(BATCH).unwrap_or(usize::MAX) || moved == 0 {
                return swept;
            }
        }
    }
}
