//! Trainings under a fault: the `tune` fixture's predictor and trainer (real Cog servers)
//! behind the scenario's runner, a destination model of the account, and a few trainings of
//! [`TRAINING_SECONDS`] each started just before the fault, so one is running on the trainer
//! when the runner is killed and the others wait in its lane. A training is a job like a
//! prediction: each must end (run again after the redelivery, or fail with a message), never
//! stay `starting` or `processing`, and each that succeeded must have recorded its version.
//! Its weights must be kept for good, and no weights may be kept that no version names (under
//! lost MongoDB answers, a recording may apply with its answer lost, or fail and be tried
//! again).

use std::{path::Path, time::Duration};

use anyhow::Context;
use harness::cog_server::CogServer;
use serde_json::{Value, json};

/// The fixture's directory, from the repository's root (where the suite runs).
const FIXTURE: &str = "runner/tests/fixtures/cog/tune";
/// How many trainings a scenario starts, and how long each trains.
const TRAININGS: usize = 3;
const TRAINING_SECONDS: f64 = 3.0;
/// The destination model, of the account `faults`.
const DESTINATION: &str = "faults/tuned";

/// The fixture's Cog servers, alive for the scenario.
pub struct Trainers {
    predictor: CogServer,
    trainer: CogServer,
}

impl Trainers {
    /// Starts both servers.
    pub async fn start() -> anyhow::Result<Self> {
        let predictor = CogServer::start(Path::new(FIXTURE), 1).await?;
        let trainer = CogServer::start_trainer(Path::new(FIXTURE)).await?;
        Ok(Self { predictor, trainer })
    }

    /// The runner's settings that serve them.
    pub fn vars(&self) -> [(&'static str, String); 2] {
        [
            ("RUNNER_COG", format!("acme/tune={}", self.predictor.base)),
            ("RUNNER_COG_TRAIN", format!("acme/tune={}", self.trainer.base)),
        ]
    }
}

/// Creates the destination and starts the trainings (webhooks to `webhook`); returns their ids.
pub async fn start(api: &str, key: &str, webhook: &str) -> anyhow::Result<Vec<String>> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let (owner, name) = DESTINATION.split_once('/').context("owner/name")?;
    http.post(format!("{api}/v1/models"))
        .bearer_auth(key)
        .json(&json!({"owner": owner, "name": name, "visibility": "private", "hardware": "cpu"}))
        .send()
        .await?
        .error_for_status()
        .context("creating the destination")?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let version = loop {
        let model: Value = http.get(format!("{api}/v1/models/acme/tune")).bearer_auth(key).send().await?.json().await?;
        if let Some(id) = model["latest_version"]["id"].as_str() {
            break id.to_owned();
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "acme/tune was not registered");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let mut ids = Vec::new();
    for n in 0..TRAININGS {
        let body = json!({
            "destination": DESTINATION,
            "input": {"suffix": format!("t{n}"), "seconds": TRAINING_SECONDS},
            "webhook": webhook, "webhook_events_filter": ["start", "completed"],
        });
        let created: Value = http
            .post(format!("{api}/v1/models/acme/tune/versions/{version}/trainings"))
            .bearer_auth(key)
            .json(&body)
            .send()
            .await?
            .error_for_status()
            .context("creating a training")?
            .json()
            .await?;
        ids.push(created["id"].as_str().context("a training id")?.to_owned());
    }
    Ok(ids)
}

/// How the trainings ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrainingsTally {
    /// Started.
    pub created: usize,
    /// Succeeded, with their version recorded.
    pub succeeded: usize,
    /// Failed with a message saying why.
    pub failed_clearly: usize,
    /// Not ended (still `starting` or `processing`).
    pub stuck: usize,
    /// Ended after running longer than one training and the runner's downtime: the ones the
    /// fault hit while they trained, and which ran again.
    pub interrupted: usize,
    /// Ended otherwise: succeeded without a readable version, failed without a message, or
    /// canceled.
    pub wrong: usize,
    /// Weights kept for good that no succeeded training names.
    pub orphaned_weights: usize,
    /// Weights of a succeeded training that still expire.
    pub expiring_weights: usize,
    /// Whether the fault stops the runner, so some training must have run again.
    pub interrupting: bool,
}

/// Reads each training once the drain is over (the runner was down for `down`; `interrupting`
/// when the fault stops it), then the account's weights.
pub async fn check(
    api: &str,
    key: &str,
    ids: &[String],
    down: Duration,
    interrupting: bool,
) -> anyhow::Result<TrainingsTally> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let mut tally = TrainingsTally { created: ids.len(), interrupting, ..TrainingsTally::default() };
    let mut named = Vec::new();
    for id in ids {
        let training: Value =
            http.get(format!("{api}/v1/trainings/{id}")).bearer_auth(key).send().await?.json().await?;
        let ran = training["metrics"]["predict_time"].as_f64().unwrap_or(0.0);
        if ran > TRAINING_SECONDS + down.as_secs_f64() {
            tally.interrupted += 1;
        }
        match training["status"].as_str() {
            Some("succeeded") => {
                let version = training["output"]["version"].as_str().and_then(|v| v.split_once(':'));
                let readable = match version {
                    Some((model, id)) => {
                        let url = format!("{api}/v1/models/{model}/versions/{id}");
                        http.get(url).bearer_auth(key).send().await?.status().is_success()
                    }
                    None => false,
                };
                if readable {
                    tally.succeeded += 1
                } else {
                    tally.wrong += 1
                }
                let weights = training["output"]["weights"].as_str().unwrap_or_default();
                named
                    .extend(weights.split("/files/").nth(1).and_then(|rest| rest.split('/').next()).map(str::to_owned));
            }
            Some("failed") if training["error"]["message"].as_str().is_some_and(|m| !m.is_empty()) => {
                tally.failed_clearly += 1;
            }
            Some("starting" | "processing") => tally.stuck += 1,
            _ => tally.wrong += 1,
        }
    }
    let files: Value =
        http.get(format!("{api}/v1/files?limit=100")).bearer_auth(key).send().await?.error_for_status()?.json().await?;
    for file in files["results"].as_array().context("a page of files")? {
        let (id, name) = (file["id"].as_str().unwrap_or_default(), file["name"].as_str().unwrap_or_default());
        let kept = file["expires_at"].is_null();
        match (named.iter().any(|n| n == id), kept) {
            (true, false) => tally.expiring_weights += 1,
            (false, true) if name.ends_with("-weights") => tally.orphaned_weights += 1,
            _ => {}
        }
    }
    Ok(tally)
}

impl TrainingsTally {
    /// The tally as JSON.
    pub fn json(&self) -> Value {
        json!({"created": self.created, "succeeded": self.succeeded, "failed_clearly": self.failed_clearly,
               "stuck": self.stuck, "wrong": self.wrong, "interrupted": self.interrupted,
               "orphaned_weights": self.orphaned_weights, "expiring_weights": self.expiring_weights})
    }

    /// What is wrong, if anything.
    pub fn failures(&self) -> Vec<String> {
        let mut failures = Vec::new();
        if self.stuck > 0 {
            failures.push(format!("{} trainings never ended", self.stuck));
        }
        if self.wrong > 0 {
            failures.push(format!("{} trainings ended without a version or a message", self.wrong));
        }
        if self.succeeded == 0 {
            failures.push("no training succeeded".into());
        }
        if self.interrupting && self.interrupted == 0 {
            failures.push("the fault hit no training while it trained".into());
        }
        if self.orphaned_weights > 0 {
            failures.push(format!("{} weights kept that no version names", self.orphaned_weights));
        }
        if self.expiring_weights > 0 {
            failures.push(format!("{} versions' weights still expire", self.expiring_weights));
        }
        failures
    }
}
