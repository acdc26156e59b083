//! A capped account under a fault: the scenario's account is capped at [`CAP`] predictions
//! running at once, and every [`SAMPLE_EVERY`] the suite reads what runs on each runner (the
//! runners' `runner_jobs_in_flight`, read from every runner at the same moment: only this
//! account creates predictions). The cap must hold at every sample, through the kill of a
//! runner, and once the killed runner's slots age out the account must run [`CAP`] at once
//! again while its backlog lasts: a slot the dead runner leaked would keep it under.

use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The account's cap: under the suite's load (20 one-second predictions a second) a backlog
/// builds, so the cap is what limits it.
pub const CAP: u32 = 8;
/// How often what runs is read.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// What the samples found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapTally {
    /// The cap.
    pub cap: u32,
    /// Samples taken.
    pub samples: usize,
    /// The most predictions of the account running at once, at any sample.
    pub most: u64,
    /// Whether a sample after the fault's window saw the account run its full cap.
    pub full_after_fault: bool,
}

impl CapTally {
    /// The tally as JSON.
    pub fn json(&self) -> Value {
        json!({"cap": self.cap, "samples": self.samples, "most_running": self.most, "full_after_fault": self.full_after_fault})
    }
}

/// Caps the account `faults` at [`CAP`].
pub async fn cap(store: &common::store::Store) -> anyhow::Result<()> {
    let account = store.accounts().find_by_name("faults").await?.context("the account faults")?;
    store.accounts().set_max_concurrency(&account.id, Some(CAP)).await?;
    Ok(())
}

/// Samples the predictions running on `runners` (their metrics addresses) until `stop`; each
/// sample with when it was taken.
pub async fn sample(runners: Vec<String>, stop: CancellationToken) -> anyhow::Result<Vec<(Instant, u64)>> {
    let http = reqwest::Client::builder().timeout(Duration::from_millis(500)).build()?;
    let mut samples = Vec::new();
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    while !stop.is_cancelled() {
        tick.tick().await;
        let at = Instant::now();
        let reads = runners.iter().map(|url| in_flight(&http, url));
        // A killed runner does not answer: nothing runs there.
        let running: u64 = futures::future::join_all(reads).await.into_iter().flatten().sum();
        samples.push((at, running));
    }
    Ok(samples)
}

/// The predictions running on one runner, from its `/metrics`.
async fn in_flight(http: &reqwest::Client, metrics: &str) -> Option<u64> {
    let text = http.get(metrics).send().await.ok()?.text().await.ok()?;
    Some(
        text.lines()
            .filter(|line| line.starts_with("runner_jobs_in_flight{"))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
            .sum(),
    )
}

/// Sums up `samples` against [`CAP`]: `after` is when the fault's window closed.
pub fn tally(samples: &[(Instant, u64)], after: Option<Instant>) -> CapTally {
    CapTally {
        cap: CAP,
        samples: samples.len(),
        most: samples.iter().map(|(_, n)| *n).max().unwrap_or(0),
        full_after_fault: samples.iter().any(|(at, n)| after.is_none_or(|after| *at > after) && *n == u64::from(CAP)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tally_finds_the_most_and_a_full_cap_after_the_window() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let samples = [(at(1), 8), (at(2), 3), (at(3), 5), (at(4), 8)];
        let tally = tally(&samples, Some(at(3)));
        assert_eq!((tally.most, tally.full_after_fault), (8, true));
        let leaked = [(at(1), 8), (at(4), 7), (at(5), 7)];
        assert!(!super::tally(&leaked, Some(at(3))).full_after_fault, "a leaked slot keeps it under");
    }
}
