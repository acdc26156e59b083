//! A rolling update of a model under load: `demo/versioned` runs as `v1` on one runner; a
//! runner of `v2` starts; once `v2` is the model's latest, the deployment `rollout` moves to it
//! (release 2) and the pinned clients pin `v2`; a second later the `v1` runner gets SIGTERM.
//!
//! The load is the suite's rate of one-second predictions, each with its webhook: half pinned
//! (`POST /v1/predictions` with `demo/versioned:<the version pinned clients use>`), a quarter by
//! the model's route (its latest version), a quarter through the deployment. Afterwards every
//! prediction is read back: each must have succeeded, on the version it names (the model
//! answers `version <id>`), both versions must have run, and the deployment's predictions on
//! both. Pinned-`v1` predictions created before the `v1` runner stopped can only have finished
//! on it: it drains the jobs its lanes announced before it exits.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::Context;
use serde_json::{Value, json};

use crate::{
    load::Target,
    topology::{Role, Topology},
};

/// The model the rollout moves.
pub const MODEL: &str = "demo/versioned";
/// The settings of the first runner (and of every other service, which ignore them).
pub const V1_RUNNER: [(&str, &str); 2] = [("RUNNER_MODELS", MODEL), ("RUNNER_MODEL_VERSIONS", "demo/versioned=v1")];
/// The deployment's name.
const DEPLOYMENT: &str = "rollout";

/// What the read-back found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RolloutTally {
    /// Predictions read back.
    pub read: usize,
    /// Of those, not `succeeded`.
    pub unsuccessful: usize,
    /// Of those, answered by a version other than the one they name.
    pub wrong_version: usize,
    /// Predictions that ran on `v1`, and on `v2`.
    pub on_v1: usize,
    /// Predictions that ran on `v2`.
    pub on_v2: usize,
    /// Whether the deployment's predictions ran on both versions.
    pub deployment_on_both: bool,
}

impl RolloutTally {
    /// The tally as JSON.
    pub fn json(&self) -> Value {
        json!({"read": self.read, "unsuccessful": self.unsuccessful, "wrong_version": self.wrong_version,
               "on_v1": self.on_v1, "on_v2": self.on_v2, "deployment_on_both": self.deployment_on_both})
    }
}

/// The version pinned clients use, switched by the rollout.
#[derive(Clone)]
pub struct Pinned(Arc<Mutex<&'static str>>);

impl Pinned {
    /// Pinned clients start on `v1`.
    pub fn new() -> Self {
        Self(Arc::new(Mutex::new("v1")))
    }

    fn get(&self) -> &'static str {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set(&self, version: &'static str) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = version;
    }
}

/// Creates the deployment `rollout` of [`MODEL`] at `v1`.
pub async fn prepare(topology: &Topology) -> anyhow::Result<()> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    latest_becomes(&http, topology, "v1").await?;
    let body = json!({"name": DEPLOYMENT, "model": MODEL, "version": "v1", "hardware": "cpu",
                      "min_instances": 1, "max_instances": 2});
    let answer =
        http.post(format!("{}/v1/deployments", topology.apis[0])).bearer_auth(&topology.key).json(&body).send().await?;
    anyhow::ensure!(answer.status() == 201, "the deployment was not created: {}", answer.status());
    Ok(())
}

/// The rollout's creates: half pinned, a quarter by the model's route, a quarter through the
/// deployment, each with `webhook`.
pub fn target(pinned: Pinned, webhook: String) -> Target {
    Arc::new(move |n| {
        let events = json!(["start", "completed"]);
        let input = json!({"seconds": 1});
        match n % 4 {
            0 | 1 => {
                let version = format!("{MODEL}:{}", pinned.get());
                let body =
                    json!({"version": version, "input": input, "webhook": webhook, "webhook_events_filter": events});
                ("/v1/predictions".to_owned(), body)
            }
            2 => {
                let body = json!({"input": input, "webhook": webhook, "webhook_events_filter": events});
                (format!("/v1/models/{MODEL}/predictions"), body)
            }
            _ => {
                let body = json!({"input": input, "webhook": webhook, "webhook_events_filter": events});
                (format!("/v1/deployments/faults/{DEPLOYMENT}/predictions"), body)
            }
        }
    })
}

/// How long creates sent before the switch to `v2` may take to be stored and published.
const IN_FLIGHT_CREATES_LAND: Duration = Duration::from_secs(1);

/// The rollout itself: a `v2` runner, the deployment and the pinned clients moved to it once
/// it is the latest, then SIGTERM of the `v1` runner.
pub async fn roll(topology: &mut Topology, pinned: &Pinned) -> anyhow::Result<()> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    topology.add_runner(&[("RUNNER_MODEL_VERSIONS", "demo/versioned=v2")]).await?;
    latest_becomes(&http, topology, "v2").await?;
    let moved = http
        .patch(format!("{}/v1/deployments/faults/{DEPLOYMENT}", topology.apis[0]))
        .bearer_auth(&topology.key)
        .json(&json!({"version": "v2"}))
        .send()
        .await?;
    anyhow::ensure!(moved.status() == 200, "the deployment did not move: {}", moved.status());
    pinned.set("v2");
    // As an operator shifts traffic and then waits: creates of v1 already sent land (and ring
    // the v1 runner's lanes) before it stops; one that reached the api after the runner's
    // drain had ended would wait for a v1 runner for good (seen once in about 20 runs).
    tokio::time::sleep(IN_FLIGHT_CREATES_LAND).await;
    println!("  v2 is the latest and the deployment's release 2; stopping the v1 runner");
    topology.terminate(Role::Runner, 0).await
}

/// Waits (up to 30 s) until the model's latest version is `version`.
async fn latest_becomes(http: &reqwest::Client, topology: &Topology, version: &str) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let model: Value = http
            .get(format!("{}/v1/models/{MODEL}", topology.apis[0]))
            .bearer_auth(&topology.key)
            .send()
            .await?
            .json()
            .await?;
        if model["latest_version"]["id"] == version {
            return Ok(());
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "{MODEL}'s latest never became {version}: {model}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Reads back every prediction of `ids` and sums up what ran where.
pub async fn check(topology: &Topology, ids: &[String]) -> anyhow::Result<RolloutTally> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let mut tally = RolloutTally::default();
    let mut deployment_versions = std::collections::HashSet::new();
    for id in ids {
        let p: Value = http
            .get(format!("{}/v1/predictions/{id}", topology.apis[0]))
            .bearer_auth(&topology.key)
            .send()
            .await?
            .json()
            .await
            .with_context(|| format!("reading {id}"))?;
        tally.read += 1;
        let version = p["version"].as_str().unwrap_or_default();
        if p["status"] != "succeeded" {
            tally.unsuccessful += 1;
        }
        if p["output"] != format!("version {version}") {
            tally.wrong_version += 1;
        }
        match p["output"].as_str() {
            Some("version v1") => tally.on_v1 += 1,
            Some("version v2") => tally.on_v2 += 1,
            _ => {}
        }
        if !p["deployment"].is_null() {
            deployment_versions.insert(version.to_owned());
        }
    }
    tally.deployment_on_both = deployment_versions.len() == 2;
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_the_creates_are_pinned_and_follow_the_switch() {
        let pinned = Pinned::new();
        let target = target(pinned.clone(), "http://127.0.0.1:1/hook".into());
        let paths: Vec<String> = (0..4).map(|n| target(n).0).collect();
        assert_eq!(paths[0], "/v1/predictions");
        assert_eq!(paths[2], "/v1/models/demo/versioned/predictions");
        assert_eq!(paths[3], "/v1/deployments/faults/rollout/predictions");
        assert_eq!(target(0).1["version"], "demo/versioned:v1");
        pinned.set("v2");
        assert_eq!(target(1).1["version"], "demo/versioned:v2");
    }
}
