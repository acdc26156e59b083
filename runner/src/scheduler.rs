//! Which job this runner starts next, and when: the one loop that turns free slots into
//! running jobs for every served model.
//!
//! **No idle slot while work waits.** Slots are taken only to start a job that is there: the
//! scheduler holds one free runner slot, picks a lane (a durable consumer: one per served
//! model) that may have work and whose model has a free slot, and *fetches* from it, a request
//! that answers at once with what is pending (never a long poll). Each message fetched starts
//! at once with its slots; an empty answer marks the lane empty and the next lane is tried.
//! Nothing is pulled ahead into a local buffer, so no job's ack wait runs out on this runner
//! while another runner has a free slot.
//!
//! (Before, each model's loop took every free slot it could and then held them through a 2 s
//! long poll: the loops of idle models sat on the runner's slots while the busy model waited.
//! Eight one-second `demo/sleep` jobs on the default model set started 1.0, 3.0, 4.0, 5.0,
//! 6.0, 7.0, 8.0 and 9.0 s after creation: one at a time.)
//!
//! **Knowing there is work** costs no polling while jobs flow: every runner subscribes (core
//! NATS, nothing stored) to the job subjects of the models it serves, so a published job rings
//! its lane's doorbell. A lane found empty is asked again when its doorbell rings, or after
//! [`RECHECK_EMPTY`] (jobs handed back with a delay, or left by a runner that died, come back
//! without a doorbell).
//!
//! **Fair share across models.** Of the lanes that may have work, the one whose model holds
//! the smallest share of slots for its weight (`running / weight`, `RUNNER_MODEL_WEIGHTS`,
//! default 1 each) goes first; ties go to the lane served least recently. A flood of one model
//! therefore cannot keep another from its next free slot. `RUNNER_MODEL_CONCURRENCY` still
//! bounds each model.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use async_nats::jetstream::{Message, consumer::PullConsumer};
use futures::StreamExt;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use common::domain::ModelRef;

/// How long a lane found empty is left alone unless its doorbell rings.
pub const RECHECK_EMPTY: Duration = Duration::from_secs(1);
/// The most jobs one fetch asks for (each needs a free slot of the runner and of its model).
const MAX_FETCH: usize = 8;
/// How long to wait before trying a lane again after its fetch failed.
const FETCH_RETRY: Duration = Duration::from_millis(500);

/// A lane: one durable consumer of jobs, and the model its jobs run on.
pub struct Lane {
    /// The model.
    pub model: ModelRef,
    /// Its consumer.
    pub consumer: PullConsumer,
}

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
struct LaneState {
    /// When it was last found empty; `None` while it may have work.
    empty_since: Option<Instant>,
    /// When a job of it last started (ties go to the least recent).
    last_served: u64,
}

impl LaneState {
    fn may_have_work(&self, now: Instant) -> bool {
        self.empty_since.is_none_or(|since| now.duration_since(since) >= RECHECK_EMPTY)
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

/// The fair choice of the next lane: which lanes may have work, and each model's share of
/// slots. Kept apart from the consumers so the policy can be tested on its own.
pub struct FairPick {
    models: HashMap<ModelRef, ModelSlots>,
    lanes: Vec<ModelRef>,
    state: Mutex<Vec<LaneState>>,
    served: AtomicU64,
}

impl FairPick {
    /// Lanes of `lanes` (the model of each), each model bounded by `model_concurrency` and
    /// weighted by `weights` (1 when absent).
    pub fn new(lanes: Vec<ModelRef>, model_concurrency: usize, weights: &HashMap<ModelRef, u32>) -> Self {
        let models = lanes
            .iter()
            .map(|model| {
                let weight = weights.get(model).copied().unwrap_or(1).max(1);
                let free = Arc::new(Semaphore::new(model_concurrency));
                (model.clone(), ModelSlots { limit: model_concurrency, free, weight })
            })
            .collect();
        let state = lanes.iter().map(|_| LaneState { empty_since: None, last_served: 0 }).collect();
        Self { models, lanes, state: Mutex::new(state), served: AtomicU64::new(0) }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Vec<LaneState>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the lanes of `model` as having work.
    pub fn ring(&self, model: &ModelRef) {
        let mut state = self.state();
        for (lane, s) in self.lanes.iter().zip(state.iter_mut()) {
            if lane == model {
                s.empty_since = None;
            }
        }
    }

    /// The lane to fetch from next, if any may have work and its model has a free slot: the
    /// one whose model holds the smallest share of slots for its weight, then the one served
    /// least recently.
    pub fn pick(&self, now: Instant) -> Option<usize> {
        let state = self.state();
        let share = |model: &ModelRef| {
            let slots = &self.models[model];
            slots.running() as f64 / f64::from(slots.weight)
        };
        self.lanes
            .iter()
            .zip(state.iter())
            .enumerate()
            .filter(|(_, (model, s))| s.may_have_work(now) && self.models[*model].free.available_permits() > 0)
            .min_by(|(_, (a, sa)), (_, (b, sb))| {
                share(a).total_cmp(&share(b)).then(sa.last_served.cmp(&sb.last_served))
            })
            .map(|(i, _)| i)
    }

    /// How long until a lane found empty may be asked again.
    fn next_recheck(&self, now: Instant) -> Duration {
        self.state()
            .iter()
            .filter_map(|s| s.empty_since.map(|since| RECHECK_EMPTY.saturating_sub(now.duration_since(since))))
            .min()
            .unwrap_or(RECHECK_EMPTY)
            .max(Duration::from_millis(10))
    }

    /// Records what a fetch from `lane` found.
    pub fn mark(&self, lane: usize, found_work: bool, now: Instant) {
        let mut state = self.state();
        if found_work {
            state[lane].empty_since = None;
            state[lane].last_served = self.served.fetch_add(1, Ordering::Relaxed) + 1;
        } else {
            state[lane].empty_since = Some(now);
        }
    }

    /// A free slot of `lane`'s model.
    fn model_slot(&self, lane: usize) -> Option<OwnedSemaphorePermit> {
        self.models[&self.lanes[lane]].free.clone().try_acquire_owned().ok()
    }
}

/// The scheduler of one runner: its slots, the fair pick, and the lanes' consumers.
pub struct Scheduler {
    runner: Arc<Semaphore>,
    pick: FairPick,
    consumers: Vec<PullConsumer>,
    wake: Arc<Notify>,
}

impl Scheduler {
    /// A scheduler of `concurrency` slots over `lanes`, each model bounded by
    /// `model_concurrency` and weighted by `weights` (1 when absent).
    pub fn new(
        concurrency: usize,
        model_concurrency: usize,
        weights: &HashMap<ModelRef, u32>,
        lanes: Vec<Lane>,
    ) -> Self {
        let (models, consumers) = lanes.into_iter().map(|l| (l.model, l.consumer)).unzip();
        Self {
            runner: Arc::new(Semaphore::new(concurrency)),
            pick: FairPick::new(models, model_concurrency, weights),
            consumers,
            wake: Arc::new(Notify::new()),
        }
    }

    /// Marks the lanes of `model` as having work (its doorbell rang) and wakes the loop.
    pub fn ring(&self, model: &ModelRef) {
        self.pick.ring(model);
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
            let Some(lane) = self.pick.pick(Instant::now()) else {
                drop(held);
                let recheck = self.pick.next_recheck(Instant::now());
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = self.wake.notified() => {}
                    () = tokio::time::sleep(recheck) => {}
                }
                continue;
            };
            match self.fetch(lane, held, &start).await {
                Ok(started) => self.pick.mark(lane, started > 0, Instant::now()),
                Err(e) => {
                    let model = &self.pick.lanes[lane];
                    tracing::warn!(%model, error = %e, "fetching jobs failed; retrying shortly");
                    self.pick.mark(lane, false, Instant::now());
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(FETCH_RETRY) => {}
                    }
                }
            }
        }
    }

    /// Fetches as many jobs of `lane` as there are free slots (at most [`MAX_FETCH`]) and
    /// starts each; returns how many there were.
    async fn fetch(
        &self,
        lane: usize,
        held: OwnedSemaphorePermit,
        start: &impl Fn(Message, &ModelRef, Slots),
    ) -> Result<usize, async_nats::Error> {
        let mut slots = Vec::new();
        let mut runner_permit = Some(held);
        while slots.len() < MAX_FETCH {
            let Some(runner) = runner_permit.take().or_else(|| self.runner.clone().try_acquire_owned().ok()) else {
                break;
            };
            let Some(model) = self.pick.model_slot(lane) else { break };
            slots.push(Slots { _runner: runner, _model: model, wake: self.wake.clone() });
        }
        if slots.is_empty() {
            return Ok(0);
        }
        let mut batch = self.consumers[lane].fetch().max_messages(slots.len()).messages().await?;
        let mut started = 0;
        while let Some(message) = batch.next().await {
            let message = message?;
            let Some(slot) = slots.pop() else { break };
            start(message, &self.pick.lanes[lane], slot);
            started += 1;
        }
        Ok(started)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(name: &str) -> ModelRef {
        format!("demo/{name}").parse().expect("model")
    }

    /// Occupies `n` slots of `lane`'s model.
    fn run_jobs(pick: &FairPick, lane: usize, n: usize) -> Vec<OwnedSemaphorePermit> {
        (0..n).map(|_| pick.model_slot(lane).expect("a free slot")).collect()
    }

    #[test]
    fn the_model_with_the_smallest_share_goes_first() {
        let pick = FairPick::new(vec![model("a"), model("b")], 4, &HashMap::new());
        let now = Instant::now();
        let _a = run_jobs(&pick, 0, 2);
        let _b = run_jobs(&pick, 1, 1);
        assert_eq!(pick.pick(now), Some(1), "b runs fewer");
        let _b2 = run_jobs(&pick, 1, 2);
        assert_eq!(pick.pick(now), Some(0), "now a runs fewer");
    }

    #[test]
    fn weights_scale_the_share() {
        let weights = HashMap::from([(model("a"), 3)]);
        let pick = FairPick::new(vec![model("a"), model("b")], 8, &weights);
        let now = Instant::now();
        let _a = run_jobs(&pick, 0, 2);
        let _b = run_jobs(&pick, 1, 1);
        assert_eq!(pick.pick(now), Some(0), "a's 2 of weight 3 is a smaller share than b's 1 of weight 1");
        let _a2 = run_jobs(&pick, 0, 2);
        assert_eq!(pick.pick(now), Some(1), "4/3 > 1/1");
    }

    #[test]
    fn ties_go_to_the_lane_served_least_recently() {
        let pick = FairPick::new(vec![model("a"), model("b"), model("c")], 4, &HashMap::new());
        let now = Instant::now();
        pick.mark(0, true, now);
        pick.mark(1, true, now);
        assert_eq!(pick.pick(now), Some(2));
        pick.mark(2, true, now);
        assert_eq!(pick.pick(now), Some(0));
    }

    #[test]
    fn empty_lanes_and_full_models_are_skipped_until_their_doorbell_or_the_recheck() {
        let pick = FairPick::new(vec![model("a"), model("b")], 1, &HashMap::new());
        let now = Instant::now();
        pick.mark(0, false, now);
        let _b = run_jobs(&pick, 1, 1);
        assert_eq!(pick.pick(now), None, "a is empty and b has no free slot");
        assert!(pick.next_recheck(now) <= RECHECK_EMPTY);
        assert_eq!(pick.pick(now + RECHECK_EMPTY), Some(0), "asked again after the recheck interval");
        pick.ring(&model("a"));
        assert_eq!(pick.pick(now), Some(0), "or at once when its doorbell rings");
    }

    #[test]
    fn a_lane_found_empty_is_asked_again_after_the_recheck_interval() {
        let now = Instant::now();
        assert!(LaneState { empty_since: None, last_served: 0 }.may_have_work(now));
        let just_emptied = LaneState { empty_since: Some(now), last_served: 0 };
        assert!(!just_emptied.may_have_work(now));
        assert!(just_emptied.may_have_work(now + RECHECK_EMPTY));
    }
}
