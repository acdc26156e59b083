//! The rate limiter's circuit breaker: once a check against the shared counters fails or
//! times out, the next [`OPEN_FOR`] of requests skip NATS (they are let through and counted
//! locally, added to the counter once it answers again), so an unreachable counter stream
//! costs one slow request, not every request its timeout.

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

/// How long checks are skipped after a failure.
pub const OPEN_FOR: Duration = Duration::from_secs(5);
/// How long a read of the shared counter may take before it counts as a failure.
pub const CHECK_TIMEOUT: Duration = Duration::from_millis(500);

/// Open (skipping checks) until an instant, or closed.
#[derive(Debug, Default)]
pub struct Breaker {
    open_until: Mutex<Option<Instant>>,
}

impl Breaker {
    /// Whether checks are being skipped at `now`.
    pub fn is_open(&self, now: Instant) -> bool {
        self.open_until.lock().unwrap_or_else(|p| p.into_inner()).is_some_and(|until| now < until)
    }

    /// A check failed at `now`: skip checks for [`OPEN_FOR`]. Returns whether the breaker was
    /// closed until then (so the caller logs the outage once, not per request).
    pub fn trip(&self, now: Instant) -> bool {
        let mut open_until = self.open_until.lock().unwrap_or_else(|p| p.into_inner());
        let was_closed = open_until.is_none_or(|until| now >= until);
        *open_until = Some(now + OPEN_FOR);
        was_closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_opens_the_breaker_for_a_while_then_checks_resume() {
        let breaker = Breaker::default();
        let now = Instant::now();
        assert!(!breaker.is_open(now));
        assert!(breaker.trip(now), "the first failure is news");
        assert!(!breaker.trip(now), "a second one within the window is not");
        assert!(breaker.is_open(now + OPEN_FOR / 2));
        assert!(!breaker.is_open(now + OPEN_FOR), "the next request checks again");
    }
}
