//! The reconciler: every `RUNNER_RECONCILE_SECONDS`, on every runner, it repairs what a crash
//! or an outage can leave behind. Each repair is a conditional update or a de-duplicated
//! publish, so any number of runners may reconcile at once.
//!
//! - A prediction not ended [`GRACE`] after its deadline ends as its deadline says (fails with
//!   `PREDICTION_TIMEOUT`, or is canceled at a client's `Cancel-After`), and a cancel is
//!   broadcast in case a runner still holds it. This is also what ends a prediction
//!   whose job JetStream gave up on (a runner that died on its last delivery): no prediction
//!   stays `processing` forever.
//! - A prediction still `starting` [`ORPHAN_AFTER`] after creation whose job is not in the
//!   jobs stream (the api stored it but could not publish, and then died) gets its job
//!   republished.
//! - A prediction still `processing` [`ORPHAN_AFTER`] after creation whose job is not in the
//!   jobs stream, and whose runner is gone (its presence [`SILENT_FOR`] old or missing), is
//!   stranded: its result would never be written, and it would fail at its deadline. That is
//!   a job acknowledged by a runner that died before its result was stored, a jobs stream
//!   lost or purged, or a restore whose database copy is older than its streams' (see
//!   docs/operations.md, "Backing up and restoring"). It is given a new job, once
//!   ([`common::store::predictions::Predictions::mark_stranded`]): that job's delivery takes it over from the runner that
//!   held it and runs it again from the start, as after a crash. A second time, it is left to
//!   its deadline, so a model that takes its runner down runs at most once more.
//! - A prediction canceled through the api between [`ANNOUNCE_WITHIN`] and [`ORPHAN_AFTER`] ago
//!   whose `completed` event is not in the events stream (the api's publish failed, and no
//!   runner held its job to announce it) gets the event published: every terminal state
//!   produces its event, so its `completed` webhook goes out.
//!
//! The last three read [`BATCH`] predictions a pass, oldest first, each pass after where the
//! previous one ended ([`PageMark`]), back at the start once a pass reads fewer: a backlog of
//! waiting predictions (whose jobs exist) does not hide the orphans behind it.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use bson::DateTime;
use common::{
    bus::Bus,
    domain::Prediction,
    domain::WebhookEvent,
    messages::{Announcement, PredictionChanged},
    store::{Store, predictions::PageMark},
};

use crate::execute::holder::{self, SILENT_FOR};
use tokio_util::sync::CancellationToken;

use crate::{execute::Executor, models::ModelError, retention::ago};

/// How long past its deadline a prediction may be before the reconciler fails it (the runner
/// holding it normally does so itself, at the deadline).
pub const GRACE: Duration = Duration::from_secs(5);
/// How old a `starting` prediction must be before its job is looked for.
pub const ORPHAN_AFTER: Duration = Duration::from_secs(30);
/// How far back canceled predictions are checked for their `completed` event.
pub const ANNOUNCE_WITHIN: Duration = Duration::from_secs(15 * 60);
/// The most predictions one pass repairs of each kind.
const BATCH: i64 = 100;

/// What one pass repaired.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Repairs {
    /// Predictions ended at their deadline.
    pub timed_out: usize,
    /// Jobs republished.
    pub republished: usize,
    /// Stranded `processing` predictions given a new job.
    pub requeued: usize,
    /// `completed` events of canceled predictions published.
    pub announced: usize,
    /// Predictions whose repair failed (each logged; the next pass looks again).
    pub failed: usize,
}

impl Repairs {
    /// Counts a repair of `id` that failed, with `error`: logged and passed over, so it holds
    /// up no other.
    fn failed(&mut self, id: &common::domain::PredictionId, error: anyhow::Error) {
        self.failed += 1;
        tracing::warn!(prediction_id = %id, error = format!("{error:#}"), "a repair failed; the next pass looks again");
    }
}

/// The reconciler of one runner.
pub struct Reconciler {
    store: Store,
    bus: Bus,
    executor: Arc<Executor>,
    interval: Duration,
    /// Where the scan of `starting` predictions goes on from.
    orphans_from: Mutex<Option<PageMark>>,
    /// Where the scan of `processing` predictions goes on from.
    stranded_from: Mutex<Option<PageMark>>,
    /// Where the scan of canceled predictions goes on from.
    canceled_from: Mutex<Option<PageMark>>,
}

/// The mark a page leaves for the next: after its last prediction, or back at the start when
/// the page was not full.
fn next_mark(page: &[Prediction], at: impl Fn(&Prediction) -> Option<DateTime>) -> Option<PageMark> {
    PageMark::after_page(page, BATCH, at)
}

impl Reconciler {
    /// A reconciler running every `interval`.
    pub fn new(store: Store, bus: Bus, executor: Arc<Executor>, interval: Duration) -> Self {
        let (orphans_from, stranded_from, canceled_from) = (Mutex::new(None), Mutex::new(None), Mutex::new(None));
        Self { store, bus, executor, interval, orphans_from, stranded_from, canceled_from }
    }

    /// Runs passes until `shutdown` fires.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(self.interval) => {}
            }
            match self.pass().await {
                Ok(r) if r != Repairs::default() => tracing::info!(?r, "reconciler repaired predictions"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = format!("{e:#}"), "reconciler pass failed; trying again next time"),
            }
        }
    }

    /// One pass over overdue and orphaned predictions. A prediction whose repair fails is
    /// logged and passed over ([`Repairs::failed`]); only a page that cannot be read ends the
    /// pass early.
    pub async fn pass(&self) -> anyhow::Result<Repairs> {
        let mut repairs = Repairs::default();
        for p in self.store.predictions().overdue(ago(GRACE), BATCH).await? {
            match self.executor.fail(&p, ModelError::deadline(p.deadline_end())).await {
                Ok(Some(_)) => {
                    repairs.timed_out += 1;
                    if let Err(e) = self.bus.publish_cancel(&p.id).await {
                        tracing::warn!(prediction_id = %p.id, error = %e, "cancel broadcast failed");
                    }
                }
                Ok(None) => {}
                Err(e) => repairs.failed(&p.id, e),
            }
        }
        let from = self.orphans_from.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let orphans = self.store.predictions().starting_since_before(ago(ORPHAN_AFTER), from.as_ref(), BATCH).await?;
        *self.orphans_from.lock().unwrap_or_else(|p| p.into_inner()) = next_mark(&orphans, |p| Some(p.created_at));
        for p in orphans {
            let republished = async {
                if self.bus.job_exists(&p).await? {
                    return anyhow::Ok(false);
                }
                tracing::warn!(prediction_id = %p.id, "starting prediction without a job; republishing it");
                self.bus.publish_job(&p).await?;
                Ok(true)
            };
            match republished.await {
                Ok(done) => repairs.republished += usize::from(done),
                Err(e) => repairs.failed(&p.id, e),
            }
        }
        let from = self.stranded_from.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let processing =
            self.store.predictions().processing_since_before(ago(ORPHAN_AFTER), from.as_ref(), BATCH).await?;
        *self.stranded_from.lock().unwrap_or_else(|p| p.into_inner()) = next_mark(&processing, |p| Some(p.created_at));
        for p in processing {
            match self.requeue_if_stranded(&p).await {
                Ok(done) => repairs.requeued += usize::from(done),
                Err(e) => repairs.failed(&p.id, e),
            }
        }
        let predictions = self.store.predictions();
        let from = self.canceled_from.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let canceled =
            predictions.canceled_between(ago(ANNOUNCE_WITHIN), ago(ORPHAN_AFTER), from.as_ref(), BATCH).await?;
        *self.canceled_from.lock().unwrap_or_else(|p| p.into_inner()) = next_mark(&canceled, |p| p.completed_at);
        for p in canceled {
            let id = p.id.clone();
            let announced = async {
                if self.bus.completed_event_exists(&p).await? {
                    return anyhow::Ok(false);
                }
                tracing::warn!(prediction_id = %p.id, "canceled prediction without its completed event; publishing it");
                let event = PredictionChanged::of(&p, WebhookEvent::Completed, self.executor.links());
                self.bus.publish_event(event, Announcement::Again).await?;
                Ok(true)
            };
            match announced.await {
                Ok(done) => repairs.announced += usize::from(done),
                Err(e) => repairs.failed(&id, e),
            }
        }
        Ok(repairs)
    }

    /// Gives `p` (`processing`) a new job if it is stranded: no job in the stream, and its
    /// runner gone. Returns whether it did.
    async fn requeue_if_stranded(&self, p: &Prediction) -> anyhow::Result<bool> {
        if p.requeued_at.is_some() || self.bus.job_exists(p).await? {
            return Ok(false);
        }
        if let Some(holder) = p.held_by.as_deref()
            && let Some(seen) = self.store.runners().seen_at(holder).await?
            && holder::age(seen) < SILENT_FOR
        {
            // Its runner is alive: it runs it still, and stores its result.
            return Ok(false);
        }
        let predictions = self.store.predictions();
        if !predictions.mark_stranded(p, DateTime::now()).await? {
            return Ok(false);
        }
        tracing::warn!(prediction_id = %p.id, holder = ?p.held_by, "processing prediction whose job and runner are gone; giving it a new job");
        if let Err(e) = self.bus.publish_requeued_job(p).await {
            predictions.unmark_stranded(&p.id).await?;
            return Err(e.into());
        }
        Ok(true)
    }
}
