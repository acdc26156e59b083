//! Counting requests per key and minute on the shared JetStream counters, mostly without a
//! round trip per request.
//!
//! While a key is far below its limit, a request is admitted on what this replica knows (the
//! total the counter last returned plus the requests it has admitted since) and only counted
//! locally as `pending`; every [`FLUSH_INTERVAL`] a background task adds each key's pending
//! requests to its counter with one increment. Local admission stops while `pending` would
//! exceed [`LOCAL_SHARE`] of the headroom this replica sees (and whenever fewer than
//! `1 / LOCAL_SHARE` requests are left): from there on every request increments the counter
//! itself, pending ones included, and is decided on the total that comes back, so the last
//! requests before the limit are decided on the count shared by all replicas.
//!
//! On one replica the count is exact: a request decided on the counter carries every pending
//! request with it and first waits for a flush in flight, so the total it gets back includes
//! every request admitted before it; local admissions are decided on a view that counts all
//! requests not yet confirmed (pending, flushing, sending), which can only over-count. Across
//! replicas a decision can miss only the other replicas' unflushed requests: at most
//! `LOCAL_SHARE` of their headroom each, for at most one flush interval. Requests admitted
//! while NATS is unreachable stay pending and are added once it is back; after a failed or
//! slow check the [`super::breaker`] lets requests through without asking for a few seconds.
//!
//! Every increment carries an id of its own (`Nats-Msg-Id`). One that failed may still have
//! been added (its answer lost, or late): it is kept apart as [`Batch`] and sent again under
//! the same id, which the stream drops as a duplicate if it had been added, so no request is
//! counted twice (a lost answer used to cost the key false 429s for the rest of the minute).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, Weak},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use common::bus::Bus;

use crate::store::ApiKeyRecord;
use futures::FutureExt;

use super::{
    Decision, WINDOW_SECS,
    breaker::{Breaker, CHECK_TIMEOUT, OPEN_FOR},
    decide,
    previous::PreviousTotals,
};

/// How often pending requests are added to the shared counters.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(50);
/// How long a flush waits for an increment's answer before it sends it again (under its id).
const FLUSH_TIMEOUT: Duration = Duration::from_secs(2);
/// How long an idle flusher sleeps before it looks again without being woken.
const IDLE_RECHECK: Duration = Duration::from_secs(1);
/// The part of the headroom a replica may admit before the others hear of it.
pub const LOCAL_SHARE: f64 = 0.05;

/// An increment sent under `id` whose outcome is not known: sent again under the same id.
#[derive(Debug, Clone, PartialEq)]
struct Batch {
    id: String,
    delta: i64,
}

impl Batch {
    fn new(delta: i64) -> Self {
        Self { id: format!("rl.{:032x}", rand::random::<u128>()), delta }
    }
}

/// What this replica knows of one key's count in one minute.
#[derive(Debug, Default, Clone, PartialEq)]
struct Tally {
    /// The highest total the shared counter has returned.
    total: i64,
    /// Requests admitted here and not yet sent to the counter.
    pending: i64,
    /// Requests in an increment the flusher has sent and not yet seen confirmed.
    flushing: i64,
    /// Requests in increments sent by requests decided on the counter, not yet confirmed.
    sending: i64,
    /// Increments that failed and may have been added: sent again under their ids, not
    /// merged into `pending` (a new id would count them twice).
    unconfirmed: Vec<Batch>,
}

impl Tally {
    /// This replica's view of the count: every request it knows of, confirmed or not (an
    /// unconfirmed one may already be in `total` too, so this can only over-count).
    fn view(&self) -> i64 {
        self.total + self.flushing + self.sending + self.pending + self.unsettled()
    }

    /// Requests in increments that failed and are to be sent again.
    fn unsettled(&self) -> i64 {
        self.unconfirmed.iter().map(|b| b.delta).sum()
    }

    /// Takes the outcome of an increment of `batch`: a new total, a duplicate (the batch was
    /// added before), or a failure (to be sent again under the same id).
    fn settle(&mut self, batch: Batch, result: &Result<Option<i64>, String>) {
        match result {
            Ok(Some(total)) => self.total = self.total.max(*total),
            Ok(None) => {}
            Err(_) => self.unconfirmed.push(batch),
        }
    }

    /// Admits one more request locally if the key is far enough below `limit`, returning the
    /// count it is decided on.
    fn admit_locally(&mut self, limit: u32, previous: i64, elapsed: f64) -> Option<i64> {
        let current = self.view() + 1;
        let estimate = previous.max(0) as f64 * (1.0 - elapsed) + current as f64;
        let headroom = f64::from(limit) - estimate;
        if (self.pending + 1) as f64 <= headroom * LOCAL_SHARE {
            self.pending += 1;
            Some(current)
        } else {
            None
        }
    }
}

/// The tallies, shared with the flusher.
#[derive(Default)]
struct Shared {
    tallies: Mutex<HashMap<(String, i64), Tally>>,
    /// Signalled after each flush round.
    flushed: tokio::sync::Notify,
    /// Signalled when a request is left pending: wakes an idle flusher.
    pending: tokio::sync::Notify,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, i64), Tally>> {
        self.tallies.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Counts requests per key on JetStream.
pub struct RateLimiter {
    bus: Bus,
    previous: Arc<PreviousTotals>,
    shared: Arc<Shared>,
    breaker: Arc<Breaker>,
}

/// The current minute (Unix minutes) and how far into it we are (0.0 to 1.0).
fn now_minute() -> (i64, f64) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64();
    let minute = (now / WINDOW_SECS as f64).floor() as i64;
    (minute, (now - (minute * WINDOW_SECS) as f64) / WINDOW_SECS as f64)
}

impl RateLimiter {
    /// A limiter counting on `bus`; starts the flusher, which stops when the limiter is dropped.
    pub fn new(bus: Bus) -> Self {
        let shared = Arc::new(Shared::default());
        tokio::spawn(flush_every_interval(bus.clone(), Arc::downgrade(&shared)));
        let breaker = Arc::new(Breaker::default());
        let reader = bus.clone();
        let read = Arc::new(move |(counter, minute): (String, i64)| {
            let bus = reader.clone();
            async move {
                let subjects = bus.subjects();
                let subject = subjects.rate_limit(&counter, minute);
                bus.read_counter(&subjects.rate_limit_stream(), &subject).await.map_err(|e| e.to_string())
            }
            .boxed()
        });
        Self { bus, previous: PreviousTotals::new(read, breaker.clone()), shared, breaker }
    }

    /// Counts one request of `key` and decides whether it may proceed: every authenticated
    /// request counts against the key's `rate_limit_rpm`, whatever its value.
    pub async fn check(&self, key: &ApiKeyRecord) -> Decision {
        self.check_counter(key.id.as_str(), key.rate_limit_rpm).await
    }

    /// Counts one event on `counter` (an API key's id, or another counter's name: one token
    /// of letters, digits and `_`) and decides whether it is within `limit` a minute.
    pub async fn check_counter(&self, counter: &str, limit: u32) -> Decision {
        let (minute, elapsed) = now_minute();
        let let_through =
            || Decision { allowed: true, limit, remaining: limit, reset: (minute + 1) * WINDOW_SECS, retry_after: 1 };
        let skip = |reason: String| {
            if self.breaker.trip(Instant::now()) {
                tracing::warn!(error = %reason, counter, "rate limits not checked for {OPEN_FOR:?} (NATS unavailable); requests let through");
            }
        };
        if self.breaker.is_open(Instant::now()) {
            self.shared.lock().entry((counter.to_owned(), minute)).or_default().pending += 1;
            self.shared.pending.notify_one();
            return let_through();
        }
        let previous = self.previous_total(counter, minute).await;
        let local =
            self.shared.lock().entry((counter.to_owned(), minute)).or_default().admit_locally(limit, previous, elapsed);
        let current = match local {
            Some(current) => {
                self.shared.pending.notify_one();
                current
            }
            None => match self.increment_now(counter, minute).await {
                Ok(total) => total,
                Err(e) => {
                    skip(e);
                    return let_through();
                }
            },
        };
        decide(limit, previous, current, elapsed, minute)
    }

    /// Adds this request and the key's pending ones to its counter, returning the new total.
    /// Waits for a flush of the key in flight first, so the total includes every request this
    /// replica admitted before. If the increment fails they all stay pending (this request is
    /// let through, so it counts). All within [`CHECK_TIMEOUT`], like any check: an increment
    /// that is not confirmed in time counts as failed (if it lands later, those requests are
    /// counted twice, for this minute only: strict, never lenient).
    async fn increment_now(&self, key: &str, minute: i64) -> Result<i64, String> {
        let deadline = tokio::time::Instant::now() + CHECK_TIMEOUT;
        let slot = (key.to_owned(), minute);
        let batch = loop {
            let flushed = self.shared.flushed.notified();
            tokio::pin!(flushed);
            flushed.as_mut().enable();
            {
                let mut tallies = self.shared.lock();
                let tally = tallies.entry(slot.clone()).or_default();
                if tally.flushing == 0 {
                    let batch = Batch::new(std::mem::take(&mut tally.pending) + 1);
                    tally.sending += batch.delta;
                    break batch;
                }
            }
            if tokio::time::timeout_at(deadline, flushed).await.is_err() {
                return Err(format!("the flush of its count did not end within {CHECK_TIMEOUT:?}"));
            }
        };
        let subject = self.bus.subjects().rate_limit(key, minute);
        let increment = self.bus.increment_counter(subject, &batch.id, batch.delta);
        let result = match tokio::time::timeout_at(deadline, increment).await {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(_) => Err(format!("no answer within {CHECK_TIMEOUT:?}")),
        };
        let mut tallies = self.shared.lock();
        let tally = tallies.entry(slot).or_default();
        tally.sending -= batch.delta;
        tally.settle(batch, &result);
        if result.is_err() {
            self.shared.pending.notify_one();
        }
        // A fresh id is never a duplicate; the increments still unsettled may or may not be in
        // the total, so they count too (strict, never lenient).
        result.map(|total| total.unwrap_or(tally.total) + tally.unsettled())
    }

    /// The requests this replica has admitted and not yet seen counted on the shared
    /// counters: 0 once every flush and resend has been confirmed.
    pub fn unsent(&self) -> i64 {
        self.shared.lock().values().map(|t| t.pending + t.flushing + t.sending + t.unsettled()).sum()
    }

    /// The key's total of the minute before `minute`: what the counter told (now, or before;
    /// see [`PreviousTotals`]), or what this replica knows of it if that is more (its last
    /// requests may still be pending, or the counter did not answer in time).
    async fn previous_total(&self, key: &str, minute: i64) -> i64 {
        let stored = self.previous.total(key, minute - 1).await.unwrap_or(0);
        let known = self.shared.lock().get(&(key.to_owned(), minute - 1)).map_or(0, Tally::view);
        stored.max(known)
    }
}

/// The flusher: adds every pending count to its counter each interval, and forgets minutes
/// that no longer count.
async fn flush_every_interval(bus: Bus, shared: Weak<Shared>) {
    let mut ticks = tokio::time::interval(FLUSH_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(shared) = shared.upgrade() else { return };
        let (minute, _) = now_minute();
        let due: Vec<((String, i64), Batch)> = {
            let mut tallies = shared.lock();
            // A minute older than the last no longer counts in any decision: what it still
            // had to send is dropped (resending it after the duplicate window could count it twice).
            tallies.retain(|(_, m), _| *m >= minute - 1);
            let mut due = Vec::new();
            for (slot, tally) in tallies.iter_mut() {
                let mut batches = std::mem::take(&mut tally.unconfirmed);
                if tally.pending > 0 {
                    batches.push(Batch::new(std::mem::take(&mut tally.pending)));
                }
                for batch in batches {
                    tally.flushing += batch.delta;
                    due.push((slot.clone(), batch));
                }
            }
            due
        };
        if due.is_empty() {
            // Idle: sleep until a request is left pending (a second at most, to notice that the
            // limiter is gone), instead of waking every interval for nothing.
            let _ = tokio::time::timeout(IDLE_RECHECK, shared.pending.notified()).await;
            continue;
        }
        let increments = due.into_iter().map(|((key, m), batch)| {
            let bus = &bus;
            async move {
                let increment = bus.increment_counter(bus.subjects().rate_limit(&key, m), &batch.id, batch.delta);
                let result = match tokio::time::timeout(FLUSH_TIMEOUT, increment).await {
                    Ok(result) => result.map_err(|e| e.to_string()),
                    Err(_) => Err(format!("no answer within {FLUSH_TIMEOUT:?}")),
                };
                ((key, m), batch, result)
            }
        });
        for (slot, batch, result) in futures::future::join_all(increments).await {
            let mut tallies = shared.lock();
            let tally = tallies.entry(slot).or_default();
            tally.flushing -= batch.delta;
            if let Err(e) = &result {
                tracing::debug!(error = %e, "rate-limit counts not confirmed yet; sent again under their id");
            }
            tally.settle(batch, &result);
        }
        shared.flushed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A NATS server that completes the handshake and answers pings, and nothing else: every
    /// publish and request is swallowed, as by a counter stream that stalls. Returns its URL.
    async fn silent_nats() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("nats://{}", listener.local_addr().expect("address"));
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let info = r#"INFO {"server_id":"silent","server_name":"silent","version":"2.10.0","proto":1,"headers":true,"max_payload":1048576}"#;
                    socket.write_all(format!("{info}\r\n").as_bytes()).await.ok();
                    let mut read = vec![0; 64 * 1024];
                    while let Ok(n) = socket.read(&mut read).await
                        && n > 0
                    {
                        let pings = read[..n].windows(6).filter(|w| w == b"PING\r\n").count();
                        for _ in 0..pings {
                            socket.write_all(b"PONG\r\n").await.ok();
                        }
                    }
                });
            }
        });
        url
    }

    #[tokio::test]
    async fn a_counter_that_does_not_answer_lets_the_request_through_within_the_check_timeout() {
        let subjects = common::subjects::Subjects::new("silent").expect("prefix");
        let bus = Bus::connect(&silent_nats().await, subjects, "test").await.expect("connected");
        let limiter = RateLimiter::new(bus);
        let asked = Instant::now();
        let decision = limiter.check_counter("key", 10).await;
        let took = asked.elapsed();
        assert!(decision.allowed, "an unreachable limiter lets requests through");
        assert!(took < CHECK_TIMEOUT * 4, "held up {took:?}, far past the check timeout");
        assert!(took >= CHECK_TIMEOUT, "a small limit is counted on the counter itself: {took:?}");
        let next = Instant::now();
        assert!(limiter.check_counter("key", 10).await.allowed);
        assert!(next.elapsed() < Duration::from_millis(200), "the breaker is open: no more waiting");
    }

    #[test]
    fn far_below_the_limit_requests_are_admitted_locally_up_to_a_share_of_the_headroom() {
        let mut tally = Tally::default();
        let admitted = (0..100).filter_map(|_| tally.admit_locally(1000, 0, 0.0)).count();
        // 1000 - n ≥ 20 (n + 1) holds up to n = 46.
        assert_eq!(admitted, 47);
        assert_eq!(tally.pending, 47);
        assert_eq!(tally.admit_locally(1000, 0, 0.0), None);
    }

    #[test]
    fn close_to_the_limit_nothing_is_admitted_locally() {
        let mut tally = Tally { total: 985, ..Tally::default() };
        assert_eq!(tally.admit_locally(1000, 0, 0.0), None, "15 left: fewer than 1 / LOCAL_SHARE");
        let mut small = Tally::default();
        assert_eq!(small.admit_locally(10, 0, 0.0), None, "a small limit is always counted on the spot");
    }

    #[test]
    fn the_previous_minute_uses_up_headroom_too() {
        let mut tally = Tally::default();
        assert_eq!(tally.admit_locally(1000, 1000, 0.0), None);
        assert_eq!(tally.admit_locally(1000, 1000, 0.5), Some(1), "half of it still counts: 500 left");
    }

    #[test]
    fn the_count_decided_on_includes_every_unconfirmed_request() {
        let mut tally = Tally { total: 100, pending: 3, flushing: 5, sending: 2, unconfirmed: vec![Batch::new(4)] };
        assert_eq!(tally.admit_locally(100_000, 0, 0.0), Some(115));
    }
}
