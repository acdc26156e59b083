//! Priority levels under a fault: the scenario's account may ask for `high`, and its creates
//! take turns between the levels (one in ten `high`, one in ten `low`, the rest `normal`).
//! Levels are lanes on JetStream, not a runner's memory, so through a runner killed mid-run
//! every accepted prediction of every level must end (the suite's usual checks), and each must
//! show the level it was created at.

use std::sync::Arc;

use anyhow::Context;
use serde_json::{Value, json};

use crate::load::{Answer, Attempt, Target};

/// The level of the `n`-th create.
fn level_of(n: usize) -> &'static str {
    match n % 10 {
        0 => "high",
        5 => "low",
        _ => "normal",
    }
}

/// Lets the account `faults` ask for `high`.
pub async fn allow_high(store: &common::store::Store) -> anyhow::Result<()> {
    let account = store.accounts().find_by_name("faults").await?.context("the account faults")?;
    store.accounts().set_max_priority(&account.id, common::domain::Priority::High).await?;
    Ok(())
}

/// Creates of `demo/sleep` (1 s, with a webhook to `webhook`) at the levels in turn.
pub fn target(webhook: String) -> Target {
    Arc::new(move |n| {
        let body = json!({
            "input": {"seconds": 1}, "priority": level_of(n),
            "webhook": webhook, "webhook_events_filter": ["start", "completed"],
        });
        ("/v1/models/demo/sleep/predictions".to_owned(), body)
    })
}

/// What the levels' creates got.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LevelsTally {
    /// Accepted creates asking for high, normal and low.
    pub accepted: [usize; 3],
    /// Accepted predictions whose read-back showed another level than the create asked for.
    pub shown_otherwise: usize,
}

impl LevelsTally {
    /// Counts `attempts`.
    pub fn of(attempts: &[Attempt]) -> Self {
        let mut tally = Self::default();
        for attempt in attempts.iter().filter(|a| matches!(a.answer, Answer::Accepted(_))) {
            let Some(asked) = attempt.asked_priority.as_deref() else { continue };
            if let Some(at) = ["high", "normal", "low"].iter().position(|l| *l == asked) {
                tally.accepted[at] += 1;
            }
            if attempt.shown_priority.as_deref() != Some(asked) {
                tally.shown_otherwise += 1;
            }
        }
        tally
    }

    /// The tally as JSON.
    pub fn json(&self) -> Value {
        json!({"accepted_high_normal_low": self.accepted, "shown_otherwise": self.shown_otherwise})
    }

    /// What is wrong, if anything.
    pub fn failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        if self.accepted.contains(&0) {
            failures.push(format!("a level had no accepted create (high, normal, low: {:?})", self.accepted));
        }
        if self.shown_otherwise > 0 {
            failures.push(format!("{} predictions showed another priority than asked", self.shown_otherwise));
        }
        failures
    }
}
