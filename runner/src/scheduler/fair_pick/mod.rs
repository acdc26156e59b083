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
//! **Rechecks.** A lane found empty is asked again when its doorbell rings, or after a
//! back-off from 1 s to [`MAX_RECHECK`] while the scan of the jobs stream still sees jobs in
//! it; a lane the scan sees empty is left dormant until a job rings it, and one empty for
//! [`FORGET_AFTER`] is dropped.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use common::domain::ModelRef;

use super::arrivals::Arrivals;
use crate::lanes::LaneKey;

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
#[derive(Debug, Clone)]
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
    /// Its jobs waiting, as announced: how long the oldest has waited.
    arrivals: Arrivals,
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
            arrivals: Arrivals::default(),
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
    aging: Duration,
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
        Self { models, lanes: Mutex::new(Vec::new()), served: AtomicU64::new(0), aging: DEFAULT_AGING }
    }

    /// Lifts a lane one level for each `aging` its oldest job has waited (at least 1 ms).
    pub fn with_aging(mut self, aging: Duration) -> Self {
        self.aging = aging.max(Duration::from_millis(1));
        self
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

    /// Marks a known lane as having work, as `heard`; `false` if the lane is not known.
    pub fn ring(&self, key: &LaneKey, heard: Heard) -> bool {
        self.ring_at(key, heard, Instant::now())
    }

    fn ring_at(&self, key: &LaneKey, heard: Heard, now: Instant) -> bool {
        let mut lanes = self.lanes();
        match lanes.iter_mut().find(|e| &e.key == key) {
            Some(entry) => {
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
            None => false,
        }
    }

    /// A fetch from `key` brought a job published at `published` (when known), after which
    /// `pending` jobs of the lane still wait.
    pub fn left(&self, key: &LaneKey, pending: u64, published: Option<Instant>) {
        if let Some(entry) = self.lanes().iter_mut().find(|e| &e.key == key) {
            entry.state.arrivals.left(pending, published);
        }
    }

    /// Each (model, level) of `lanes` with the longest wait of its oldest job at `now`.
    fn waits<'a>(lanes: impl Iterator<Item = &'a Entry<T>>, now: Instant) -> Vec<(&'a ModelRef, u8, Duration)>
    where
        T: 'a,
    {
        let mut waits: Vec<(&ModelRef, u8, Duration)> = Vec::new();
        for entry in lanes {
            let (model, level, waited) = (&entry.key.model, entry.key.level.rank(), entry.state.arrivals.waited(now));
            match waits.iter_mut().find(|(m, l, _)| *m == model && *l == level) {
                Some((_, _, longest)) => *longest = (*longest).max(waited),
                None => waits.push((model, level, waited)),
            }
        }
        waits
    }

    /// The level of `entry`'s lane as a rank (0 goes first): its priority's, lifted one level
    /// for each [`Self::with_aging`] the oldest job of its model's lanes at that level has
    /// waited (in `waits`).
    fn rank(&self, entry: &Entry<T>, waits: &[(&ModelRef, u8, Duration)]) -> u8 {
        let level = entry.key.level.rank();
        let waited =
            waits.iter().find(|(m, l, _)| **m == entry.key.model && *l == level).map_or(Duration::ZERO, |w| w.2);
        let steps = waited.as_millis() / self.aging.as_millis().max(1);
        level.saturating_sub(u8::try_from(steps).unwrap_or(u8::MAX))
    }

    fn share(&self, model: &ModelRef) -> f64 {
        let slots = &self.models[model];
        slots.running() as f64 / f64::from(slots.weight)
    }

    /// The lane to fetch from next, if any may have work, its model has a free slot and it is
    /// not `held_back` (its account is at its cap), with how many jobs to fetch at most (one
    /// while other lanes of its model may have work): the highest level first (aging
    /// counted), then the model with the smallest share, then the lane served least recently.
    pub fn pick(&self, now: Instant, held_back: impl Fn(&LaneKey) -> bool) -> Option<(LaneKey, T, usize)> {
        let lanes = self.lanes();
        let ready = |e: &&Entry<T>| {
            e.state.may_have_work(now) && self.models[&e.key.model].free.available_permits() > 0 && !held_back(&e.key)
        };
        let waits = Self::waits(lanes.iter().filter(ready), now);
        let best = lanes.iter().filter(ready).min_by(|a, b| {
            let (sa, sb) = (self.share(&a.key.model), self.share(&b.key.model));
            (self.rank(a, &waits).cmp(&self.rank(b, &waits)))
                .then(sa.total_cmp(&sb))
                .then(a.state.last_served.cmp(&b.state.last_served))
        })?;
        let others = lanes.iter().filter(ready).any(|e| e.key.model == best.key.model && e.key != best.key);
        Some((best.key.clone(), best.lane.clone(), if others { 1 } else { MAX_FETCH }))
    }

    /// How long until a lane found empty may be asked again.
    pub(super) fn next_recheck(&self, now: Instant) -> Duration {
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
    /// doorbell rung in the last `RING_SETTLE` is not yet made up for by a fetched job.
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
            if found == 0 {
                state.arrivals.clear();
            }
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
                entry.state.arrivals.clear();
            }
        }
    }

    /// Drops `key` (its consumer is gone) and lanes empty for [`FORGET_AFTER`].
    pub fn forget(&self, key: Option<&LaneKey>, now: Instant) {
        self.lanes().retain(|e| {
            Some(&e.key) != key && e.state.empty_since.is_none_or(|since| now.duration_since(since) < FORGET_AFTER)
        });
    }

    /// Jobs of `key` announced by doorbells and not yet fetched (at least one is assumed when
    /// the lane was picked for other reasons).
    pub fn announced(&self, key: &LaneKey) -> usize {
        let lanes = self.lanes();
        let rings = lanes.iter().find(|e| &e.key == key).map_or(0, |e| e.state.unanswered_rings);
        usize::try_from(rings).unwrap_or(usize::MAX).max(1)
    }

    /// A free slot of `model`.
    pub(super) fn model_slot(&self, model: &ModelRef) -> Option<OwnedSemaphorePermit> {
        self.models[model].free.clone().try_acquire_owned().ok()
    }
}

#[cfg(test)]
mod tests;
