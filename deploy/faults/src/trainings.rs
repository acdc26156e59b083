//! Trainings under a fault: the `tune` fixture's predictor and trainer (real Cog servers)
//! behind the scenario's runner, a destination model of the account, and a few trainings of
//! [`TRAINING_SECONDS`] each started just before the fault, so one is running on the trainer
//! when the runner is killed and the others wait in its lane. A training is a job like a
//! prediction: each must end (run again after the redelivery, or fail with a message), never
//! stay `starting` or `processing`, and each that succeeded must have recorded its version.

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
}

/// Reads each training once the drain is over (the runner was down for `down`).
pub async fn check(api: &str, key: &str, ids: &[String], down: Duration) -> anyhow::Result<TrainingsTally> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let mut tally = TrainingsTally { created: ids.len(), ..TrainingsTally::default() };
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
                if readable { tally.succeeded += 1 } else { tally.wrong += 1 }
            }
            Some("failed") if training["error"]["message"].as_str().is_some_and(|m| !m.is_empty()) => {
                tally.failed_clearly += 1;
            }
            Some("starting" | "processing") => tally.stuck += 1,
            _ => tally.wrong += 1,
        }
    }
    Ok(tally)
}

impl TrainingsTally {
    /// The tally as JSON.
    pub fn json(&self) -> Value {
        json!({"created": self.created, "succeeded": self.succeeded, "failed_clearly": self.failed_clearly,
               "stuck": self.stuck, "wrong": self.wrong, "interrupted": self.interrupted})
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
        if self.interrupted == 0 {
            failures.push("the fault hit no training while it trained".into());
        }
        failures
    }
}
