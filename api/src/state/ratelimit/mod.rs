//! The per-key rate limit, shared by every api replica: at most `rate_limit_rpm` requests in
//! any 60 seconds, estimated with a sliding-window counter; every authenticated request counts,
//! whatever the key's limit. New keys get the deployment's default, 3,000
//! (`DEFAULT_RATE_LIMIT_RPM`), so a client polling several long predictions every half second
//! is not refused.
//!
//! Each key has a counter per minute on a JetStream counter stream (`Nats-Incr`: atomic
//! increments that return the new total, no compare-and-swap races, whatever the number of
//! replicas). `limiter` adds requests to it: in batches while a key is far below its limit,
//! one by one close to it. The estimate weighs the previous minute's total by the part of it
//! still inside the last 60 seconds: `previous × (1 − elapsed/60) + current`. The previous
//! minute's total no longer changes, so each replica reads it once per key and minute and
//! keeps it; a request waits for that read at most 50 ms ([`previous`]). Every authenticated request counts, refused ones too, so a client that keeps
//! hammering stays refused.
//!
//! If NATS cannot be reached, or the counter does not answer within half a second, the
//! request is let through (and logged), and so are the next 5 seconds of requests without
//! asking ([`breaker`]): an outage of the limiter should not take the API down with it, nor
//! slow every request by a timeout.
//!
//! Every authenticated response carries `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
//! `X-RateLimit-Reset` (Unix seconds when the current minute ends); a 429 also `Retry-After`:
//! the seconds until the window has room again.

pub mod breaker;
mod limiter;
pub mod previous;

use std::sync::{Arc, Mutex};

use axum::{
    extract::Request,
    http::{HeaderMap, HeaderValue},
    middleware::Next,
    response::Response,
};

pub use limiter::RateLimiter;

/// The window of the limit.
pub const WINDOW_SECS: i64 = 60;

/// The limit's verdict on one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request may proceed.
    pub allowed: bool,
    /// The key's limit per minute.
    pub limit: u32,
    /// Requests left in the window (an estimate).
    pub remaining: u32,
    /// Unix seconds when the current minute ends.
    pub reset: i64,
    /// Once refused: the whole seconds until the window has room for one more request.
    pub retry_after: u32,
}

impl Decision {
    /// Adds the `X-RateLimit-*` headers (and `Retry-After` when refused).
    pub fn apply(&self, headers: &mut HeaderMap) {
        headers.insert("x-ratelimit-limit", HeaderValue::from(self.limit));
        headers.insert("x-ratelimit-remaining", HeaderValue::from(self.remaining));
        headers.insert("x-ratelimit-reset", HeaderValue::from(self.reset));
        if !self.allowed {
            headers.insert("retry-after", HeaderValue::from(self.retry_after));
        }
    }
}

/// The verdict for a key with `limit` per minute, given both minutes' totals and how far into
/// the current minute we are (0.0 to 1.0).
pub fn decide(limit: u32, previous: i64, current: i64, elapsed: f64, minute: i64) -> Decision {
    let (previous, current) = (previous.max(0) as f64, current.max(0) as f64);
    let estimate = previous * (1.0 - elapsed) + current;
    let limit_f = f64::from(limit);
    Decision {
        allowed: estimate <= limit_f,
        limit,
        remaining: (limit_f - estimate.ceil()).max(0.0) as u32,
        reset: (minute + 1) * WINDOW_SECS,
        retry_after: until_room(limit_f, previous, current, elapsed),
    }
}

/// The whole seconds (at least 1) until the sliding estimate has room for one more request,
/// if no other request comes: within this minute, once enough of the previous minute's
/// requests have slid out of the window; else in the next, once enough of this one's have.
fn until_room(limit: f64, previous: f64, current: f64, elapsed: f64) -> u32 {
    let room = limit - 1.0;
    let window = WINDOW_SECS as f64;
    let seconds = if current <= room {
        // previous × (1 − e) + current ≤ room, for e in this minute.
        let e = if previous > 0.0 { 1.0 - (room - current) / previous } else { elapsed };
        (e.max(elapsed) - elapsed) * window
    } else {
        // Next minute, this one's count is the previous: current × (1 − e) ≤ room.
        (1.0 - elapsed) * window + (1.0 - room.max(0.0) / current) * window
    };
    seconds.ceil().clamp(1.0, 2.0 * window) as u32
}

/// Where the authentication extractor leaves the decision for [`rate_limit_headers`].
#[derive(Clone, Default)]
pub struct DecisionSlot(Arc<Mutex<Option<Decision>>>);

impl DecisionSlot {
    /// Records the decision of this request.
    pub fn set(&self, decision: Decision) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(decision);
    }

    fn take(&self) -> Option<Decision> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// Adds the rate-limit headers to every response of an authenticated request.
pub async fn rate_limit_headers(mut request: Request, next: Next) -> Response {
    let slot = DecisionSlot::default();
    request.extensions_mut().insert(slot.clone());
    let mut response = next.run(request).await;
    if let Some(decision) = slot.take() {
        decision.apply(response.headers_mut());
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_up_to_the_limit_pass_and_the_next_is_refused() {
        assert!(decide(10, 0, 10, 0.5, 100).allowed);
        assert!(!decide(10, 0, 11, 0.5, 100).allowed);
        assert_eq!(decide(10, 0, 10, 0.5, 100).remaining, 0);
        assert_eq!(decide(10, 0, 3, 0.5, 100).remaining, 7);
    }

    #[test]
    fn the_previous_minute_weighs_by_the_part_still_in_the_window() {
        // 10 requests late last minute, 30 % into this one: 7 of them still count.
        assert!(decide(10, 10, 3, 0.3, 100).allowed);
        assert!(!decide(10, 10, 4, 0.3, 100).allowed);
        assert!(decide(10, 10, 10, 1.0, 100).allowed, "at the end of the minute the previous one no longer counts");
    }

    #[test]
    fn reset_is_the_end_of_the_current_minute() {
        assert_eq!(decide(10, 0, 1, 0.1, 100).reset, 101 * 60);
    }

    #[test]
    fn headers_name_the_limit_and_a_refusal_says_when_there_is_room() {
        let mut headers = HeaderMap::new();
        decide(10, 0, 11, 0.0, 1).apply(&mut headers);
        assert_eq!(headers["x-ratelimit-limit"], "10");
        assert_eq!(headers["x-ratelimit-remaining"], "0");
        // 11 this minute, at its start: the whole minute, then until 2 of 11 slid out (~11 s).
        assert_eq!(headers["retry-after"], "71");
    }

    #[test]
    fn retry_after_is_when_the_window_next_has_room() {
        // 32 last minute, 4 now, half way (estimate 20 of 16): room once the 32 weigh 11, at
        // 21/32 of the minute: 9.4 s on.
        assert_eq!(decide(16, 32, 4, 0.5, 1).retry_after, 10);
        // 12 in a minute of no earlier traffic, at 3/4 of it: its last 15 s, then until 3 of
        // the 12 slid out of the next (15 s).
        assert_eq!(decide(10, 0, 12, 0.75, 1).retry_after, 30);
        assert!(decide(600, 0, 601, 0.999, 1).retry_after >= 1);
    }
}
