//! Cog model servers killed at random under load (docs/models.md, "Crashes"). The runner serves
//! [`MODEL`], a copy of the async fixture `waits` declared as a Cog project
//! (`RUNNER_COG=…=dir:`, so the runner starts its coglet itself, [`CONCURRENCY`] at once), and
//! the load creates its half-second predictions. For [`KILL_FOR`], every two to six seconds
//! one of the project's processes (coglet's server or its worker, whichever comes up) gets
//! SIGKILL.
//!
//! What must hold, beside the suite's usual checks (every accepted prediction ends, once, with
//! its `completed` webhook) ([`CrashTally::failures`]):
//! - the kills hit: at least one prediction failed with `MODEL_CRASHED`;
//! - every failure is explained: each failed prediction of the model has the code of a crash
//!   (`MODEL_CRASHED`) or of a boot the kill cut short (`MODEL_SETUP_FAILED`), and a message;
//! - the model came back: predictions created after the last kill succeed.

use std::{path::PathBuf, time::Duration};

use anyhow::Context;
use bson::doc;
use chrono::{DateTime, Utc};
use futures::TryStreamExt;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::load::Target;

/// The model the row's load runs.
pub const MODEL: &str = "acme/waits";
/// Its `cog.yaml`'s `concurrency.max`: the runner's slots for it, and coglet's.
pub const CONCURRENCY: usize = 8;
/// How long the kills go on.
pub const KILL_FOR: Duration = Duration::from_secs(60);
/// The load's rate in this row: four half-second predictions at once, half its slots, so a
/// reboot's backlog drains between kills.
pub const RATE: u64 = 8;
/// The load lasts past the kills, so predictions are created after the last one.
pub const LOAD_SECONDS: u64 = KILL_FOR.as_secs() + 15;

/// The project the runner serves, a copy of the fixture of its own (removed when dropped).
pub struct CogProject {
    dir: PathBuf,
}

impl CogProject {
    /// Copies the fixture `waits` with a `cog.yaml` of [`CONCURRENCY`].
    pub fn prepare() -> anyhow::Result<Self> {
        // The suite runs from the repository's root.
        let from = std::path::Path::new("runner/tests/fixtures/cog/waits");
        let dir = std::env::temp_dir().join(format!("faults-cog-crashes-{}", std::process::id()));
        let yaml = format!("predict: \"predict.py:Predictor\"\nconcurrency:\n  max: {CONCURRENCY}\n");
        harness::cog_server::project_copy(from, &dir, &yaml)?;
        Ok(Self { dir })
    }

    /// The runner's settings that declare it.
    pub fn vars(&self) -> anyhow::Result<Vec<(&'static str, String)>> {
        let python = std::env::var("COG_PYTHON").context("COG_PYTHON (the Python with coglet)")?;
        Ok(vec![("RUNNER_COG", format!("{MODEL}=dir:{}", self.dir.display())), ("RUNNER_COG_PYTHON", python)])
    }

    /// SIGKILLs one of the project's processes every two to six seconds for [`KILL_FOR`];
    /// returns how many kills there were and when the last one was.
    pub async fn kill_at_random(&self) -> (usize, Option<DateTime<Utc>>) {
        let deadline = Instant::now() + KILL_FOR;
        let (mut kills, mut last) = (0, None);
        while Instant::now() < deadline {
            let nanos = u64::from(Utc::now().timestamp_subsec_nanos());
            tokio::time::sleep(Duration::from_millis(2_000 + nanos % 4_000)).await;
            let pids = harness::processes::processes_in(&self.dir);
            if let Some(pid) = pids.get(nanos as usize % pids.len().max(1)) {
                let killed = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status();
                if killed.is_ok_and(|s| s.success()) {
                    kills += 1;
                    last = Some(Utc::now());
                }
            }
        }
        println!("  {kills} Cog server processes killed");
        (kills, last)
    }
}

impl Drop for CogProject {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Creates of [`MODEL`], half a second each, with a webhook to `webhook`.
pub fn target(webhook: String) -> Target {
    std::sync::Arc::new(move |_| {
        let body = json!({
            "input": {"seconds": 0.5}, "webhook": webhook, "webhook_events_filter": ["start", "completed"],
        });
        (format!("/v1/models/{MODEL}/predictions"), body)
    })
}

/// What the row saw.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CrashTally {
    /// Processes killed.
    pub kills: usize,
    /// Predictions of the model that ended.
    pub ended: usize,
    /// Of those, failed with `MODEL_CRASHED`.
    pub crashed: usize,
    /// Of those, failed with `MODEL_SETUP_FAILED`.
    pub setup_failed: usize,
    /// Failed with another code, or none: `(id, code)`, the first few.
    pub unexplained: Vec<(String, String)>,
    /// Created after the last kill.
    pub after_last_kill: usize,
    /// Of those, not succeeded.
    pub after_last_kill_failed: usize,
}

impl CrashTally {
    /// Why the row fails, if it does.
    pub fn failures(&self) -> Vec<String> {
        let mut why = Vec::new();
        if self.kills == 0 || self.crashed == 0 {
            why.push(format!(
                "{} kills, {} predictions failed as crashed: the kills hit nothing",
                self.kills, self.crashed
            ));
        }
        if !self.unexplained.is_empty() {
            why.push(format!("failures without a crash's code: {:?}", self.unexplained));
        }
        if self.after_last_kill == 0 || self.after_last_kill_failed > 0 {
            why.push(format!(
                "{} of {} predictions created after the last kill did not succeed",
                self.after_last_kill_failed, self.after_last_kill
            ));
        }
        why
    }

    /// The tally as JSON.
    pub fn json(&self) -> Value {
        json!({
            "kills": self.kills, "ended": self.ended, "crashed": self.crashed, "setup_failed": self.setup_failed,
            "unexplained": self.unexplained, "after_last_kill": self.after_last_kill,
            "after_last_kill_failed": self.after_last_kill_failed,
        })
    }
}

/// Tallies the model's ended predictions once everything ended.
pub async fn check(
    store: &common::store::Store,
    kills: usize,
    last_kill: Option<DateTime<Utc>>,
) -> anyhow::Result<CrashTally> {
    let account = store.accounts().find_by_name("faults").await?.context("the account faults")?;
    let predictions = store.database().collection::<bson::Document>("predictions");
    let found: Vec<bson::Document> = predictions
        .find(doc! { "account_id": account.id.as_str(), "model": MODEL, "completed_at": { "$ne": null } })
        .projection(doc! { "status": 1, "error": 1, "created_at": 1 })
        .await?
        .try_collect()
        .await?;
    let mut tally = CrashTally { kills, ended: found.len(), ..CrashTally::default() };
    // A second of slack: a create sent just before the last kill may be stamped just after it.
    let after = last_kill.map(|at| at + chrono::TimeDelta::seconds(1));
    for p in &found {
        let status = p.get_str("status").unwrap_or_default();
        let code = p.get_document("error").ok().and_then(|e| e.get_str("code").ok()).unwrap_or_default();
        if status == "failed" {
            match code {
                "MODEL_CRASHED" => tally.crashed += 1,
                "MODEL_SETUP_FAILED" => tally.setup_failed += 1,
                other if tally.unexplained.len() < 5 => {
                    tally.unexplained.push((p.get_str("_id").unwrap_or_default().to_owned(), other.to_owned()))
                }
                _ => {}
            }
        }
        let created = p.get_datetime("created_at").ok().map(|d| d.to_chrono());
        if let (Some(created), Some(after)) = (created, after)
            && created > after
        {
            tally.after_last_kill += 1;
            tally.after_last_kill_failed += usize::from(status != "succeeded");
        }
    }
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_whose_kills_missed_left_a_failure_unexplained_or_did_not_recover_fails() {
        let good = CrashTally {
            kills: 14,
            ended: 500,
            crashed: 30,
            setup_failed: 2,
            unexplained: vec![],
            after_last_kill: 60,
            after_last_kill_failed: 0,
        };
        assert!(good.failures().is_empty(), "{:?}", good.failures());
        let cases = [
            CrashTally { crashed: 0, ..good.clone() },
            CrashTally { unexplained: vec![("p".into(), "MODEL_SERVER_UNAVAILABLE".into())], ..good.clone() },
            CrashTally { after_last_kill_failed: 1, ..good.clone() },
            CrashTally { after_last_kill: 0, ..good.clone() },
        ];
        for bad in cases {
            assert_eq!(bad.failures().len(), 1, "{bad:?}");
        }
    }
}
