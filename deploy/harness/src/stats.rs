//! Percentiles of measured durations.

use std::time::Duration;

/// Sorted samples.
pub struct Samples(Vec<Duration>);

impl Samples {
    /// The samples, sorted.
    pub fn new(mut samples: Vec<Duration>) -> Self {
        samples.sort_unstable();
        Self(samples)
    }

    /// The `p`-th percentile (0 to 100), nearest rank; zero when empty.
    pub fn percentile(&self, p: f64) -> Duration {
        if self.0.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * self.0.len() as f64).ceil().max(1.0) as usize;
        self.0[rank.min(self.0.len()) - 1]
    }

    /// How many samples.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Milliseconds with three decimals.
pub fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let s = Samples::new((1..=100).rev().map(Duration::from_millis).collect());
        assert_eq!(s.percentile(50.0), Duration::from_millis(50));
        assert_eq!(s.percentile(99.0), Duration::from_millis(99));
        assert_eq!(s.percentile(100.0), Duration::from_millis(100));
        assert_eq!(Samples::new(vec![]).percentile(50.0), Duration::ZERO);
        assert!(Samples::new(vec![]).is_empty() && !s.is_empty() && s.len() == 100);
    }
}
