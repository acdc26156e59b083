//! Which job this runner starts next, and when: the one loop that turns free slots into
//! running jobs, over every lane of every served model (a lane is one model's jobs of one
//! account, a durable consumer of its own: see [`crate::lanes`]).
//!
//! **No idle slot while work waits.** Slots are taken only to start a job that is there: the
//! scheduler holds one free runner slot, picks a lane that may have work and whose model has a
//! free slot, and *fetches* from it, a request that answers at once with what is pending
//! (never a long poll). Each message fetched starts at once with its slots; an empty answer,
//! or fewer jobs than asked for, marks the lane empty and the next lane is tried. Nothing is
//! pulled ahead into a local buffer, so no job's ack wait runs out on this runner while another
//! runner has a free slot.
//!
//! **Knowing there is work** costs no polling while jobs flow: a published job rings its
//! lane's doorbell ([`Scheduler::ring`]). When a lane found empty is asked again (its
//! doorbell, a back-off while the scan of the jobs stream in [`crate::lanes`] still sees jobs
//! in it: jobs handed back with a delay, or left by a runner that died, come back without a
//! doorbell) and which lane goes first (fair share by model weight, then the account served
//! least recently) is the [`fair_pick`] module's, and so is priority: higher levels first,
//! with a lane aging one level up for each `PRIORITY_AGING_SECONDS` its oldest job waited
//! (how long that is, [`arrivals`] knows from the doorbells and each fetch's `pending`).
//!
//! **Accounts with a concurrency cap** take one of their slots on NATS before a job of theirs
//! is fetched ([`account_slots`]); a lane of an account at its cap is passed over until one of
//! its slots frees, so other accounts' jobs take the free runner slots meanwhile.

pub mod account_slots;
pub mod arrivals;
pub mod fair_pick;

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use async_nats::jetstream::{Message, consumer::PullConsumer};
use futures::StreamExt;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio_util::sync::CancellationToken;

use common::domain::{ModelRef, Pool};

use self::{
    account_slots::{AccountSlot, AccountSlots, Claim},
    fair_pick::{FairPick, Heard},
};
use crate::lanes::Lanes;
use common::lane::Lane;

/// The longest a stopping runner keeps starting the jobs its lanes already announced.
pub const DRAIN: Duration = Duration::from_secs(5);
/// How long to wait before opening a lane again after a fetch from it failed.
const FETCH_RETRY: Duration = Duration::from_millis(500);
/// The longest a fetch may take. It asks for what is pending and is answered within
/// milliseconds, but a pull request nobody answers (the lane's consumer lost its leader with a
/// cluster node, and the request went to it) is otherwise waited for forever: the scheduler,
/// and with it every free slot of the runner, stopped for good (the fault suite's stream-leader
/// scenario left 140 of 200 predictions stuck so). Jobs a timed-out fetch still brings are
/// redelivered after their ack wait. A fetch sent before a lost connection is given up at once
/// when the connection is made again (the server forgot its request).
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// The slots one job holds while it runs: one of the runner, one of its model, and one of its
/// account if the account is capped. Dropping them wakes the scheduler, which may be waiting
/// for exactly this model's slot (a freed account slot wakes it through the slots' watch).
pub struct Slots {
    _runner: OwnedSemaphorePermit,
    _model: OwnedSemaphorePermit,
    _account: Option<AccountSlot>,
    wake: Arc<Notify>,
}

impl Drop for Slots {
    fn drop(&mut self) {
        self.wake.notify_one();
    }
}

/// The scheduler of one runner: its slots, the fair pick over its lanes, and the opening of
/// lanes as their doorbells ring.
pub struct Scheduler {
    runner: Arc<Semaphore>,
    pick: FairPick<PullConsumer>,
    lanes: Arc<Lanes>,
    wake: Arc<Notify>,
    accounts: Option<Arc<AccountSlots>>,
    routes: Option<Routes>,
    /// Changes when the connection to NATS is made again ([`common::bus::Bus::reconnects`]).
    reconnects: Option<watch::Receiver<u64>>,
}

/// The version this runner serves of each model, and its pool: the lanes it takes.
struct Routes {
    versions: HashMap<ModelRef, String>,
    pool: Pool,
}

impl Scheduler {
    /// A scheduler of `concurrency` slots for `models`, each bounded by `model_concurrency`
    /// and weighted by `weights`, opening lanes through `lanes`.
    pub fn new(
        concurrency: usize,
        models: &[ModelRef],
        model_concurrency: usize,
        weights: &HashMap<ModelRef, u32>,
        lanes: Arc<Lanes>,
    ) -> Self {
        Self {
            runner: Arc::new(Semaphore::new(concurrency)),
            pick: FairPick::new(models, model_concurrency, weights),
            lanes,
            wake: Arc::new(Notify::new()),
            accounts: None,
            routes: None,
            reconnects: None,
        }
    }

    /// Gives each model in `slots` that many slots instead of the default (a Cog project's
    /// `concurrency.max`).
    pub fn with_model_slots(mut self, slots: &HashMap<ModelRef, usize>) -> Self {
        self.pick = self.pick.with_model_slots(slots);
        self
    }

    /// Lifts a lane one level for each `aging` its oldest job waited (default
    /// [`fair_pick::DEFAULT_AGING`]).
    pub fn with_aging(mut self, aging: Duration) -> Self {
        self.pick = self.pick.with_aging(aging);
        self
    }

    /// Gives up a fetch in flight when `reconnects` changes: its request was lost with the
    /// connection, and would otherwise hold the lane for [`FETCH_TIMEOUT`].
    pub fn with_reconnects(mut self, reconnects: watch::Receiver<u64>) -> Self {
        self.reconnects = Some(reconnects);
        self
    }

    /// Takes only the lanes of `versions` (one per model) for any pool or `pool`; without it,
    /// every lane of the models.
    pub fn with_routes(mut self, versions: HashMap<ModelRef, String>, pool: Pool) -> Self {
        self.routes = Some(Routes { versions, pool });
        self
    }

    /// Whether the lane's jobs are this runner's: of a served model, and (when this runner
    /// serves set versions) of the version and pool served here.
    fn serves(&self, key: &Lane) -> bool {
        if !self.pick.serves(key) {
            return false;
        }
        let route = &key.route;
        self.routes.as_ref().is_none_or(|routes| {
            routes.versions.get(&key.model) == Some(&route.version)
                && route.pool.as_ref().is_none_or(|pool| pool == &routes.pool || pool.is_trainers())
        })
    }

    /// Also takes the trainings of `trainers` (models with a trainer here), on slots of
    /// their own (see [`fair_pick`]).
    pub fn with_trainers(mut self, trainers: &[ModelRef]) -> Self {
        self.pick = self.pick.with_trainers(trainers);
        self
    }

    /// Caps accounts with `slots` (built on [`Self::waker`]).
    pub fn with_account_slots(mut self, slots: Arc<AccountSlots>) -> Self {
        self.accounts = Some(slots);
        self
    }

    /// What wakes the loop when a slot frees.
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// Whether a lane's account is at its cap.
    fn account_full(&self, key: &Lane) -> bool {
        self.accounts.as_ref().is_some_and(|slots| slots.is_full(&key.account))
    }

    /// Records what a scan begun at `scanned_at` found in `model`'s lanes (see
    /// [`FairPick::scanned`]).
    pub fn scanned(&self, model: &ModelRef, with_jobs: &[Lane], scanned_at: Instant) {
        self.pick.scanned(model, with_jobs, scanned_at);
    }

    /// A job of `key` is waiting (`heard` by its doorbell or the scan): opens its lane if it
    /// is new, marks it, and wakes the loop.
    pub async fn ring(&self, key: Lane, heard: Heard) {
        if !self.serves(&key) {
            return;
        }
        tracing::trace!(model = %key.model, account = %key.account, level = %key.level, "doorbell");
        if !self.pick.ring(&key, heard) {
            match self.lanes.open(&key).await {
                Ok(consumer) => {
                    if self.pick.add(key.clone(), consumer) {
                        tracing::debug!(model = %key.model, account = %key.account, level = %key.level, "lane opened");
                    }
                    self.pick.ring(&key, heard);
                }
                Err(e) => {
                    tracing::warn!(model = %key.model, error = format!("{e:#}"), "lane not opened; the next scan retries");
                    return;
                }
            }
        }
        self.wake.notify_one();
    }

    /// Starts jobs until `shutdown` fires: `start` is called with each message fetched, the
    /// lane it came from, and the slots it holds until it ends. Then drains: the jobs its lanes
    /// already announced still start, for at most [`DRAIN`], until no lane may have work (no
    /// doorbell rings any more), so a version whose last runner stops leaves no job behind
    /// that was published before it began to stop.
    pub async fn run(&self, shutdown: CancellationToken, start: impl Fn(Message, &Lane, Slots)) {
        self.turn(shutdown.cancelled(), false, &start).await;
        let drained = self.turn(tokio::time::sleep(DRAIN), true, &start).await;
        tracing::info!(jobs = drained, "stopped taking jobs");
    }

    /// Starts jobs until `stop` completes, or, `draining`, until no lane may have work;
    /// returns how many it started.
    async fn turn(
        &self,
        stop: impl Future<Output = ()>,
        draining: bool,
        start: &impl Fn(Message, &Lane, Slots),
    ) -> usize {
        tokio::pin!(stop);
        let mut total = 0;
        loop {
            let held = tokio::select! {
                () = &mut stop => return total,
                permit = self.runner.clone().acquire_owned() => match permit {
                    Ok(p) => p,
                    Err(_) => return total,
                },
            };
            let now = Instant::now();
            let Some((key, consumer, most)) = self.pick.pick(now, |key| self.account_full(key)) else {
                drop(held);
                if draining {
                    return total;
                }
                self.pick.forget(None, now);
                tokio::select! {
                    () = &mut stop => return total,
                    () = self.wake.notified() => {}
                    () = tokio::time::sleep(self.pick.next_recheck(now)) => {}
                }
                continue;
            };
            let fetched = if draining {
                // The drain's end bounds its last fetch too: jobs a cut-short fetch would have
                // brought are redelivered after their ack wait.
                tokio::select! {
                    fetched = self.fetch(&key, &consumer, most, held, start) => fetched,
                    () = &mut stop => return total,
                }
            } else {
                self.fetch(&key, &consumer, most, held, start).await
            };
            match fetched {
                // Nothing asked: the lane's account had no free slot; the lane is passed over
                // until one frees, not marked empty.
                Ok((0, _)) => {}
                Ok((asked, started)) => {
                    tracing::trace!(model = %key.model, account = %key.account, asked, started, "fetched");
                    total += started;
                    self.pick.mark(&key, asked, started, Instant::now());
                }
                Err(e) => {
                    // The lane is dropped (its consumer may be gone) and opened again after a
                    // pause: doorbells that rang while the fetch was out are not lost with it.
                    tracing::warn!(model = %key.model, account = %key.account, error = %e, "fetching jobs failed; opening the lane again");
                    self.pick.forget(Some(&key), Instant::now());
                    if draining {
                        return total;
                    }
                    self.lanes.reset(&key).await;
                    tokio::select! {
                        () = &mut stop => return total,
                        () = tokio::time::sleep(FETCH_RETRY) => {}
                    }
                    self.ring(key, Heard::Scan).await;
                }
            }
        }
    }

    /// Fetches up to `most` jobs of `key`, as many as there are free slots, and starts each;
    /// returns how many were asked for and how many there were.
    async fn fetch(
        &self,
        key: &Lane,
        consumer: &PullConsumer,
        most: usize,
        held: OwnedSemaphorePermit,
        start: &impl Fn(Message, &Lane, Slots),
    ) -> Result<(usize, usize), async_nats::Error> {
        let mut account_slots = match &self.accounts {
            // A capped account's slots are taken for the jobs its doorbells announced, not for
            // all `most` a fetch may ask for: a slot taken for a job that is not there costs a
            // create and a delete (asking 8 for a lone job made it 3 ms slower), and one job
            // per fetch under load costs a fetch per job (runner CPU per job tripled).
            Some(slots) => match slots.claim(&key.account, most.min(self.pick.announced(key))).await {
                Claim::Unlimited => None,
                Claim::Capped(taken) => Some(taken),
            },
            None => None,
        };
        let most = account_slots.as_ref().map_or(most, Vec::len);
        let mut slots = Vec::new();
        let mut runner_permit = Some(held);
        while slots.len() < most {
            let Some(runner) = runner_permit.take().or_else(|| self.runner.clone().try_acquire_owned().ok()) else {
                break;
            };
            let Some(model) = self.pick.model_slot(key) else { break };
            let account = account_slots.as_mut().and_then(Vec::pop);
            slots.push(Slots { _runner: runner, _model: model, _account: account, wake: self.wake.clone() });
        }
        let asked = slots.len();
        if asked == 0 {
            return Ok((0, 0));
        }
        let mut started = 0;
        let mut reconnects = self.reconnects.clone();
        if let Some(reconnects) = &mut reconnects {
            reconnects.mark_unchanged();
        }
        let reconnected = async {
            if let Some(reconnects) = &mut reconnects
                && reconnects.changed().await.is_ok()
            {
                return;
            }
            std::future::pending().await
        };
        let fetch = tokio::time::timeout(FETCH_TIMEOUT, async {
            let mut batch = consumer.fetch().max_messages(asked).messages().await?;
            while let Some(message) = batch.next().await {
                let message = message?;
                let Some(slot) = slots.pop() else { break };
                if let Ok(info) = message.info() {
                    self.pick.left(key, info.pending, published_at(info.published.unix_timestamp_nanos()));
                }
                start(message, key, slot);
                started += 1;
            }
            Ok::<_, async_nats::Error>(())
        });
        let fetched = tokio::select! {
            fetched = fetch => fetched,
            () = reconnected => Ok(Err("connected to NATS again while fetching".into())),
        };
        match fetched {
            Ok(Ok(())) => Ok((asked, started)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(format!("no answer within {FETCH_TIMEOUT:?} ({started} of {asked} jobs came)").into()),
        }
    }
}

/// The instant a message published at `unix_nanos` (the server's clock) corresponds to here,
/// if the clocks allow it.
fn published_at(unix_nanos: i128) -> Option<Instant> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos();
    let age = i128::try_from(now).ok()?.checked_sub(unix_nanos)?.max(0);
    Instant::now().checked_sub(Duration::from_nanos(u64::try_from(age).ok()?))
}
