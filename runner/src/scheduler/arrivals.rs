//! How long a lane's oldest waiting job has waited, known without asking NATS: the input of
//! aging (a job waiting longer than `PRIORITY_AGING_SECONDS` counts one level higher, see
//! [`super::fair_pick`]).
//!
//! Every runner serving a model hears every job of it published (its doorbell), in the order
//! the stream stores them, so it keeps when each of a lane's jobs was announced. A fetch tells
//! how many of the lane's jobs are still waiting after the one it brought (the delivery's
//! `pending`): those are the newest announced, and the oldest of them is the lane's head.
//!
//! What it gives up, each mended by the lane's next fetch on this runner:
//! - jobs started by other runners meanwhile are still counted here, so the head may look
//!   older than it is (a lane may age a little early);
//! - jobs this runner never heard announced (queued before it started, or handed back by a
//!   runner that died) are taken to have waited since the fetched job was published, or since
//!   the scan that found them: never older than they are.
//!
//! Announcements within [`BUCKET`] share one entry, and a lane keeps at most [`MAX_ENTRIES`],
//! so a flood of one lane costs a few entries a second, not one per job.

use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

/// Announcements this close together share an entry (and its time, the first's).
const BUCKET: Duration = Duration::from_millis(100);
/// The most entries a lane keeps; past it, announcements join the newest.
const MAX_ENTRIES: usize = 4096;

/// The jobs of one lane announced and not known to have started: when, oldest first.
#[derive(Debug, Default, Clone)]
pub struct Arrivals {
    /// (when announced, how many then), oldest first.
    entries: VecDeque<(Instant, u64)>,
    /// How many the entries hold.
    count: u64,
    /// Jobs ahead of every entry that were never announced here, waiting at least since then.
    unannounced_since: Option<Instant>,
}

impl Arrivals {
    /// A job was announced at `now`.
    pub fn announced(&mut self, now: Instant) {
        self.count += 1;
        let full = self.entries.len() >= MAX_ENTRIES;
        match self.entries.back_mut() {
            Some((at, n)) if full || now.saturating_duration_since(*at) < BUCKET => *n += 1,
            _ => self.entries.push_back((now, 1)),
        }
    }

    /// A scan at `now` saw jobs in the lane: if nothing is known of them, they have waited at
    /// least since now.
    pub fn seen(&mut self, now: Instant) {
        if self.count == 0 && self.unannounced_since.is_none() {
            self.unannounced_since = Some(now);
        }
    }

    /// A fetch found `pending` jobs still waiting after the one it brought, which was
    /// published at `published` (when known): only the newest `pending` announced are.
    pub fn left(&mut self, pending: u64, published: Option<Instant>) {
        if pending > self.count {
            // Older jobs were never announced here: they came no earlier than the one fetched.
            let since = published.or(self.unannounced_since).or(self.entries.front().map(|e| e.0));
            self.unannounced_since = since;
            return;
        }
        self.unannounced_since = None;
        let mut drop = self.count - pending;
        self.count = pending;
        while drop > 0 {
            let Some(front) = self.entries.front_mut() else { break };
            if front.1 > drop {
                front.1 -= drop;
                break;
            }
            drop -= front.1;
            self.entries.pop_front();
        }
    }

    /// The lane has no job waiting.
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// How long the oldest waiting job has waited at `now` (zero when none is known).
    pub fn waited(&self, now: Instant) -> Duration {
        self.unannounced_since
            .or(self.entries.front().map(|e| e.0))
            .map_or(Duration::ZERO, |since| now.saturating_duration_since(since))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_is_the_oldest_of_the_jobs_a_fetch_says_still_wait() {
        let t0 = Instant::now();
        let mut lane = Arrivals::default();
        for s in 0..5 {
            lane.announced(t0 + Duration::from_secs(s));
        }
        assert_eq!(lane.waited(t0 + Duration::from_secs(10)), Duration::from_secs(10), "the first announced");
        lane.left(3, Some(t0 + Duration::from_secs(1)));
        assert_eq!(
            lane.waited(t0 + Duration::from_secs(10)),
            Duration::from_secs(8),
            "two started: the third is first"
        );
        lane.left(0, None);
        assert_eq!(lane.waited(t0 + Duration::from_secs(10)), Duration::ZERO, "none waits");
    }

    #[test]
    fn close_announcements_share_an_entry_and_a_fetch_splits_it() {
        let t0 = Instant::now();
        let mut lane = Arrivals::default();
        for _ in 0..1000 {
            lane.announced(t0);
        }
        lane.announced(t0 + Duration::from_secs(1));
        assert_eq!(lane.entries.len(), 2);
        lane.left(500, None);
        assert_eq!(
            lane.waited(t0 + Duration::from_secs(2)),
            Duration::from_secs(2),
            "499 of the first burst still wait"
        );
        lane.left(1, None);
        assert_eq!(lane.waited(t0 + Duration::from_secs(2)), Duration::from_secs(1));
    }

    #[test]
    fn jobs_never_announced_here_waited_since_the_fetched_one_was_published_or_the_scan() {
        let t0 = Instant::now();
        let mut lane = Arrivals::default();
        lane.seen(t0);
        assert_eq!(lane.waited(t0 + Duration::from_secs(3)), Duration::from_secs(3), "since the scan");
        lane.announced(t0 + Duration::from_secs(2));
        lane.left(10, Some(t0 - Duration::from_secs(30)));
        assert_eq!(lane.waited(t0), Duration::from_secs(30), "the fetched job's age bounds the older ones");
        lane.left(1, Some(t0));
        assert_eq!(lane.waited(t0 + Duration::from_secs(3)), Duration::from_secs(1), "only the announced one is left");
        lane.clear();
        assert_eq!(lane.waited(t0 + Duration::from_secs(3)), Duration::ZERO);
    }
}
