//! Which job this runner starts next, and when: the one loop that turns free slots into
//! running jobs, over every lane of every served model (a lane is one model's jobs of one
//! account, a durable consumer of its own: see [`crate::lanes`]).
//!
//! **No idle slot while work waits.** Slots are taken only to start a job that is there: the
//! scheduler holds one free runner slot, picks a lane that may have work and whose model has a
//! free slot, and *fetches* from it, a request that answers at once with what is pending
//! (never a long poll). Each message fetched starts at once with its slots; an empty answer,
//! or fewer jobs than asked for, marks the lane empty and the next lane is tried. (Before, a
//! lane was asked again after every job, and re-asked within milliseconds four times after
//! its doorbell: six fetches per job at 50 jobs/s, 15 context switches and 1.8 ms of the
//! runner's CPU per prediction.) Nothing is pulled ahead into a local
//! buffer, so no job's ack wait runs out on this runner while another runner has a free slot.
//!
//! (Before, each model's loop took every free slot it could and then held them through a 2 s
//! long poll: the loops of idle models sat on the runner's slots while the busy model waited.
//! Eight one-second `demo/sleep` jobs on the default model set started 1.0, 3.0, 4.0, 5.0,
//! 6.0, 7.0, 8.0 and 9.0 s after creation: one at a time.)
//!
//! **Knowing there is work** costs no polling while jobs flow: a published job rings its
//! lane's doorbell ([`Scheduler::ring`]). A lane found empty is asked again when its doorbell
//! rings, or after a back-off from 1 s to [`MAX_RECHECK`] (jobs handed back with a delay, or
//! left by a runner that died, come back without a doorbell) while the scan of the jobs stream
//! ([`crate::lanes`]) still sees jobs in it; a lane the scan sees empty is left dormant until a
//! job rings it, and one empty for [`FORGET_AFTER`] is dropped.
//!
//! **Fair share.** Of the lanes that may have work, the one whose model holds the smallest
//! share of slots for its weight (`running / weight`, `RUNNER_MODEL_WEIGHTS`, default 1 each)
//! goes first, so a flood of one model cannot keep another from its next free slot. Among the
//! lanes of that model, the one served least recently goes first, and while several lanes of a
//! model have work a fetch takes one job, so one account's backlog gets one turn in as many as
//! there are accounts waiting. `RUNNER_MODEL_CONCURRENCY` still bounds each model.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use async_nats::jetstream::{Message, consumer::PullConsumer};
use futures::StreamExt;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use common::domain::ModelRef;

use crate::lanes::{LaneKey, Lanes};

/// The longest a lane found empty is left alone unless its doorbell rings (while the last
/// scan saw jobs in it: they run elsewhere, and come back here if their runner dies).
pub const MAX_RECHECK: Duration = Duration::from_secs(4);
/// How long a lane found empty waits first; each empty answer in a row doubles it.
const FIRST_RECHECK: Duration = Duration::from_secs(1);
/// A doorbell can ring before the stream lets the job be fetched (the core-NATS copy of the
/// publish arrives as the stream stores it), so a lane found empty this soon after its
/// doorbell rang is asked again within milliseconds, not after [`FIRST_RECHECK`]. Measured
/// before: 1–2 % of one-at-a-time predictions started a whole second late.
const RING_SETTLE: Duration = Duration::from_millis(100);
/// Quick re-asks of a lane found empty just after its doorbell (after 2, 4, 8 and 16 ms).
const SETTLE_TRIES: u32 = 4;
/// A lane found empty for this long is dropped (until its doorbell rings again).
pub const FORGET_AFTER: Duration = Duration::from_secs(600);
/// The most jobs one fetch asks for (each needs a free slot of the runner and of its model).
const MAX_FETCH: usize = 8;
/// How long to wait before trying again after a fetch failed.
const FETCH_RETRY: Duration = Duration::from_millis(500);
/// The longest a fetch may take. It asks for what is pending and is answered within
/// milliseconds, but a pull request nobody answers (the lane's consumer lost its leader with a
/// cluster node, and the request went to it) is otherwise waited for forever: the scheduler,
/// and with it every free slot of the runner, stopped for good (the fault suite's stream-leader
/// scenario left 140 of 200 predictions stuck so). Jobs a timed-out fetch still brings are
/// redelivered after their ack wait.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// The slots of one model on this runner.
struct ModelSlots {
    limit: usize,
    free: Arc<Semaphore>,
    weight: u32,
}

impl ModelSlots {
    fn running(&self) -> usize {
        self.limit - self.free.available_permits()
    }
}

/// What the scheduler knows of one lane.
#[derive(Debug, Clone, Copy)]
struct LaneState {
    /// The last scan saw no job in it, and nothing rang it since: asked again only when its
    /// doorbell rings or a scan sees a job.
    dormant: bool,
    /// When its doorbell last rang.
    rung_at: Option<Instant>,
    /// When it was last found empty; `None` while it may have work.
    checked_empty: Option<Instant>,
    /// When the current run of empty answers began.
    empty_since: Option<Instant>,
    /// Empty answers in a row.
    empty_streak: u32,
    /// Empty answers in a row that came just after its doorbell rang (see [`RING_SETTLE`]).
    settling: u32,
    /// Doorbells rung since the jobs fetched made up for them: a job announced but not yet
    /// fetched. Only then is an empty answer worth a quick re-ask.
    unanswered_rings: u32,
    /// When a job of it last started (ties go to the least recent).
    last_served: u64,
}

impl LaneState {
    fn new() -> Self {
        Self {
            dormant: false,
            rung_at: None,
            checked_empty: None,
            empty_since: None,
            empty_streak: 0,
            settling: 0,
            unanswered_rings: 0,
            last_served: 0,
        }
    }

    fn recheck_after(&self) -> Duration {
        if self.settling > 0 {
            return Duration::from_millis(1 << self.settling);
        }
        FIRST_RECHECK.saturating_mul(1 << self.empty_streak.saturating_sub(1).min(8)).min(MAX_RECHECK)
    }

    fn may_have_work(&self, now: Instant) -> bool {
        !self.dormant && self.checked_empty.is_none_or(|at| now.duration_since(at) >= self.recheck_after())
    }

    fn has_work(&mut self) {
        self.dormant = false;
        self.checked_empty = None;
        self.empty_since = None;
        self.empty_streak = 0;
        self.settling = 0;
    }
}

struct Entry<T> {
    key: LaneKey,
    state: LaneState,
    lane: T,
}

/// The fair choice of the next lane, over lanes of any payload `T` (a consumer, in the
/// runner), so the policy can be tested on its own.
pub struct FairPick<T> {
    models: HashMap<ModelRef, ModelSlots>,
    lanes: Mutex<Vec<Entry<T>>>,
    served: AtomicU64,
}

impl<T: Clone> FairPick<T> {
    /// No lanes yet; each of `models` bounded by `model_concurrency` and weighted by `weights`
    /// (1 when absent).
    pub fn new(models: &[ModelRef], model_concurrency: usize, weights: &HashMap<ModelRef, u32>) -> Self {
        let models = models
            .iter()
            .map(|model| {
                let weight = weights.get(model).copied().unwrap_or(1).max(1);
                let free = Arc::new(Semaphore::new(model_concurrency));
                (model.clone(), ModelSlots { limit: model_concurrency, free, weight })
            })
            .collect();
        Self { models, lanes: Mutex::new(Vec::new()), served: AtomicU64::new(0) }
    }

    fn lanes(&self) -> MutexGuard<'_, Vec<Entry<T>>> {
        self.lanes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `model` is one of the models picked for.
    pub fn serves(&self, model: &ModelRef) -> bool {
        self.models.contains_key(model)
    }

    /// Adds a lane (one that may have work); `false` if it is known already.
    pub fn add(&self, key: LaneKey, lane: T) -> bool {
        let mut lanes = self.lanes();
        if lanes.iter().any(|e| e.key == key) {
            return false;
        }
        lanes.push(Entry { key, state: LaneState::new(), lane });
        true
    }

    /// Marks a known lane as having work; `false` if the lane is not known.
    pub fn ring(&self, key: &LaneKey) -> bool {
        let mut lanes = self.lanes();
        match lanes.iter_mut().find(|e| &e.key == key) {
            Some(entry) => {
                entry.state.has_work();
                entry.state.rung_at = Some(Instant::now());
                entry.state.unanswered_rings = entry.state.unanswered_rings.saturating_add(1);
                true
            }
            None => false,
        }
    }

    fn share(&self, model: &ModelRef) -> f64 {
        let slots = &self.models[model];
        slots.running() as f64 / f64::from(slots.weight)
    }

    /// The lane to fetch from next, if any may have work and its model has a free slot, with
    /// how many jobs to fetch at most (one while other lanes of its model may have work).
    pub fn pick(&self, now: Instant) -> Option<(LaneKey, T, usize)> {
        let lanes = self.lanes();
        let ready =
            |e: &&Entry<T>| e.state.may_have_work(now) && self.models[&e.key.model].free.available_permits() > 0;
        let best = lanes.iter().filter(ready).min_by(|a, b| {
            let (sa, sb) = (self.share(&a.key.model), self.share(&b.key.model));
            sa.total_cmp(&sb).then(a.state.last_served.cmp(&b.state.last_served))
        })?;
        let others = lanes.iter().filter(ready).any(|e| e.key.model == best.key.model && e.key != best.key);
        Some((best.key.clone(), best.lane.clone(), if others { 1 } else { MAX_FETCH }))
    }

    /// How long until a lane found empty may be asked again.
    fn next_recheck(&self, now: Instant) -> Duration {
        self.lanes()
            .iter()
            .filter_map(|e| e.state.checked_empty.map(|at| e.state.recheck_after().saturating_sub(now - at)))
            .min()
            .unwrap_or(MAX_RECHECK)
            .max(Duration::from_millis(1))
    }

    /// Records what a fetch from `key` found: `found` jobs of the `asked` for. A lane that
    /// gave fewer than asked has no more ready: like an empty one, it is asked again when its
    /// doorbell rings (or after the back-off), not at once. Quick re-asks follow only while a
    /// doorbell rung in the last [`RING_SETTLE`] is not yet made up for by a fetched job.
    pub fn mark(&self, key: &LaneKey, asked: usize, found: usize, now: Instant) {
        let mut lanes = self.lanes();
        let Some(entry) = lanes.iter_mut().find(|e| &e.key == key) else { return };
        let state = &mut entry.state;
        state.unanswered_rings = state.unanswered_rings.saturating_sub(u32::try_from(found).unwrap_or(u32::MAX));
        if found > 0 {
            state.has_work();
            state.last_served = self.served.fetch_add(1, Ordering::Relaxed) + 1;
            if found >= asked {
                return; // there may be more
            }
        }
        let just_rung = state.unanswered_rings > 0
            && state.rung_at.is_some_and(|rung| now.saturating_duration_since(rung) < RING_SETTLE);
        state.checked_empty = Some(now);
        state.empty_since.get_or_insert(now);
        if just_rung && state.settling < SETTLE_TRIES {
            state.settling += 1;
        } else {
            state.settling = 0;
            state.unanswered_rings = 0;
            state.empty_streak += 1;
        }
    }

    /// A scan begun at `scanned_at` saw jobs in `with_jobs` of `model` (which are rung
    /// separately): its other lanes go dormant, unless their doorbell rang since.
    pub fn scanned(&self, model: &ModelRef, with_jobs: &[LaneKey], scanned_at: Instant) {
        for entry in self.lanes().iter_mut() {
            if &entry.key.model == model
                && !with_jobs.contains(&entry.key)
                && entry.state.rung_at.is_none_or(|rung| rung < scanned_at)
            {
                entry.state.dormant = true;
            }
        }
    }

    /// Drops `key` (its consumer is gone) and lanes empty for [`FORGET_AFTER`].
    pub fn forget(&self, key: Option<&LaneKey>, now: Instant) {
        self.lanes().retain(|e| {
            Some(&e.key) != key && e.state.empty_since.is_none_or(|since| now.duration_since(since) < FORGET_AFTER)
        });
    }

    /// A free slot of `model`.
    fn model_slot(&self, model: &ModelRef) -> Option<OwnedSemaphorePermit> {
        self.models[model].free.clone().try_acquire_owned().ok()
    }
}

/// The slots one job holds while it runs: one of the runner, one of its model. Dropping them
/// wakes the scheduler, which may be waiting for exactly this model's slot.
pub struct Slots {
    _runner: OwnedSemaphorePermit,
    _model: OwnedSemaphorePermit,
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
        }
    }

    /// Records what a scan begun at `scanned_at` found in `model`'s lanes (see
    /// [`FairPick::scanned`]).
    pub fn scanned(&self, model: &ModelRef, with_jobs: &[LaneKey], scanned_at: Instant) {
        self.pick.scanned(model, with_jobs, scanned_at);
    }

    /// A job of `key` is waiting: opens its lane if it is new, marks it, and wakes the loop.
    pub async fn ring(&self, key: LaneKey) {
        if !self.pick.serves(&key.model) {
            return;
        }
        tracing::trace!(model = %key.model, account = ?key.account, "doorbell");
        if !self.pick.ring(&key) {
            match self.lanes.open(&key).await {
                Ok(consumer) => {
                    if self.pick.add(key.clone(), consumer) {
                        tracing::debug!(model = %key.model, account = ?key.account, "lane opened");
                    }
                }
                Err(e) => {
                    tracing::warn!(model = %key.model, error = %e, "lane not opened; the next scan retries");
                    return;
                }
            }
        }
        self.wake.notify_one();
    }

    /// Starts jobs until `shutdown` fires: `start` is called with each message fetched, the
    /// model it is for, and the slots it holds until it ends.
    pub async fn run(&self, shutdown: CancellationToken, start: impl Fn(Message, &ModelRef, Slots)) {
        loop {
            let held = tokio::select! {
                () = shutdown.cancelled() => return,
                permit = self.runner.clone().acquire_owned() => match permit {
                    Ok(p) => p,
                    Err(_) => return,
                },
            };
            let now = Instant::now();
            let Some((key, consumer, most)) = self.pick.pick(now) else {
                drop(held);
                self.pick.forget(None, now);
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = self.wake.notified() => {}
                    () = tokio::time::sleep(self.pick.next_recheck(now)) => {}
                }
                continue;
            };
            match self.fetch(&key, &consumer, most, held, &start).await {
                Ok((asked, started)) => {
                    tracing::trace!(model = %key.model, account = ?key.account, asked, started, "fetched");
                    self.pick.mark(&key, asked, started, Instant::now());
                }
                Err(e) => {
                    tracing::warn!(model = %key.model, account = ?key.account, error = %e, "fetching jobs failed; the lane is reopened when a job rings it");
                    self.pick.forget(Some(&key), Instant::now());
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(FETCH_RETRY) => {}
                    }
                }
            }
        }
    }

    /// Fetches up to `most` jobs of `key`, as many as there are free slots, and starts each;
    /// returns how many were asked for and how many there were.
    async fn fetch(
        &self,
        key: &LaneKey,
        consumer: &PullConsumer,
        most: usize,
        held: OwnedSemaphorePermit,
        start: &impl Fn(Message, &ModelRef, Slots),
    ) -> Result<(usize, usize), async_nats::Error> {
        let mut slots = Vec::new();
        let mut runner_permit = Some(held);
        while slots.len() < most {
            let Some(runner) = runner_permit.take().or_else(|| self.runner.clone().try_acquire_owned().ok()) else {
                break;
            };
            let Some(model) = self.pick.model_slot(&key.model) else { break };
            slots.push(Slots { _runner: runner, _model: model, wake: self.wake.clone() });
        }
        let asked = slots.len();
        if asked == 0 {
            return Ok((0, 0));
        }
        let mut started = 0;
        let fetched = tokio::time::timeout(FETCH_TIMEOUT, async {
            let mut batch = consumer.fetch().max_messages(asked).messages().await?;
            while let Some(message) = batch.next().await {
                let message = message?;
                let Some(slot) = slots.pop() else { break };
                start(message, &key.model, slot);
                started += 1;
            }
            Ok::<_, async_nats::Error>(())
        })
        .await;
        match fetched {
            Ok(Ok(())) => Ok((asked, started)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(format!("no answer within {FETCH_TIMEOUT:?} ({started} of {asked} jobs came)").into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::domain::AccountId;

    fn model(name: &str) -> ModelRef {
        format!("demo/{name}").parse().expect("model")
    }

    fn key(name: &str, account: Option<&AccountId>) -> LaneKey {
        LaneKey { model: model(name), account: account.cloned() }
    }

    fn pick_of(names: &[&str], limit: usize, weights: &HashMap<ModelRef, u32>) -> FairPick<()> {
        let models: Vec<ModelRef> = names.iter().map(|n| model(n)).collect();
        let pick = FairPick::new(&models, limit, weights);
        for n in names {
            pick.add(key(n, None), ());
        }
        pick
    }

    /// Occupies `n` slots of `name`.
    fn run_jobs(pick: &FairPick<()>, name: &str, n: usize) -> Vec<OwnedSemaphorePermit> {
        (0..n).map(|_| pick.model_slot(&model(name)).expect("a free slot")).collect()
    }

    fn picked(pick: &FairPick<()>, now: Instant) -> Option<LaneKey> {
        pick.pick(now).map(|(k, _, _)| k)
    }

    #[test]
    fn a_lane_found_empty_just_after_its_doorbell_is_asked_again_within_milliseconds() {
        let pick = pick_of(&["a"], 4, &HashMap::new());
        assert!(pick.ring(&key("a", None)));
        let now = Instant::now();
        pick.mark(&key("a", None), 1, 0, now);
        assert_eq!(pick.next_recheck(now), Duration::from_millis(2), "the job may not be fetchable yet");
        assert_eq!(picked(&pick, now + Duration::from_millis(2)), Some(key("a", None)));
        for _ in 1..SETTLE_TRIES {
            pick.mark(&key("a", None), 1, 0, now);
        }
        assert_eq!(pick.next_recheck(now), Duration::from_millis(16));
        pick.mark(&key("a", None), 1, 0, now);
        assert_eq!(pick.next_recheck(now), FIRST_RECHECK, "after the quick tries, the usual back-off");
        let later = now + RING_SETTLE;
        pick.mark(&key("a", None), 1, 0, later);
        assert_eq!(pick.next_recheck(later), FIRST_RECHECK * 2, "an old ring does not shorten it");
    }

    #[test]
    fn a_lane_that_gave_fewer_jobs_than_asked_waits_for_its_next_doorbell() {
        let pick = pick_of(&["a"], 4, &HashMap::new());
        assert!(pick.ring(&key("a", None)));
        let now = Instant::now();
        pick.mark(&key("a", None), 8, 1, now);
        assert_eq!(picked(&pick, now), None, "drained: not asked again at once");
        assert_eq!(pick.next_recheck(now), FIRST_RECHECK, "no quick re-asks: its doorbell's job was fetched");
        assert!(pick.ring(&key("a", None)));
        assert_eq!(picked(&pick, now), Some(key("a", None)), "the next job rings it");
    }

    #[test]
    fn a_lane_that_gave_every_job_asked_for_is_asked_again_at_once() {
        let pick = pick_of(&["a"], 4, &HashMap::new());
        let now = Instant::now();
        pick.mark(&key("a", None), 8, 8, now);
        assert_eq!(picked(&pick, now), Some(key("a", None)), "there may be more");
    }

    #[test]
    fn a_doorbell_not_yet_made_up_for_still_gets_quick_re_asks() {
        let pick = pick_of(&["a"], 4, &HashMap::new());
        assert!(pick.ring(&key("a", None)));
        assert!(pick.ring(&key("a", None)));
        let now = Instant::now();
        pick.mark(&key("a", None), 8, 1, now);
        assert_eq!(pick.next_recheck(now), Duration::from_millis(2), "the second job may not be fetchable yet");
        pick.mark(&key("a", None), 8, 1, now + Duration::from_millis(2));
        assert_eq!(picked(&pick, now + Duration::from_millis(3)), None, "both fetched: nothing announced is missing");
    }

    #[test]
    fn the_model_with_the_smallest_share_goes_first() {
        let pick = pick_of(&["a", "b"], 4, &HashMap::new());
        let now = Instant::now();
        let _a = run_jobs(&pick, "a", 2);
        let _b = run_jobs(&pick, "b", 1);
        assert_eq!(picked(&pick, now), Some(key("b", None)), "b runs fewer");
        let _b2 = run_jobs(&pick, "b", 2);
        assert_eq!(picked(&pick, now), Some(key("a", None)), "now a runs fewer");
    }

    #[test]
    fn weights_scale_the_share() {
        let pick = pick_of(&["a", "b"], 8, &HashMap::from([(model("a"), 3)]));
        let now = Instant::now();
        let _a = run_jobs(&pick, "a", 2);
        let _b = run_jobs(&pick, "b", 1);
        assert_eq!(picked(&pick, now), Some(key("a", None)), "a's 2 of weight 3 is less than b's 1 of 1");
        let _a2 = run_jobs(&pick, "a", 2);
        assert_eq!(picked(&pick, now), Some(key("b", None)), "4/3 > 1/1");
    }

    #[test]
    fn the_lanes_of_a_model_take_turns_one_job_at_a_time() {
        let pick = pick_of(&["a"], 4, &HashMap::new());
        let (heavy, light) = (AccountId::generate(), AccountId::generate());
        let now = Instant::now();
        pick.add(key("a", Some(&heavy)), ());
        pick.mark(&key("a", None), 1, 0, now);
        assert_eq!(pick.pick(now), Some((key("a", Some(&heavy)), (), MAX_FETCH)), "alone, it may fetch a batch");
        pick.mark(&key("a", Some(&heavy)), 1, 1, now);
        pick.add(key("a", Some(&light)), ());
        assert_eq!(pick.pick(now), Some((key("a", Some(&light)), (), 1)), "the lane served least recently, one job");
        pick.mark(&key("a", Some(&light)), 1, 1, now);
        assert_eq!(picked(&pick, now), Some(key("a", Some(&heavy))));
    }

    #[test]
    fn empty_lanes_and_full_models_are_skipped_until_their_doorbell_or_the_recheck() {
        let pick = pick_of(&["a", "b"], 1, &HashMap::new());
        let now = Instant::now();
        pick.mark(&key("a", None), 1, 0, now);
        let _b = run_jobs(&pick, "b", 1);
        assert_eq!(picked(&pick, now), None, "a is empty and b has no free slot");
        assert!(pick.next_recheck(now) <= FIRST_RECHECK);
        assert_eq!(picked(&pick, now + FIRST_RECHECK), Some(key("a", None)), "asked again after the recheck");
        assert!(pick.ring(&key("a", None)));
        assert_eq!(picked(&pick, now), Some(key("a", None)), "or at once when its doorbell rings");
        assert!(!pick.ring(&key("c", None)), "an unknown lane must be opened first");
    }

    #[test]
    fn a_lane_the_scan_saw_empty_sleeps_until_rung_unless_it_was_rung_after_the_scan_began() {
        let pick = pick_of(&["a", "b"], 1, &HashMap::new());
        let scan_began = Instant::now();
        pick.scanned(&model("a"), &[], scan_began);
        pick.scanned(&model("b"), &[key("b", None)], scan_began);
        let later = scan_began + MAX_RECHECK * 10;
        assert_eq!(picked(&pick, later), Some(key("b", None)), "a is dormant, b has jobs");
        let _b = run_jobs(&pick, "b", 1);
        assert_eq!(picked(&pick, later), None);
        assert!(pick.ring(&key("a", None)));
        assert_eq!(picked(&pick, later), Some(key("a", None)), "rung awake");
        pick.scanned(&model("a"), &[], scan_began);
        assert_eq!(picked(&pick, later), Some(key("a", None)), "a scan older than the doorbell changes nothing");
    }

    #[test]
    fn an_empty_lane_backs_off_and_is_forgotten_after_a_while() {
        let pick = pick_of(&["a"], 1, &HashMap::new());
        let start = Instant::now();
        for _ in 0..10 {
            pick.mark(&key("a", None), 1, 0, start);
        }
        assert_eq!(picked(&pick, start + FIRST_RECHECK), None, "backed off");
        assert_eq!(picked(&pick, start + MAX_RECHECK), Some(key("a", None)), "but never beyond the longest recheck");
        pick.forget(None, start + FORGET_AFTER);
        assert_eq!(picked(&pick, start + FORGET_AFTER), None, "forgotten");
        assert!(pick.add(key("a", None), ()), "and opened again when its doorbell rings");
    }
}
