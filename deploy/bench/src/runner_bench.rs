//! The runner scenarios. A runner (in this process) takes jobs published as the api would:
//!
//! - `bench runner`: `--predictions` demo/echo predictions stored and published as fast as
//!   possible; predictions per second = count / time from the first publish to the last
//!   `completed` event.
//! - `bench cog --url http://127.0.0.1:PORT`: a Cog echo server (e.g. the test fixture). The
//!   same input is sent `--samples` times, one at a time, (a) directly with a sync `POST
//!   /predictions`, and (b) through the runner (store + publish the job, wait for its
//!   `completed` event). The difference of the medians is what the runner adds.

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

use crate::{
    setup::Setup,
    stats::{Samples, ms},
};

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

/// Options of `bench cog`.
#[derive(clap::Args)]
pub struct CogOptions {
    /// The Cog echo server's base URL.
    #[arg(long)]
    url: String,
    /// Predictions per path.
    #[arg(long, default_value_t = 300)]
    samples: usize,
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

/// `bench cog`
pub async fn run_cog(options: CogOptions) -> anyhow::Result<Value> {
    let input = json!({"prompt": "hello", "repeat": 2});
    let http = reqwest::Client::new();
    let direct_url = format!("{}/predictions", options.url.trim_end_matches('/'));
    let mut direct = Vec::with_capacity(options.samples);
    for i in 0..options.samples + 20 {
        let started = Instant::now();
        loop {
            let r = http.post(&direct_url).json(&json!({"input": input})).send().await?;
            if r.status() == 409 {
                continue; // the slot frees a millisecond after the previous answer
            }
            anyhow::ensure!(r.status().is_success(), "Cog answered {}", r.status());
            break;
        }
        if i >= 20 {
            direct.push(started.elapsed());
        }
    }

    let setup = Setup::new(&[]).await?;
    let mut done = Box::pin(completions(&setup).await?);
    let stop = start_runner(&setup, "acme/*", 1, Some(&format!("acme/echo={}", options.url)))?;
    let model = "acme/echo".parse()?;
    let registered = async {
        while setup.store.models().get(&model).await.ok().flatten().is_none() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), registered).await.context("the runner did not register acme/echo")?;
    let mut through_runner = Vec::with_capacity(options.samples);
    for i in 0..options.samples + 20 {
        let p = prediction("acme/echo", input.clone());
        let started = Instant::now();
        submit(&setup, &p).await?;
        tokio::time::timeout(Duration::from_secs(30), done.next()).await.context("a prediction did not finish")?;
        if i >= 20 {
            through_runner.push(started.elapsed());
        }
    }
    stop.cancel();
    let (direct, runner) = (Samples::new(direct), Samples::new(through_runner));
    let added = runner.percentile(50.0).saturating_sub(direct.percentile(50.0));
    println!(
        "Cog echo, one at a time, {} samples each\n| path | p50 | p99 |\n|---|---|---|\n| direct sync POST | {} ms | {} ms |\n| through the runner (job → completed event) | {} ms | {} ms |\n| added by the runner (p50) | {} ms | |",
        options.samples,
        ms(direct.percentile(50.0)),
        ms(direct.percentile(99.0)),
        ms(runner.percentile(50.0)),
        ms(runner.percentile(99.0)),
        ms(added)
    );
    Ok(json!({"scenario": "cog", "samples": options.samples,
              "direct_p50_ms": ms(direct.percentile(50.0)), "direct_p99_ms": ms(direct.percentile(99.0)),
              "runner_p50_ms": ms(runner.percentile(50.0)), "runner_p99_ms": ms(runner.percentile(99.0)),
              "added_p50_ms": ms(added)}))
}
