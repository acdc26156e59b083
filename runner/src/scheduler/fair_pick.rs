//! The fair pick over a runner's lanes: which lane the scheduler ([`super`]) fetches from
//! next, how many jobs it may ask for, and when a lane found empty is asked again.
//!
//! **Fair share.** Of the lanes that may have work, the one whose model holds the smallest
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

use crate::lanes::LaneKey;

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

    /// The lane to fetch from next, if any may have work, its model has a free slot and it is
    /// not `held_back` (its account is at its cap), with how many jobs to fetch at most (one
    /// while other lanes of its model may have work).
    pub fn pick(&self, now: Instant, held_back: impl Fn(&LaneKey) -> bool) -> Option<(LaneKey, T, usize)> {
        let lanes = self.lanes();
        let ready = |e: &&Entry<T>| {
            e.state.may_have_work(now) && self.models[&e.key.model].free.available_permits() > 0 && !held_back(&e.key)
        };
        let best = lanes.iter().filter(ready).min_by(|a, b| {
            let (sa, sb) = (self.share(&a.key.model), self.share(&b.key.model));
            sa.total_cmp(&sb).then(a.state.last_served.cmp(&b.state.last_served))
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
mod tests {
    use super::*;
    use common::domain::AccountId;

    fn model(name: &str) -> ModelRef {
        format!("demo/{name}").parse().expect("model")
    }

    fn key(name: &str, account: Option<&AccountId>) -> LaneKey {
        LaneKey { model: model(name), route: None, account: account.cloned() }
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
        pick.pick(now, |_| false).map(|(k, _, _)| k)
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
        assert_eq!(
            pick.pick(now, |_| false),
            Some((key("a", Some(&heavy)), (), MAX_FETCH)),
            "alone, it may fetch a batch"
        );
        pick.mark(&key("a", Some(&heavy)), 1, 1, now);
        pick.add(key("a", Some(&light)), ());
        assert_eq!(
            pick.pick(now, |_| false),
            Some((key("a", Some(&light)), (), 1)),
            "the lane served least recently, one job"
        );
        pick.mark(&key("a", Some(&light)), 1, 1, now);
        assert_eq!(picked(&pick, now), Some(key("a", Some(&heavy))));
    }

    #[test]
    fn a_lane_held_back_by_its_accounts_cap_is_passed_over_for_the_next() {
        let pick = pick_of(&["a"], 4, &HashMap::new());
        let (capped, other) = (AccountId::generate(), AccountId::generate());
        let now = Instant::now();
        pick.mark(&key("a", None), 1, 0, now);
        pick.add(key("a", Some(&capped)), ());
        pick.add(key("a", Some(&other)), ());
        let held_back = |k: &LaneKey| k.account.as_ref() == Some(&capped);
        assert_eq!(
            pick.pick(now, held_back),
            Some((key("a", Some(&other)), (), MAX_FETCH)),
            "the other account's lane, alone among those that may go, may fetch a batch"
        );
        pick.mark(&key("a", Some(&other)), 1, 0, now);
        assert_eq!(pick.pick(now, held_back), None, "the capped lane waits, with work, for a slot of its account");
        assert_eq!(picked(&pick, now), Some(key("a", Some(&capped))), "and goes once its account has one");
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
