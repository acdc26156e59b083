//! The create-throughput target measured head to head: api creates per second against raw
//! inserts of a prediction into the very collection the api writes to, in alternating rounds.
//!
//! Each round measures the raw rate at 8 and at 32 in flight (the levels where `insert_one`
//! does best here) and keeps the better, then the api's creates at 128 clients (where its group
//! commit does best). A round's ratio compares two rates taken seconds apart on the same
//! collection, so drift (the stand-in's JIT and garbage collector, the collection's growth)
//! hits both; the median over the rounds is the figure. The best level of each over a whole
//! run, by contrast, compares two maxima of noisy samples taken minutes apart: over five
//! reference runs it ranged from 46 % to 71 %.

use http::Method;
use serde_json::{Value, json};

use crate::scenarios::baselines::PredictionInserts;
use harness::cluster::{Cluster, round};
use harness::load_client::Template;
use harness::load_client::{CREATE_BODY, closed_loop};

/// One round.
#[derive(Clone, Copy, Debug)]
pub struct Round {
    /// The better raw rate of the two levels.
    pub inserts_per_second: f64,
    /// The api's creates per second at [`CREATE_CLIENTS`].
    pub creates_per_second: f64,
}

impl Round {
    /// Creates per raw insert.
    pub fn ratio(&self) -> f64 {
        self.creates_per_second / self.inserts_per_second
    }
}

/// The raw insert levels of a round.
const INSERT_LEVELS: [usize; 2] = [8, 32];
/// The api's clients in a round.
pub const CREATE_CLIENTS: usize = 128;

/// `rounds` rounds of `seconds` per measurement against the api of `cluster` and its database.
pub async fn measure(cluster: &Cluster, rounds: usize, seconds: u64) -> anyhow::Result<Vec<Round>> {
    let inserts = PredictionInserts::new(cluster.setup.store.predictions())?;
    let insert = |_: u64| inserts.one();
    let create =
        Template::new(Method::POST, &cluster.base, "/v1/models/demo/echo/predictions", &cluster.key)?.json(CREATE_BODY);
    let mut measured = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let mut inserts_per_second: f64 = 0.0;
        for level in INSERT_LEVELS {
            inserts_per_second =
                inserts_per_second.max(crate::measure::rate::rate(seconds, level, insert).await?.per_second);
        }
        let (creates_per_second, _, _) = closed_loop(seconds, CREATE_CLIENTS, &cluster.base, &create, 201).await?;
        measured.push(Round { inserts_per_second, creates_per_second });
    }
    Ok(measured)
}

/// The median ratio of `rounds` (the lower middle one of an even number).
pub fn median_ratio(rounds: &[Round]) -> Option<f64> {
    let mut ratios: Vec<f64> = rounds.iter().map(Round::ratio).collect();
    ratios.sort_by(f64::total_cmp);
    ratios.get(ratios.len().checked_sub(1)? / 2).copied()
}

/// The rounds as JSON.
pub fn json(rounds: &[Round]) -> Value {
    json!({
        "insert_levels": INSERT_LEVELS, "create_clients": CREATE_CLIENTS,
        "rounds": rounds.iter().map(|r| json!({
            "inserts_per_second": r.inserts_per_second.round(),
            "creates_per_second": r.creates_per_second.round(),
            "ratio": round(r.ratio(), 3),
        })).collect::<Vec<_>>(),
        "median_ratio": median_ratio(rounds).map(|r| round(r, 3)),
    })
}

/// The rounds as a table.
pub fn table(rounds: &[Round]) -> String {
    let mut table = String::from(
        "| round | raw inserts/s (best of 8, 32 in flight) | api creates/s (128 clients) | ratio |\n|---|---|---|---|\n",
    );
    for (n, r) in rounds.iter().enumerate() {
        table.push_str(&format!(
            "| {} | {:.0} | {:.0} | {:.2} |\n",
            n + 1,
            r.inserts_per_second,
            r.creates_per_second,
            r.ratio()
        ));
    }
    let median = median_ratio(rounds).map_or("-".into(), |m| format!("{m:.2}"));
    table.push_str(&format!("| median | | | {median} |\n"));
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_of(inserts: f64, creates: f64) -> Round {
        Round { inserts_per_second: inserts, creates_per_second: creates }
    }

    #[test]
    fn the_median_is_the_middle_ratio_whatever_the_order() {
        let rounds = [round_of(10.0, 9.0), round_of(10.0, 5.0), round_of(10.0, 7.0)];
        assert_eq!(median_ratio(&rounds), Some(0.7));
        assert!(table(&rounds).contains("| median | | | 0.70 |"));
    }

    #[test]
    fn an_even_number_of_rounds_takes_the_lower_middle_and_none_has_no_median() {
        assert_eq!(median_ratio(&[round_of(10.0, 8.0), round_of(10.0, 6.0)]), Some(0.6));
        assert_eq!(median_ratio(&[]), None);
    }
}
