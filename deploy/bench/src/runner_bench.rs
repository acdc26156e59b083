//! `bench runner`: a runner (in this process) takes jobs published as the api would:
//! `--predictions` demo/echo predictions stored and published as fast as possible;
//! predictions per second = count / time from the first publish to the last `completed` event.

use std::time::Duration;

use anyhow::Context;
use common::{
    domain::{AccountId, Prediction, PredictionId, WebhookEvent},
    messages::StatusEvent,
    samples::starting_prediction,
};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::setup::Setup;

/// Options of `bench runner`.
#[derive(clap::Args)]
pub struct RunnerOptions {
    /// Predictions to run.
    #[arg(long, default_value_t = 2000)]
    predictions: usize,
    /// The runner's concurrency.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
}

fn prediction(model: &str, input: Value) -> Prediction {
    starting_prediction(AccountId::generate(), model.parse().expect("a valid model"), input)
}

async fn submit(setup: &Setup, p: &Prediction) -> anyhow::Result<()> {
    setup.store.predictions().insert(p).await?;
    setup.bus.publish_job(p).await?;
    Ok(())
}

/// Completed events of this run, as they happen.
async fn completions(setup: &Setup) -> anyhow::Result<impl futures::Stream<Item = PredictionId>> {
    let events = setup.bus.client().subscribe(setup.bus.subjects().all_events()).await?;
    Ok(events.filter_map(|m| async move {
        match serde_json::from_slice::<StatusEvent>(&m.payload).ok()? {
            StatusEvent::PredictionChangedV1(c) if c.event == WebhookEvent::Completed => Some(c.prediction_id),
            _ => None,
        }
    }))
}

fn start_runner(
    setup: &Setup,
    models: &str,
    concurrency: usize,
    cog: Option<&str>,
) -> anyhow::Result<CancellationToken> {
    let mut vars = setup.vars.clone();
    vars.insert("RUNNER_MODELS".into(), models.into());
    vars.insert("RUNNER_CONCURRENCY".into(), concurrency.to_string());
    if let Some(c) = cog {
        vars.insert("RUNNER_COG".into(), c.into());
    }
    let config = runner::config::RunnerConfig::from_env(&common::config::Env::from_fn(|k| vars.get(k).cloned()))?;
    let stop = CancellationToken::new();
    tokio::spawn(runner::run(config, stop.clone()));
    Ok(stop)
}

/// `bench runner`
pub async fn run_runner(options: RunnerOptions) -> anyhow::Result<Value> {
    let setup = Setup::new(&[]).await?;
    let mut done = Box::pin(completions(&setup).await?);
    let stop = start_runner(&setup, "demo/echo", options.concurrency, None)?;

    for _ in 0..50 {
        submit(&setup, &prediction("demo/echo", json!({"prompt": "warm", "repeat": 1}))).await?;
    }
    for _ in 0..50 {
        tokio::time::timeout(Duration::from_secs(60), done.next()).await.context("warm-up")?;
    }

    let all: Vec<Prediction> =
        (0..options.predictions).map(|_| prediction("demo/echo", json!({"prompt": "bench", "repeat": 2}))).collect();
    let started = Instant::now();
    for p in &all {
        submit(&setup, p).await?;
    }
    for _ in 0..options.predictions {
        tokio::time::timeout(Duration::from_secs(120), done.next()).await.context("predictions did not finish")?;
    }
    let secs = started.elapsed().as_secs_f64();
    stop.cancel();
    let per_second = options.predictions as f64 / secs;
    println!(
        "runner, demo/echo, concurrency {}\n| measure | value |\n|---|---|\n| predictions/s (stored + published + run, {} predictions) | {per_second:.0} |",
        options.concurrency, options.predictions
    );
    Ok(json!({"scenario": "runner", "model": "demo/echo", "concurrency": options.concurrency,
              "predictions": options.predictions, "seconds": secs, "predictions_per_second": per_second}))
}
