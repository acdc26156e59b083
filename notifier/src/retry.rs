//! The retry schedule: the delay before each retry, with ±20 % jitter so that many failed
//! deliveries do not all come back at the same instant. A delivery gets one attempt plus one
//! per step; after the last it is recorded as failed.

use std::time::Duration;

use rand::Rng;

/// Delays before the 2nd, 3rd, ... attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct RetrySchedule {
    steps: Vec<Duration>,
}

impl RetrySchedule {
    /// Parses comma-separated seconds (fractions allowed), e.g. `5,30,120`; empty = no retry.
    pub fn parse(text: &str) -> Result<Self, String> {
        let steps = text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<f64>()
                    .ok()
                    .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
                    .ok_or_else(|| format!("{s:?} is not a number of seconds"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { steps })
    }

    /// How many attempts a delivery gets in all.
    pub fn attempts(&self) -> u32 {
        self.steps.len() as u32 + 1
    }

    /// The delay after failed attempt `attempt` (1-based), jittered; `None` after the last.
    pub fn delay_after(&self, attempt: u32) -> Option<Duration> {
        let base = *self.steps.get(attempt.checked_sub(1)? as usize)?;
        let factor = rand::rng().random_range(0.8..=1.2);
        Some(base.mul_f64(factor))
    }

    /// The longest step (the cap on a receiver's `Retry-After`).
    pub fn longest(&self) -> Duration {
        self.steps.iter().copied().max().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_schedule_gives_nine_attempts() {
        let s = RetrySchedule::parse("5,30,120,600,1800,3600,10800,21600").expect("valid");
        assert_eq!(s.attempts(), 9);
        assert_eq!(s.longest(), Duration::from_secs(21600));
    }

    #[test]
    fn delays_stay_within_twenty_percent_of_their_step() {
        let s = RetrySchedule::parse("10,100").expect("valid");
        for _ in 0..200 {
            let d = s.delay_after(1).expect("a retry").as_secs_f64();
            assert!((8.0..=12.0).contains(&d), "{d}");
        }
        assert!(s.delay_after(2).is_some());
        assert_eq!(s.delay_after(3), None, "no retry after the last attempt");
        assert_eq!(s.delay_after(0), None);
    }

    #[test]
    fn malformed_schedules_are_refused() {
        assert!(RetrySchedule::parse("5,x").is_err());
        assert!(RetrySchedule::parse("-1").is_err());
        assert_eq!(RetrySchedule::parse("").expect("no retries").attempts(), 1);
    }
}
