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

/// The median of `values`: the middle one, or the upper of the two middle ones of an even
/// number; `None` when there are none.
pub fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut sorted: Vec<f64> = values.into_iter().collect();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied()
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

    #[test]
    fn the_median_is_the_middle_value_or_the_upper_middle_one() {
        assert_eq!(median([3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median([4.0, 1.0, 3.0, 2.0]), Some(3.0));
        assert_eq!(median([]), None);
    }
}
