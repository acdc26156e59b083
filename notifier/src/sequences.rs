//! Per-prediction sequences: the events of one prediction are delivered one at a time, in the
//! order the stream holds them, so `completed` goes out after every earlier event of that
//! prediction still queued on this replica.
//!
//! Within a sequence `output` and `logs` events are spaced at least [`THROTTLE`] apart, and an
//! `output`/`logs` event is dropped when a newer event of the same kind, or the `completed`
//! event, is already queued or delivered: the latest state wins (each payload is the whole
//! prediction, so nothing is lost). Redelivered retries of such superseded events are
//! dropped the same way. `start` and `completed` are never dropped.
//!
//! Sequences live in memory and only order work; nothing about delivery itself is kept here
//! (that is JetStream's job), so losing them on a restart loses no event. Several replicas
//! order per replica; across replicas the shared consumer hands out events in stream order,
//! which keeps them in order in the normal case.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use common::{
    cache::TtlCache,
    domain::{PredictionId, WebhookEvent},
};
use tokio::time::Instant;

/// The least time between two `output` or two `logs` deliveries of one prediction.
pub const THROTTLE: Duration = Duration::from_millis(500);
/// How long a finished prediction's sequence summary is kept to drop stale retries.
const FINISHED_MEMORY: Duration = Duration::from_secs(6 * 3600);

/// What a sequence knows of its prediction.
#[derive(Debug, Default, Clone)]
struct Known {
    /// The newest sequence seen (queued or delivered) per throttled event kind.
    newest_output: i64,
    newest_logs: i64,
    /// Whether `completed` has been seen.
    completed: bool,
    /// When each throttled kind was last delivered.
    last_output: Option<Instant>,
    last_logs: Option<Instant>,
}

/// One prediction's sequence.
#[derive(Default)]
pub struct Sequence {
    turn: tokio::sync::Mutex<()>,
    known: Mutex<Known>,
}

/// Every sequence of this replica.
pub struct Sequences {
    sequences: Mutex<HashMap<PredictionId, Arc<Sequence>>>,
    finished: TtlCache<PredictionId, ()>,
}

impl Default for Sequences {
    fn default() -> Self {
        Self { sequences: Mutex::new(HashMap::new()), finished: TtlCache::new(FINISHED_MEMORY, 100_000) }
    }
}

/// Whether to deliver an event once its turn comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Deliver it (after waiting `wait` for the throttle).
    Deliver {
        /// How long to wait first.
        wait: Duration,
    },
    /// A newer state is queued or delivered: drop it.
    Superseded,
}

impl Sequences {
    /// The sequence of `id`, noting that an event of `kind` with `seq` is queued in it. Returns
    /// `None` when the prediction's `completed` was already delivered (a stale retry).
    pub fn enter(&self, id: &PredictionId, kind: WebhookEvent, seq: i64) -> Option<Arc<Sequence>> {
        if kind != WebhookEvent::Completed && self.finished.get(id).is_some() {
            return None;
        }
        let sequence = self.sequences.lock().unwrap_or_else(|p| p.into_inner()).entry(id.clone()).or_default().clone();
        {
            let mut known = sequence.known.lock().unwrap_or_else(|p| p.into_inner());
            match kind {
                WebhookEvent::Output => known.newest_output = known.newest_output.max(seq),
                WebhookEvent::Logs => known.newest_logs = known.newest_logs.max(seq),
                WebhookEvent::Completed => known.completed = true,
                WebhookEvent::Start | WebhookEvent::AccountBudget => {}
            }
        }
        Some(sequence)
    }

    /// Forgets the sequence of a prediction whose `completed` was delivered.
    pub fn finish(&self, id: &PredictionId) {
        self.sequences.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
        self.finished.insert(id.clone(), ());
    }
}

/// Waits out a throttle of `wait`, and not at all when it is zero (every `start` and
/// `completed`, and progress past the throttle). `sleep(ZERO)` is not free: tokio rounds a
/// deadline up to its next millisecond tick, so it registered a timer, woke the runtime's
/// driver (an eventfd write, then one more pass of its event loop) and held the webhook for
/// up to a millisecond: 1.9 such wake-ups per prediction in the notifier.
pub async fn wait_out(wait: Duration) {
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
}

impl Sequence {
    /// Waits for this sequence's turn (FIFO); the returned guard holds it.
    pub async fn turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.turn.lock().await
    }

    /// Whether (and when) the event of `kind` with `seq` should be delivered, in its turn.
    pub fn verdict(&self, kind: WebhookEvent, seq: i64) -> Verdict {
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        let (newest, last) = match kind {
            WebhookEvent::Output => (known.newest_output, known.last_output),
            WebhookEvent::Logs => (known.newest_logs, known.last_logs),
            WebhookEvent::Start | WebhookEvent::Completed | WebhookEvent::AccountBudget => {
                return Verdict::Deliver { wait: Duration::ZERO };
            }
        };
        if known.completed || newest > seq {
            return Verdict::Superseded;
        }
        let wait = last.map_or(Duration::ZERO, |at| THROTTLE.saturating_sub(at.elapsed()));
        Verdict::Deliver { wait }
    }

    /// Records that an event of `kind` was just delivered.
    pub fn delivered(&self, kind: WebhookEvent) {
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        match kind {
            WebhookEvent::Output => known.last_output = Some(Instant::now()),
            WebhookEvent::Logs => known.last_logs = Some(Instant::now()),
            WebhookEvent::Start | WebhookEvent::Completed | WebhookEvent::AccountBudget => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use WebhookEvent::*;

    fn id() -> PredictionId {
        PredictionId::generate()
    }

    #[test]
    fn an_older_output_is_superseded_by_a_newer_queued_one() {
        let sequences = Sequences::default();
        let p = id();
        let sequence = sequences.enter(&p, Output, 2).expect("a sequence");
        sequences.enter(&p, Output, 5).expect("a sequence");
        assert_eq!(sequence.verdict(Output, 2), Verdict::Superseded);
        assert_eq!(sequence.verdict(Output, 5), Verdict::Deliver { wait: Duration::ZERO });
        assert_eq!(sequence.verdict(Logs, 3), Verdict::Deliver { wait: Duration::ZERO }, "kinds are separate");
    }

    #[test]
    fn a_queued_completed_supersedes_output_and_logs_but_not_start() {
        let sequences = Sequences::default();
        let p = id();
        let sequence = sequences.enter(&p, Output, 2).expect("a sequence");
        sequences.enter(&p, Completed, 9).expect("a sequence");
        assert_eq!(sequence.verdict(Output, 2), Verdict::Superseded);
        assert_eq!(sequence.verdict(Start, 1), Verdict::Deliver { wait: Duration::ZERO });
        assert_eq!(sequence.verdict(Completed, 9), Verdict::Deliver { wait: Duration::ZERO });
    }

    #[tokio::test(start_paused = true)]
    async fn deliveries_of_one_kind_are_spaced_by_the_throttle() {
        let sequences = Sequences::default();
        let p = id();
        let sequence = sequences.enter(&p, Output, 1).expect("a sequence");
        sequence.delivered(Output);
        sequences.enter(&p, Output, 2).expect("a sequence");
        tokio::time::advance(Duration::from_millis(200)).await;
        assert_eq!(sequence.verdict(Output, 2), Verdict::Deliver { wait: Duration::from_millis(300) });
    }

    #[tokio::test]
    async fn a_zero_wait_is_over_at_once_without_a_timer() {
        use futures::FutureExt;
        // `sleep(ZERO)` would still be pending here: its deadline is rounded up to the
        // runtime's next millisecond tick.
        assert_eq!(wait_out(Duration::ZERO).now_or_never(), Some(()));
        assert_eq!(wait_out(Duration::from_millis(50)).now_or_never(), None, "a throttle is waited out");
    }

    #[test]
    fn retries_after_completed_was_delivered_are_dropped() {
        let sequences = Sequences::default();
        let p = id();
        sequences.enter(&p, Completed, 3).expect("a sequence");
        sequences.finish(&p);
        assert!(sequences.enter(&p, Output, 2).is_none());
        assert!(sequences.enter(&p, Completed, 3).is_some(), "completed itself is never dropped");
    }
}
