//! A job whose runner is killed on every delivery (docs/faults.md; a model that brings its
//! process down, say). The row's second runner declares the pool [`POOL`], so it alone runs the
//! deployment [`DEPLOYMENT`] of `demo/sleep` on that pool; the suite's load goes through the
//! deployment [`STEADY`] on the first runner's pool, `cpu` (a prediction of the model's route
//! runs on any pool, so it could land on the runner the row kills). At the fault one prediction of the deployment is created, a sleep of
//! [`SLEEP_SECONDS`] with its `completed` webhook, and on each delivery of its job that runs the
//! model its runner gets SIGKILL and is started again.
//!
//! What must hold, beside the suite's usual checks (the load's predictions all end, once, with
//! their webhooks) ([`PoisonTally::failures`]):
//! - the prediction fails with `JOB_DELIVERIES_EXHAUSTED` within [`BOUND`] of its creation,
//!   never `succeeded` nor left `processing`;
//! - its runner was killed on every delivery but the last: `RUNNER_MAX_DELIVER` (5) less one
//!   times, so the last delivery did not run the model again;
//! - its job left the row's jobs stream.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::{
    load::Target,
    topology::{Role, Topology},
};

/// The pool of the runner that gets the poisonous job.
pub const POOL: &str = "gpu";
/// The deployment on that pool.
const DEPLOYMENT: &str = "poison";
/// The deployment of the load, on the pool `cpu`.
const STEADY: &str = "steady";
/// How long the prediction would sleep: longer than a kill takes to come.
const SLEEP_SECONDS: u64 = 30;
/// The runners' `RUNNER_MAX_DELIVER` (the default).
const MAX_DELIVER: usize = 5;
/// How soon the prediction must fail: four deliveries, each killed once it runs and redelivered
/// after the ack wait (6 s by default), take about 30 s.
pub const BOUND: Duration = Duration::from_secs(60);
/// How long the row follows the prediction before it gives up on it.
const FOLLOW_FOR: Duration = Duration::from_secs(120);

/// What the row saw.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoisonTally {
    /// The prediction's status at the end.
    pub status: String,
    /// Its error code, if any.
    pub code: Option<String>,
    /// Seconds from its creation to its end, if it ended.
    pub ended_after_s: Option<f64>,
    /// Times its runner was killed while it ran.
    pub kills: usize,
    /// Jobs left in the row's jobs stream after the drain.
    pub jobs_left: u64,
}

impl PoisonTally {
    /// Why the row fails, if it does.
    pub fn failures(&self) -> Vec<String> {
        let mut why = Vec::new();
        if self.status != "failed" || self.code.as_deref() != Some("JOB_DELIVERIES_EXHAUSTED") {
            why.push(format!(
                "the poisonous prediction is {} ({:?}), not failed with JOB_DELIVERIES_EXHAUSTED",
                self.status, self.code
            ));
        }
        if self.ended_after_s.is_none_or(|s| s > BOUND.as_secs_f64()) {
            why.push(format!("it ended after {:?} s, not within {} s", self.ended_after_s, BOUND.as_secs()));
        }
        if self.kills != MAX_DELIVER - 1 {
            why.push(format!("its runner was killed {} times while it ran, not {}", self.kills, MAX_DELIVER - 1));
        }
        if self.jobs_left > 0 {
            why.push(format!("{} jobs left in the stream", self.jobs_left));
        }
        why
    }

    /// The tally as JSON.
    pub fn json(&self) -> Value {
        json!({"status": self.status, "code": self.code, "ended_after_s": self.ended_after_s,
               "kills": self.kills, "jobs_left": self.jobs_left})
    }
}

/// The load's creates: the suite's one-second sleeps, through [`STEADY`], each with `webhook`.
pub fn target(webhook: String) -> Target {
    Arc::new(move |_| {
        let body =
            json!({"input": {"seconds": 1}, "webhook": webhook, "webhook_events_filter": ["start", "completed"]});
        (format!("/v1/deployments/faults/{STEADY}/predictions"), body)
    })
}

/// Starts the runner of [`POOL`] and creates the deployments of `demo/sleep`: [`DEPLOYMENT`]
/// on it, [`STEADY`] on `cpu`.
pub async fn prepare(topology: &mut Topology) -> anyhow::Result<()> {
    topology.add_runner(&[("RUNNER_MODELS", "demo/sleep"), ("RUNNER_HARDWARE", POOL)]).await?;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let api = &topology.apis[0];
    let model: Value = http
        .get(format!("{api}/v1/models/demo/sleep"))
        .bearer_auth(&topology.key)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let version = model["latest_version"]["id"].as_str().context("demo/sleep's latest version")?;
    for (name, pool) in [(DEPLOYMENT, POOL), (STEADY, "cpu")] {
        let body = json!({"name": name, "model": "demo/sleep", "version": version, "hardware": pool,
                          "min_instances": 0, "max_instances": 1});
        let answer = http.post(format!("{api}/v1/deployments")).bearer_auth(&topology.key).json(&body).send().await?;
        anyhow::ensure!(answer.status() == 201, "the deployment {name} was not created: {}", answer.status());
    }
    Ok(())
}

/// Creates the prediction and kills its runner (the second) on each delivery of its job that
/// runs the model, until it ends or [`FOLLOW_FOR`] passed; returns its id and the kills. A
/// delivery runs the model unless it is the last (`RUNNER_MAX_DELIVER`): so the poison is
/// simulated as what it is, a model that takes its process down whenever it runs. Were the
/// last delivery to run the model, the prediction would succeed after its sleep, and the row
/// fail.
pub async fn inject(topology: &mut Topology, webhook: &str) -> anyhow::Result<(String, usize)> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let api = topology.apis[0].clone();
    let created = Instant::now();
    let answer: Value = http
        .post(format!("{api}/v1/deployments/faults/{DEPLOYMENT}/predictions"))
        .bearer_auth(&topology.key)
        .json(&json!({"input": {"seconds": SLEEP_SECONDS}, "webhook": webhook, "webhook_events_filter": ["completed"]}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let id = answer["id"].as_str().context("the prediction's id")?.to_owned();
    let prediction_id = common::domain::PredictionId::parse(&id).context("the prediction's id")?;
    let record = topology.setup.store.predictions().get(&prediction_id).await?.context("the prediction is stored")?;
    let bus = &topology.setup.bus;
    let consumer = common::lane::Lane::of(&record).consumer(bus.subjects());
    let stream = bus.jetstream().get_stream(bus.subjects().jobs_stream()).await?;
    let mut kills = 0;
    while created.elapsed() < FOLLOW_FOR {
        let status =
            status_of(&http, &api, &topology.key, &id).await?["status"].as_str().unwrap_or_default().to_owned();
        if matches!(status.as_str(), "succeeded" | "failed" | "canceled") {
            break;
        }
        // Deliveries so far: the lane's consumer carries this job alone.
        let delivered = match stream.get_consumer::<async_nats::jetstream::consumer::pull::Config>(&consumer).await {
            Ok(mut c) => c.info().await.map_or(0, |i| i.delivered.consumer_sequence as usize),
            Err(_) => 0,
        };
        if status == "processing" && delivered > kills && delivered < MAX_DELIVER {
            topology.kill(Role::Runner, 1).await?;
            kills += 1;
            println!("  killed the {POOL} runner on delivery {delivered} of the poisonous job");
            topology.restart(Role::Runner, 1).await?;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok((id, kills))
}

async fn status_of(http: &reqwest::Client, api: &str, key: &str, id: &str) -> anyhow::Result<Value> {
    Ok(http.get(format!("{api}/v1/predictions/{id}")).bearer_auth(key).send().await?.error_for_status()?.json().await?)
}

/// Tallies the prediction once everything drained.
pub async fn check(topology: &Topology, id: &str, kills: usize) -> anyhow::Result<PoisonTally> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let p = status_of(&http, &topology.apis[0], &topology.key, id).await?;
    let ended_after_s = match (p["created_at"].as_str(), p["completed_at"].as_str()) {
        (Some(from), Some(to)) => {
            let (from, to) = (chrono::DateTime::parse_from_rfc3339(from)?, chrono::DateTime::parse_from_rfc3339(to)?);
            Some((to - from).num_milliseconds() as f64 / 1000.0)
        }
        _ => None,
    };
    let bus = &topology.setup.bus;
    let mut stream = bus.jetstream().get_stream(bus.subjects().jobs_stream()).await?;
    let jobs_left = stream.info().await?.state.messages;
    Ok(PoisonTally {
        status: p["status"].as_str().unwrap_or_default().to_owned(),
        code: p["error"]["code"].as_str().map(str::to_owned),
        ended_after_s,
        kills,
        jobs_left,
    })
}
