//! Money, kept in integers so sums are exact: a [`Price`] per second in nano-dollars (a price
//! such as `0.000225` has six places, and nine are accepted), a cost or a budget in
//! [`Micros`] (micro-dollars). Both are shown and parsed as decimal strings in US dollars
//! (`"0.000225"`, `"25.00"`); no float ever holds an amount.
//!
//! A job's cost is its run time in milliseconds × its pool's price, rounded half up to the
//! micro-dollar once per job ([`Price::cost_of_millis`]); a group's cost is the sum of its
//! jobs' costs, so the per-job costs add up to every total exactly.

use std::fmt;

use serde::{Deserialize, Serialize};

/// An amount in micro-dollars (a cost, a sum of costs, a budget).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Micros(pub i64);

/// A price per second, in nano-dollars.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Price(pub i64);

/// Why a decimal amount is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidAmount(String);

/// Parses a non-negative decimal string with at most `places` digits after the point into an
/// integer of `10^-places` units.
fn parse_decimal(text: &str, places: u32, what: &str) -> Result<i64, InvalidAmount> {
    let refuse = || {
        InvalidAmount(format!(
            "{what} is a decimal number of US dollars with at most {places} digits after the point, such as \"{}\".",
            if places > 2 { "0.000225" } else { "25.00" }
        ))
    };
    let text = text.trim();
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(fraction) || (text.contains('.') && fraction.is_empty()) {
        return Err(refuse());
    }
    let fraction = fraction.trim_end_matches('0');
    if fraction.len() > places as usize {
        return Err(refuse());
    }
    let scale = 10_i64.pow(places);
    let whole: i64 = whole.parse().map_err(|_| refuse())?;
    let padded = format!("{fraction:0<width$}", width = places as usize);
    let fraction: i64 = if places == 0 { 0 } else { padded.parse().map_err(|_| refuse())? };
    whole.checked_mul(scale).and_then(|w| w.checked_add(fraction)).ok_or_else(refuse)
}

/// `units` of `10^-places` as a decimal string with at least `min_places` digits after the
/// point and no trailing zeros beyond them.
fn format_decimal(units: i64, places: u32, min_places: usize) -> String {
    let scale = 10_i64.pow(places);
    let sign = if units < 0 { "-" } else { "" };
    let (whole, fraction) = (units.unsigned_abs() / scale.unsigned_abs(), units.unsigned_abs() % scale.unsigned_abs());
    let mut fraction = format!("{fraction:0width$}", width = places as usize);
    while fraction.len() > min_places && fraction.ends_with('0') {
        fraction.pop();
    }
    if fraction.is_empty() { format!("{sign}{whole}") } else { format!("{sign}{whole}.{fraction}") }
}

impl Micros {
    /// Nothing.
    pub const ZERO: Self = Self(0);

    /// Parses dollars with at most six places (`"25.00"`).
    pub fn parse_dollars(text: &str) -> Result<Self, InvalidAmount> {
        parse_decimal(text, 6, "An amount").map(Self)
    }

    /// The amount in dollars, with two places at least (`"25.00"`, `"0.001234"`).
    pub fn dollars(self) -> String {
        format_decimal(self.0, 6, 2)
    }
}

impl fmt::Display for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.dollars())
    }
}

impl std::ops::AddAssign for Micros {
    fn add_assign(&mut self, other: Self) {
        self.0 = self.0.saturating_add(other.0);
    }
}

impl std::iter::Sum for Micros {
    fn sum<I: Iterator<Item = Self>>(iter: I) -> Self {
        Self(iter.map(|m| m.0).fold(0_i64, i64::saturating_add))
    }
}

impl Price {
    /// Free.
    pub const FREE: Self = Self(0);

    /// Parses dollars per second with at most nine places (`"0.000225"`).
    pub fn parse_dollars(text: &str) -> Result<Self, InvalidAmount> {
        parse_decimal(text, 9, "A price per second").map(Self)
    }

    /// The price in dollars per second, without trailing zeros (`"0"`, `"0.000225"`).
    pub fn dollars(self) -> String {
        format_decimal(self.0, 9, 0)
    }

    /// What `millis` milliseconds cost at this price, rounded half up to the micro-dollar.
    pub fn cost_of_millis(self, millis: i64) -> Micros {
        // ms × nano-dollars/s = 10^-12 dollars; 10^6 of them are one micro-dollar.
        let picos = i128::from(millis.max(0)) * i128::from(self.0.max(0));
        Micros(i64::try_from((picos + 500_000) / 1_000_000).unwrap_or(i64::MAX))
    }
}

impl fmt::Display for Price {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.dollars())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_read_and_show_as_decimal_dollars() {
        assert_eq!(Micros::parse_dollars("25.00"), Ok(Micros(25_000_000)));
        assert_eq!(Micros::parse_dollars("0.5"), Ok(Micros(500_000)));
        assert_eq!(Micros::parse_dollars("10"), Ok(Micros(10_000_000)));
        assert_eq!(Micros(25_000_000).dollars(), "25.00");
        assert_eq!(Micros(1_234).dollars(), "0.001234");
        assert_eq!(Micros(1_500_000).dollars(), "1.50");
        assert_eq!(Micros(0).dollars(), "0.00");
        for bad in ["", "-1", "1.", ".5", "1e3", "0.0000001", "abc", "1.2.3", "99999999999999999"] {
            assert!(Micros::parse_dollars(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn prices_keep_nine_places_and_drop_trailing_zeros() {
        assert_eq!(Price::parse_dollars("0.000225"), Ok(Price(225_000)));
        assert_eq!(Price::parse_dollars("0.000000001"), Ok(Price(1)));
        assert!(Price::parse_dollars("0.0000000001").is_err());
        assert_eq!(Price(225_000).dollars(), "0.000225");
        assert_eq!(Price(0).dollars(), "0");
        assert_eq!(Price(1_000_000_000).dollars(), "1");
    }

    #[test]
    fn a_cost_is_the_run_time_times_the_price_rounded_to_the_micro_dollar() {
        let price = Price::parse_dollars("0.000225").expect("a price");
        assert_eq!(price.cost_of_millis(1_000), Micros(225));
        assert_eq!(price.cost_of_millis(1_234), Micros(278), "277.65 rounds up");
        assert_eq!(price.cost_of_millis(2), Micros(0), "0.45 rounds down");
        assert_eq!(Price::FREE.cost_of_millis(60_000), Micros::ZERO);
        assert_eq!(price.cost_of_millis(-5), Micros::ZERO);
    }
}
