//! What the fair pick knows of each lane ([`LaneState`]), kept in a [`Table`] indexed by lane,
//! so a doorbell, a fetch's result or a look-up costs one hash look-up, however many lanes
//! there are (with 10,000 accounts waiting, scans of the whole list per job were most of the
//! runner's CPU).

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use super::{super::arrivals::Arrivals, MAX_RECHECK};
use common::lane::Lane;

/// How long a lane found empty waits first; each empty answer in a row doubles it.
pub(super) const FIRST_RECHECK: Duration = Duration::from_secs(1);
/// A doorbell can ring before the stream lets the job be fetched (the core-NATS copy of the
/// publish arrives as the stream stores it), so a lane found empty this soon after its
/// doorbell rang is asked again within milliseconds, not after [`FIRST_RECHECK`]. Measured
/// before: 1–2 % of one-at-a-time predictions started a whole second late.
pub(super) const RING_SETTLE: Duration = Duration::from_millis(100);
/// Quick re-asks of a lane found empty just after its doorbell (after 2, 4, 8 and 16 ms).
pub(super) const SETTLE_TRIES: u32 = 4;
/// What the scheduler knows of one lane.
#[derive(Debug, Clone)]
pub(super) struct LaneState {
    /// The last scan saw no job in it, and nothing rang it since: asked again only when its
    /// doorbell rings or a scan sees a job.
    pub(super) dormant: bool,
    /// When its doorbell last rang.
    pub(super) rung_at: Option<Instant>,
    /// When it was last found empty; `None` while it may have work.
    pub(super) checked_empty: Option<Instant>,
    /// When the current run of empty answers began.
    pub(super) empty_since: Option<Instant>,
    /// Empty answers in a row.
    pub(super) empty_streak: u32,
    /// Empty answers in a row that came just after its doorbell rang (see [`RING_SETTLE`]).
    pub(super) settling: u32,
    /// Doorbells rung since the jobs fetched made up for them: a job announced but not yet
    /// fetched. Only then is an empty answer worth a quick re-ask.
    pub(super) unanswered_rings: u32,
    /// When a job of it last started (ties go to the least recent).
    pub(super) last_served: u64,
    /// Its jobs waiting, as announced: how long the oldest has waited.
    pub(super) arrivals: Arrivals,
}

impl LaneState {
    pub(super) fn new() -> Self {
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

    pub(super) fn recheck_after(&self) -> Duration {
        if self.settling > 0 {
            return Duration::from_millis(1 << self.settling);
        }
        FIRST_RECHECK.saturating_mul(1 << self.empty_streak.saturating_sub(1).min(8)).min(MAX_RECHECK)
    }

    pub(super) fn may_have_work(&self, now: Instant) -> bool {
        !self.dormant && self.checked_empty.is_none_or(|at| now.duration_since(at) >= self.recheck_after())
    }

    pub(super) fn has_work(&mut self) {
        self.dormant = false;
        self.checked_empty = None;
        self.empty_since = None;
        self.empty_streak = 0;
        self.settling = 0;
    }
}

pub(super) struct Entry<T> {
    pub(super) key: Lane,
    /// Its model's place in the pick's list of models.
    pub(super) model: usize,
    pub(super) state: LaneState,
    pub(super) lane: T,
}

/// The lanes, in the order they were opened, with an index by key.
pub(super) struct Table<T> {
    entries: Vec<Entry<T>>,
    index: HashMap<Lane, usize>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Self { entries: Vec::new(), index: HashMap::new() }
    }
}

impl<T> Table<T> {
    pub(super) fn entries(&self) -> &[Entry<T>] {
        &self.entries
    }

    pub(super) fn entries_mut(&mut self) -> &mut [Entry<T>] {
        &mut self.entries
    }

    pub(super) fn get(&self, key: &Lane) -> Option<&Entry<T>> {
        self.index.get(key).map(|i| &self.entries[*i])
    }

    pub(super) fn get_mut(&mut self, key: &Lane) -> Option<&mut Entry<T>> {
        self.index.get(key).map(|i| &mut self.entries[*i])
    }

    /// Adds `entry`; `false` (and nothing changes) if its lane is known already.
    pub(super) fn insert(&mut self, entry: Entry<T>) -> bool {
        if self.index.contains_key(&entry.key) {
            return false;
        }
        self.index.insert(entry.key.clone(), self.entries.len());
        self.entries.push(entry);
        true
    }

    /// Keeps the lanes `keep` says to.
    pub(super) fn retain(&mut self, keep: impl FnMut(&Entry<T>) -> bool) {
        let before = self.entries.len();
        self.entries.retain(keep);
        if self.entries.len() != before {
            self.index = self.entries.iter().enumerate().map(|(i, e)| (e.key.clone(), i)).collect();
        }
    }
}
