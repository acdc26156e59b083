//! The totals of past minutes: read from the shared counter once per key and minute, in the
//! background, and kept.
//!
//! The first request of a key in a new minute needs the minute before's total. It waits for
//! the read at most [`PREVIOUS_WAIT`] (a read answers within a millisecond or two); past that
//! it is decided on what this replica knows of that minute (its own requests and the totals
//! the counter returned to it), and the read goes on for the requests after it. Requests that
//! need the same total share one read. So a counter stream that stalls (its leader lost with a
//! cluster node, a connection being re-established) slows the turn of a minute by at most
//! [`PREVIOUS_WAIT`], not by the read's whole timeout: before, every request in the first half
//! second of the minute waited [`CHECK_TIMEOUT`] (the fault suite measured a create p99 of
//! 507 ms with the stream leader killed). A read that fails or outlasts [`CHECK_TIMEOUT`]
//! opens the breaker, as a failed check always did.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use common::cache::TtlCache;
use futures::{
    FutureExt,
    future::{BoxFuture, Shared},
};

use super::{
    WINDOW_SECS,
    breaker::{Breaker, CHECK_TIMEOUT, OPEN_FOR},
};

/// How long a request waits for a past minute's total before it goes on without it.
pub const PREVIOUS_WAIT: Duration = Duration::from_millis(50);

/// A counter and a minute (Unix minutes).
type Slot = (String, i64);

/// Reads a counter's total of a minute.
pub type ReadTotal = Arc<dyn Fn(Slot) -> BoxFuture<'static, Result<i64, String>> + Send + Sync>;

/// A read in flight, shared by the requests waiting for it: the total, or `None` if it failed.
type Read = Shared<BoxFuture<'static, Option<i64>>>;

/// Past minutes' totals, read in the background.
pub struct PreviousTotals {
    read: ReadTotal,
    known: TtlCache<Slot, i64>,
    reading: Mutex<HashMap<Slot, Read>>,
    breaker: Arc<Breaker>,
}

impl PreviousTotals {
    /// Totals read with `read`; a failed read opens `breaker`.
    pub fn new(read: ReadTotal, breaker: Arc<Breaker>) -> Arc<Self> {
        Arc::new(Self {
            read,
            known: TtlCache::new(Duration::from_secs(WINDOW_SECS as u64), 100_000),
            reading: Mutex::new(HashMap::new()),
            breaker,
        })
    }

    /// The total of `counter` in `minute`, if the counter told it within [`PREVIOUS_WAIT`]
    /// (now or before).
    pub async fn total(self: &Arc<Self>, counter: &str, minute: i64) -> Option<i64> {
        let slot = (counter.to_owned(), minute);
        if let Some(total) = self.known.get(&slot) {
            return Some(total);
        }
        let read = self.reading().entry(slot.clone()).or_insert_with(|| self.start_read(slot)).clone();
        tokio::time::timeout(PREVIOUS_WAIT, read).await.ok().flatten()
    }

    fn reading(&self) -> std::sync::MutexGuard<'_, HashMap<Slot, Read>> {
        self.reading.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads `slot` in a task of its own (it outlives the requests that wait for it), keeps
    /// the total, and forgets the read once done.
    fn start_read(self: &Arc<Self>, slot: Slot) -> Read {
        let this = self.clone();
        let task = tokio::spawn(async move {
            let outcome = tokio::time::timeout(CHECK_TIMEOUT, (this.read)(slot.clone())).await;
            let total = match outcome {
                Ok(Ok(total)) => {
                    this.known.insert(slot.clone(), total);
                    Some(total)
                }
                failed => {
                    let reason = failed
                        .map_or_else(|_| format!("no answer within {CHECK_TIMEOUT:?}"), |r| format!("{:?}", r.err()));
                    if this.breaker.trip(Instant::now()) {
                        tracing::warn!(error = %reason, counter = slot.0, "rate limits not checked for {OPEN_FOR:?} (NATS unavailable); requests let through");
                    }
                    None
                }
            };
            this.reading().remove(&slot);
            total
        });
        task.map(|joined| joined.ok().flatten()).boxed().shared()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A reader that answers `total` after `delay`, counting its reads.
    fn reader(total: Result<i64, String>, delay: Duration, reads: Arc<AtomicUsize>) -> ReadTotal {
        Arc::new(move |_| {
            reads.fetch_add(1, Ordering::SeqCst);
            let total = total.clone();
            async move {
                tokio::time::sleep(delay).await;
                total
            }
            .boxed()
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_prompt_answer_is_used_and_kept() {
        let reads = Arc::new(AtomicUsize::new(0));
        let totals = PreviousTotals::new(reader(Ok(42), Duration::from_millis(2), reads.clone()), Arc::default());
        assert_eq!(totals.total("k", 7).await, Some(42));
        assert_eq!(totals.total("k", 7).await, Some(42));
        assert_eq!(reads.load(Ordering::SeqCst), 1, "read once per key and minute");
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_read_holds_a_request_up_no_longer_than_the_wait_and_serves_the_later_ones() {
        let reads = Arc::new(AtomicUsize::new(0));
        let breaker = Arc::new(Breaker::default());
        let totals = PreviousTotals::new(reader(Ok(42), Duration::from_millis(300), reads.clone()), breaker.clone());
        let asked = tokio::time::Instant::now();
        let (first, second) = tokio::join!(totals.total("k", 7), totals.total("k", 7));
        assert_eq!((first, second), (None, None), "decided without it");
        assert_eq!(asked.elapsed(), PREVIOUS_WAIT, "held up only this long");
        assert_eq!(reads.load(Ordering::SeqCst), 1, "one read for both");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(totals.total("k", 7).await, Some(42), "the read went on without them");
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        assert!(!breaker.is_open(Instant::now()), "slow is not failed");
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_that_never_answers_opens_the_breaker_and_is_tried_again_later() {
        let reads = Arc::new(AtomicUsize::new(0));
        let breaker = Arc::new(Breaker::default());
        let totals = PreviousTotals::new(reader(Ok(42), Duration::from_secs(3600), reads.clone()), breaker.clone());
        assert_eq!(totals.total("k", 7).await, None);
        tokio::time::sleep(CHECK_TIMEOUT).await;
        assert!(breaker.is_open(Instant::now()), "the counter stream is taken as unavailable");
        assert_eq!(totals.total("k", 7).await, None);
        assert_eq!(reads.load(Ordering::SeqCst), 2, "a failed read is not kept");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_read_opens_the_breaker() {
        let breaker = Arc::new(Breaker::default());
        let failing = reader(Err("no responders".into()), Duration::ZERO, Arc::default());
        let totals = PreviousTotals::new(failing, breaker.clone());
        assert_eq!(totals.total("k", 7).await, None);
        assert!(breaker.is_open(Instant::now()));
    }
}
