//! `bench trainings`: what a training and a fine-tune cost through the service, on the `tune`
//! fixture (coglet 0.23.1, a predictor and its trainer behind one runner).
//!
//! - **A training's overhead**: a training of 0 s, one at a time, from create to `succeeded`
//!   read back (polled every [`POLL`]), against a sync `POST /trainings` to the trainer alone.
//!   The service's part is the queue, the state machine, storing the weights as a file and
//!   recording the version; the polling interval bounds what it can show.
//! - **A fine-tune's prediction**: creates with `Prefer: wait`, one at a time, of the trained
//!   version (its model is handed the weights as a signed URL, which it downloads from the
//!   api) against the same creates of the base version (no weights).

use std::{path::Path, time::Duration};

use anyhow::Context;
use serde_json::{Value, json};
use tokio::time::Instant;

use harness::cluster::Cluster;
use harness::cog_server::CogServer;
use harness::stats::{Samples, ms};

/// The fixture of the runner's tests.
const FIXTURE: &str = "runner/tests/fixtures/cog/tune";
/// How often a training is read back while it runs.
const POLL: Duration = Duration::from_millis(10);

/// Options of `bench trainings`.
#[derive(clap::Args)]
pub struct Options {
    /// Trainings of each path.
    #[arg(long, default_value_t = 20)]
    trainings: usize,
    /// Predictions of each version.
    #[arg(long, default_value_t = 200)]
    predictions: usize,
}

/// `bench trainings`
pub async fn run(options: Options) -> anyhow::Result<Value> {
    let measured = measure(options.trainings, options.predictions).await?;
    println!("{}", table(&measured));
    Ok(measured)
}

/// Starts a system with the fixture and measures.
pub async fn measure(trainings: usize, predictions: usize) -> anyhow::Result<Value> {
    let predictor = CogServer::start(Path::new(FIXTURE), 1).await?;
    let trainer = CogServer::start_trainer(Path::new(FIXTURE)).await?;
    let mut cluster = Cluster::start(&[], false).await?;
    let outcome = async {
        let (cog, train) = (format!("acme/tune={}", predictor.base), format!("acme/tune={}", trainer.base));
        let runner =
            [("RUNNER_MODELS", "acme/tune"), ("RUNNER_COG", cog.as_str()), ("RUNNER_COG_TRAIN", train.as_str())];
        cluster.add_runners(1, &runner).await?;
        on(&cluster, &trainer.base, trainings, predictions).await
    }
    .await;
    cluster.stop().await?;
    outcome
}

async fn on(cluster: &Cluster, trainer: &str, trainings: usize, predictions: usize) -> anyhow::Result<Value> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
    let api = |path: &str| format!("{}{path}", cluster.base);
    http.post(api("/v1/models"))
        .bearer_auth(&cluster.key)
        .json(&json!({"owner": "bench", "name": "tuned", "visibility": "private", "hardware": "cpu"}))
        .send()
        .await?
        .error_for_status()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let base = loop {
        let model: Value = http.get(api("/v1/models/acme/tune")).bearer_auth(&cluster.key).send().await?.json().await?;
        if let Some(id) = model["latest_version"]["openapi_schema"]["components"]["schemas"]["TrainingInput"]
            .is_object()
            .then(|| model["latest_version"]["id"].as_str())
            .flatten()
        {
            break id.to_owned();
        }
        anyhow::ensure!(Instant::now() < deadline, "acme/tune was not registered with its trainer");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (mut direct, mut through) = (Vec::new(), Vec::new());
    let mut trained = String::new();
    for n in 0..trainings + 1 {
        let started = Instant::now();
        let answer = http
            .post(format!("{trainer}/trainings"))
            .json(&json!({"id": format!("bench{n}"), "input": {"suffix": "b"}}))
            .send()
            .await?;
        anyhow::ensure!(answer.status().is_success(), "the trainer answered {}", answer.status());
        let direct_took = started.elapsed();
        let started = Instant::now();
        let created: Value = http
            .post(api(&format!("/v1/models/acme/tune/versions/{base}/trainings")))
            .bearer_auth(&cluster.key)
            .json(&json!({"destination": "bench/tuned", "input": {"suffix": "b"}}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let id = created["id"].as_str().context("a training id")?;
        let done = loop {
            let got: Value =
                http.get(api(&format!("/v1/trainings/{id}"))).bearer_auth(&cluster.key).send().await?.json().await?;
            if got["status"] != "starting" && got["status"] != "processing" {
                break got;
            }
            anyhow::ensure!(started.elapsed() < Duration::from_secs(60), "training {id} did not end");
            tokio::time::sleep(POLL).await;
        };
        anyhow::ensure!(done["status"] == "succeeded", "training {id}: {done}");
        // The first of each is a warm-up.
        if n > 0 {
            direct.push(direct_took);
            through.push(started.elapsed());
        }
        trained = done["output"]["version"].as_str().context("output.version")?.to_owned();
    }
    let tuned = timed_predictions(&http, cluster, &trained, predictions, "hi b").await?;
    let plain = timed_predictions(&http, cluster, "acme/tune", predictions, "hi").await?;
    let (direct, through) = (Samples::new(direct), Samples::new(through));
    Ok(json!({
        "fixture": "tune (coglet 0.23.1, a predictor and its trainer)",
        "trainings": {
            "samples": through.len(),
            "poll_ms": ms(POLL),
            "direct_p50_ms": ms(direct.percentile(50.0)), "direct_p99_ms": ms(direct.percentile(99.0)),
            "through_service_p50_ms": ms(through.percentile(50.0)), "through_service_p99_ms": ms(through.percentile(99.0)),
        },
        "predictions": {
            "samples": tuned.len(),
            "trained_version_p50_ms": ms(tuned.percentile(50.0)), "trained_version_p99_ms": ms(tuned.percentile(99.0)),
            "base_version_p50_ms": ms(plain.percentile(50.0)), "base_version_p99_ms": ms(plain.percentile(99.0)),
        },
    }))
}

/// `count` creates of `version` with `Prefer: wait`, one at a time (after 5 not counted), each
/// checked to answer `expected`.
async fn timed_predictions(
    http: &reqwest::Client,
    cluster: &Cluster,
    version: &str,
    count: usize,
    expected: &str,
) -> anyhow::Result<Samples> {
    let mut took = Vec::new();
    for n in 0..count + 5 {
        let started = Instant::now();
        let answer: Value = http
            .post(format!("{}/v1/predictions", cluster.base))
            .bearer_auth(&cluster.key)
            .header("prefer", "wait=30")
            .json(&json!({"version": version, "input": {"prompt": "hi"}}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        anyhow::ensure!(answer["output"] == expected, "{version} answered {answer}");
        if n >= 5 {
            took.push(started.elapsed());
        }
    }
    Ok(Samples::new(took))
}

/// The figures as a Markdown table.
pub fn table(m: &Value) -> String {
    let t = &m["trainings"];
    let p = &m["predictions"];
    format!(
        "| measured | p50 ms | p99 ms |\n|---|---:|---:|\n\
         | a training, direct to the trainer | {} | {} |\n\
         | a training through the service (create to succeeded, polled every {} ms) | {} | {} |\n\
         | a prediction of the trained version (weights by signed URL) | {} | {} |\n\
         | a prediction of the base version | {} | {} |\n",
        t["direct_p50_ms"],
        t["direct_p99_ms"],
        t["poll_ms"],
        t["through_service_p50_ms"],
        t["through_service_p99_ms"],
        p["trained_version_p50_ms"],
        p["trained_version_p99_ms"],
        p["base_version_p50_ms"],
        p["base_version_p99_ms"],
    )
}
