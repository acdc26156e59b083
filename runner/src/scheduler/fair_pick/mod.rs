//! The fair pick over a runner's lanes: which lane the scheduler ([`super`]) fetches from
//! next, how many jobs it may ask for, and when a lane found empty is asked again.
//!
//! **Priority first.** Of the lanes that may have work, those of the highest level go first
//! (`high`, then `normal`, then `low`: a lane is one account's jobs of one level). A level of a
//! model whose oldest waiting job has waited [`DEFAULT_AGING`] (`PRIORITY_AGING_SECONDS`)
//! counts one level higher, and one more for each such wait again, so low never starves, even
//! behind a backlog of normal work that has itself aged ([`super::arrivals`] knows the waits).
//! A level ages as a whole, all its lanes together: were each lane to age alone, the account
//! with the longest backlog would be the first to age, and would then take every turn from
//! the light accounts of its level (measured: a light account's share of its level fell to
//! 0.88 of its fair half under a normal backlog that aged).
//!
//! **Fair share within a level.** Of those, the one whose model holds the smallest
//! share of slots for its weight (`running / weight`, `RUNNER_MODEL_WEIGHTS`, default 1 each)
//! goes first, so a flood of one model cannot keep another from its next free slot. Among the
//! lanes of that model, the one served least recently goes first, and while several lanes of a
//! model have work a fetch takes one job, so one account's backlog gets one turn in as many as
//! there are accounts waiting. `RUNNER_MODEL_CONCURRENCY` still bounds each model.
//!
//! **Trainers** are slots of their own: a model's trainings ([`JobKind::Training`], lanes on
//! the trainers' route) take one of its trainer's [`TRAINER_CONCURRENCY`] slots, never one of
//! its predictions', so a training waits in its lane while the trainer is busy and
//! predictions of the model go on beside it.
//!
//! **Rechecks.** A lane found empty is asked again when its doorbell rings, or after a
//! back-off from 1 s to [`MAX_RECHECK`] while the scan of the jobs stream still sees jobs in
//! it; a lane the scan sees empty is left dormant until a job rings it, and one empty for
//! [`FORGET_AFTER`] is dropped.
//!
//! Its modules:
//! - [`lane_state`]: what the fair pick knows of each lane.
//! - `tests`: the fair pick's rules, one at a time, with time passed in.

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use common::domain::{JobKind, ModelRef};

mod lane_state;

#[cfg(test)]
use self::lane_state::FIRST_RECHECK;
use self::lane_state::{Entry, LaneState, RING_SETTLE, SETTLE_TRIES, Table};
use common::lane::Lane;

/// How long a job waits before its lane counts one level higher (`PRIORITY_AGING_SECONDS`).
pub const DEFAULT_AGING: Duration = Duration::from_secs(60);

/// How a runner heard of a lane's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// A job was published to it (its doorbell): one more job waits.
    Doorbell,
    /// The scan of the jobs stream saw jobs in it.
    Scan,
}

/// The longest a lane found empty is left alone unless its doorbell rings (while the last
/// scan saw jobs in it: they run elsewhere, and come back here if their runner dies).
pub const MAX_RECHECK: Duration = Duration::from_secs(4);
/// A lane found empty for this long is dropped (until its doorbell rings again).
pub const FORGET_AFTER: Duration = Duration::from_secs(600);
/// The most jobs one fetch asks for (each needs a free slot of the runner and of its model).
const MAX_FETCH: usize = 8;
/// The trainings of one model that run at once on a runner (a Cog trainer runs one).
pub const TRAINER_CONCURRENCY: usize = 1;

/// Whose slots a lane's jobs take: its model's predictions' or its model's trainer's.
type SlotsOf = (ModelRef, JobKind);

fn slots_of(key: &Lane) -> SlotsOf {
    (key.model.clone(), key.kind())
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

/// The fair choice of the next lane, over lanes of any payload `T` (a consumer, in the
/// runner), so the policy can be tested on its own.
pub struct FairPick<T> {
    /// The models picked for (and their trainers), each with its slots.
    models: Vec<(SlotsOf, ModelSlots)>,
    /// Each one's place in `models`.
    model_index: HashMap<SlotsOf, usize>,
    lanes: Mutex<Table<T>>,
    served: AtomicU64,
    aging: Duration,
}

/// A lane that may be picked, with what orders it.
struct Candidate {
    rank: u8,
    share: f64,
    last_served: u64,
    at: usize,
}

impl<T: Clone> FairPick<T> {
    /// No lanes yet; each of `models` bounded by `model_concurrency` and weighted by `weights`
    /// (1 when absent).
    pub fn new(models: &[ModelRef], model_concurrency: usize, weights: &HashMap<ModelRef, u32>) -> Self {
        let models: Vec<(SlotsOf, ModelSlots)> = models
            .iter()
            .map(|model| {
                let weight = weights.get(model).copied().unwrap_or(1).max(1);
                let free = Arc::new(Semaphore::new(model_concurrency));
                ((model.clone(), JobKind::Prediction), ModelSlots { limit: model_concurrency, free, weight })
            })
            .collect();
        let model_index = models.iter().enumerate().map(|(i, (m, _))| (m.clone(), i)).collect();
        Self { models, model_index, lanes: Mutex::default(), served: AtomicU64::new(0), aging: DEFAULT_AGING }
    }

    /// Gives each model in `slots` that many slots instead of the default.
    pub fn with_model_slots(mut self, slots: &HashMap<ModelRef, usize>) -> Self {
        for ((model, kind), model_slots) in &mut self.models {
            if let (JobKind::Prediction, Some(n)) = (kind, slots.get(model)) {
                let n = (*n).max(1);
                *model_slots = ModelSlots { limit: n, free: Arc::new(Semaphore::new(n)), weight: model_slots.weight };
            }
        }
        self
    }

    /// Also picks for the trainings of `trainers`, each with [`TRAINER_CONCURRENCY`] slots
    /// of its own.
    pub fn with_trainers(mut self, trainers: &[ModelRef]) -> Self {
        for model in trainers {
            let key = (model.clone(), JobKind::Training);
            let free = Arc::new(Semaphore::new(TRAINER_CONCURRENCY));
            self.model_index.insert(key.clone(), self.models.len());
            self.models.push((key, ModelSlots { limit: TRAINER_CONCURRENCY, free, weight: 1 }));
        }
        self
    }

    /// Lifts a level one step for each `aging` its oldest job has waited (at least 1 ms).
    pub fn with_aging(mut self, aging: Duration) -> Self {
        self.aging = aging.max(Duration::from_millis(1));
        self
    }

    fn lanes(&self) -> MutexGuard<'_, Table<T>> {
        self.lanes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the lane's jobs are picked for: of a model picked for, and a training only of
    /// a model with a trainer here.
    pub fn serves(&self, key: &Lane) -> bool {
        self.model_index.contains_key(&slots_of(key))
    }

    /// Adds a lane (one that may have work); `false` if it is known already or its model is
    /// not picked for.
    pub fn add(&self, key: Lane, lane: T) -> bool {
        let Some(&model) = self.model_index.get(&slots_of(&key)) else { return false };
        self.lanes().insert(Entry { key, model, state: LaneState::new(), lane })
    }

    /// Marks a known lane as having work, as `heard`; `false` if the lane is not known.
    pub fn ring(&self, key: &Lane, heard: Heard) -> bool {
        self.ring_at(key, heard, Instant::now())
    }

    fn ring_at(&self, key: &Lane, heard: Heard, now: Instant) -> bool {
        let mut lanes = self.lanes();
        let Some(entry) = lanes.get_mut(key) else { return false };
        let state = &mut entry.state;
        state.has_work();
        state.rung_at = Some(now);
        state.unanswered_rings = state.unanswered_rings.saturating_add(1);
        match heard {
            Heard::Doorbell => state.arrivals.announced(now),
            Heard::Scan => state.arrivals.seen(now),
        }
        true
    }

    /// A fetch from `key` brought a job published at `published` (when known), after which
    /// `pending` jobs of the lane still wait.
    pub fn left(&self, key: &Lane, pending: u64, published: Option<Instant>) {
        if let Some(entry) = self.lanes().get_mut(key) {
            entry.state.arrivals.left(pending, published);
        }
    }

    /// The lane to fetch from next, if any may have work, its model has a free slot and it is
    /// not `held_back` (its account is at its cap), with how many jobs to fetch at most (one
    /// while other lanes of its model may have work): the highest level first (aging
    /// counted), then the model with the smallest share, then the lane served least recently.
    ///
    /// One pass over the lanes, reading only their own fields; `held_back` (a look-up in the
    /// caps' cache) is asked only of the lane about to be picked, and of a lane whose wait would
    /// age its level (a lane held back does not age its level: its jobs wait for its cap).
    pub fn pick(&self, now: Instant, held_back: impl Fn(&Lane) -> bool) -> Option<(Lane, T, usize)> {
        let lanes = self.lanes();
        let entries = lanes.entries();
        let free: Vec<bool> = self.models.iter().map(|(_, slots)| slots.free.available_permits() > 0).collect();
        let share: Vec<f64> =
            self.models.iter().map(|(_, slots)| slots.running() as f64 / f64::from(slots.weight)).collect();
        // The longest wait of each model's levels, counting only waits long enough to age.
        let mut waited = vec![[Duration::ZERO; 3]; self.models.len()];
        let mut candidates = Vec::new();
        for (at, entry) in entries.iter().enumerate() {
            if !entry.state.may_have_work(now) || !free[entry.model] {
                continue;
            }
            let level = usize::from(entry.key.level.rank()).min(2);
            let wait = entry.state.arrivals.waited(now);
            let longest = &mut waited[entry.model][level];
            if wait >= self.aging && wait > *longest && !held_back(&entry.key) {
                *longest = wait;
            }
            candidates.push(Candidate { rank: 0, share: share[entry.model], last_served: entry.state.last_served, at });
        }
        for candidate in &mut candidates {
            let entry = &entries[candidate.at];
            let level = entry.key.level.rank();
            let steps = waited[entry.model][usize::from(level).min(2)].as_millis() / self.aging.as_millis().max(1);
            candidate.rank = level.saturating_sub(u8::try_from(steps).unwrap_or(u8::MAX));
        }
        let order = |a: &Candidate, b: &Candidate| {
            a.rank.cmp(&b.rank).then(a.share.total_cmp(&b.share)).then(a.last_served.cmp(&b.last_served))
        };
        let mut best = candidates.iter().min_by(|a, b| order(a, b))?;
        if held_back(&entries[best.at].key) {
            // Rare (a capped account at its cap): the rest in order, until one may go.
            candidates.sort_unstable_by(order);
            best = candidates.iter().skip(1).find(|c| !held_back(&entries[c.at].key))?;
        }
        let chosen = &entries[best.at];
        let others = candidates
            .iter()
            .any(|c| c.at != best.at && entries[c.at].model == chosen.model && !held_back(&entries[c.at].key));
        Some((chosen.key.clone(), chosen.lane.clone(), if others { 1 } else { MAX_FETCH }))
    }

    /// How long until a lane found empty may be asked again: the soonest recheck still to
    /// come. A dormant lane is asked only when its doorbell rings, and a lane whose recheck is
    /// already due and was not picked waits for something that wakes the scheduler anyway (a
    /// slot of its model, or of its account, coming free): neither sets a timer. (They did: a
    /// lane gone dormant after a scan kept its due recheck, and the scheduler woke every
    /// millisecond for the ten minutes until it forgot the lane, 5 % of a core while idle.)
    pub(super) fn next_recheck(&self, now: Instant) -> Duration {
        self.lanes()
            .entries()
            .iter()
            .filter(|e| !e.state.dormant)
            .filter_map(|e| e.state.checked_empty.map(|at| e.state.recheck_after().saturating_sub(now - at)))
            .filter(|left| !left.is_zero())
            .min()
            .unwrap_or(MAX_RECHECK)
            .max(Duration::from_millis(1))
    }

    /// Records what a fetch from `key` found: `found` jobs of the `asked` for. A lane that
    /// gave fewer than asked has no more ready: like an empty one, it is asked again when its
    /// doorbell rings (or after the back-off), not at once. Quick re-asks follow only while a
    /// doorbell rung in the last `RING_SETTLE` is not yet made up for by a fetched job.
    pub fn mark(&self, key: &Lane, asked: usize, found: usize, now: Instant) {
        let mut lanes = self.lanes();
        let Some(entry) = lanes.get_mut(key) else { return };
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
            if found == 0 {
                state.arrivals.clear();
            }
        }
    }

    /// A scan begun at `scanned_at` saw jobs in `with_jobs` of `model` (which are rung
    /// separately): its other lanes go dormant, unless their doorbell rang since.
    pub fn scanned(&self, model: &ModelRef, with_jobs: &[Lane], scanned_at: Instant) {
        let with_jobs: HashSet<&Lane> = with_jobs.iter().collect();
        for entry in self.lanes().entries_mut() {
            if &entry.key.model == model
                && !with_jobs.contains(&entry.key)
                && entry.state.rung_at.is_none_or(|rung| rung < scanned_at)
            {
                entry.state.dormant = true;
                entry.state.arrivals.clear();
            }
        }
    }

    /// Drops `key` (its consumer is gone) and lanes empty for [`FORGET_AFTER`].
    pub fn forget(&self, key: Option<&Lane>, now: Instant) {
        self.lanes().retain(|e| {
            Some(&e.key) != key && e.state.empty_since.is_none_or(|since| now.duration_since(since) < FORGET_AFTER)
        });
    }

    /// Jobs of `key` announced by doorbells and not yet fetched (at least one is assumed when
    /// the lane was picked for other reasons).
    pub fn announced(&self, key: &Lane) -> usize {
        let rings = self.lanes().get(key).map_or(0, |e| e.state.unanswered_rings);
        usize::try_from(rings).unwrap_or(usize::MAX).max(1)
    }

    /// A free slot for a job of `key`: of its model, or of its model's trainer.
    pub(super) fn model_slot(&self, key: &Lane) -> Option<OwnedSemaphorePermit> {
        let (_, slots) = &self.models[*self.model_index.get(&slots_of(key))?];
        slots.free.clone().try_acquire_owned().ok()
    }
}

#[cfg(test)]
mod tests;
