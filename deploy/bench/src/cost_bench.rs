//! `bench cost`: MongoDB commands per prediction, per service. The api, one runner and one
//! notifier run in this process, each with its own MongoDB client and command counters
//! (driver command monitoring, read from each service's `/metrics`). `--predictions`
//! demo/echo predictions are created over HTTP, each with a webhook to a receiver on
//! loopback (all events); the counters' growth over the run, divided by the number of
//! predictions, is each service's cost.

use std::{collections::BTreeMap, net::SocketAddr, time::Duration};

use anyhow::Context;
use axum::{Router, http::StatusCode, routing::post};
use futures::{StreamExt, stream};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use common::domain::PredictionStatus;

use crate::setup::Setup;

/// Options of `bench cost`.
#[derive(clap::Args)]
pub struct Options {
    /// Predictions to create.
    #[arg(long, default_value_t = 300)]
    predictions: usize,
}

fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// `mongodb_commands_total` by command, from a `/metrics` page.
async fn commands(http: &reqwest::Client, url: &str) -> anyhow::Result<BTreeMap<String, f64>> {
    let text = http.get(url).send().await?.text().await?;
    Ok(text
        .lines()
        .filter_map(|l| l.strip_prefix("mongodb_commands_total{command=\""))
        .filter_map(|l| l.split_once("\"} "))
        .filter_map(|(c, n)| n.trim().parse().ok().map(|n| (c.to_owned(), n)))
        .collect())
}

/// Runs the scenario.
pub async fn run(options: Options) -> anyhow::Result<Value> {
    let (runner_metrics, notifier_metrics) = (free_addr()?, free_addr()?);
    let api_listener = TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", api_listener.local_addr()?);
    let setup = Setup::new(&[
        ("PUBLIC_BASE_URL", &base),
        ("NOTIFIER_ALLOW_PRIVATE_TARGETS", "true"),
        ("RUNNER_MODELS", "demo/echo"),
        ("RUNNER_CONCURRENCY", "8"),
        ("RUNNER_METRICS_BIND", &runner_metrics.to_string()),
        ("NOTIFIER_METRICS_BIND", &notifier_metrics.to_string()),
        ("DEFAULT_RATE_LIMIT_RPM", "1000000"),
    ])
    .await?;
    let api_config = api::config::ApiConfig::from_env(&setup.env())?;
    let key = api::admin::bootstrap(&api_config, "bench").await?.key.expose().to_owned();
    let stop = CancellationToken::new();
    tokio::spawn(api::serve(api_config, api_listener, stop.clone()));
    tokio::spawn(runner::run(runner::config::RunnerConfig::from_env(&setup.env())?, stop.clone()));
    tokio::spawn(notifier::run(notifier::config::NotifierConfig::from_env(&setup.env())?, stop.clone()));

    let receiver = TcpListener::bind("127.0.0.1:0").await?;
    let hook = format!("http://{}/hook", receiver.local_addr()?);
    tokio::spawn(async move {
        axum::serve(receiver, Router::new().route("/hook", post(|| async { StatusCode::NO_CONTENT }))).await
    });

    let http = reqwest::Client::new();
    let model = "demo/echo".parse()?;
    let ready = async {
        while setup.store.models().get(&model).await.ok().flatten().is_none() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), ready).await.context("the runner did not register demo/echo")?;
    let create = |n: usize| {
        let (http, key, hook) = (http.clone(), key.clone(), hook.clone());
        let url = format!("{base}/v1/models/demo/echo/predictions");
        async move {
            let body = json!({"input": {"prompt": format!("p{n}")}, "webhook": hook});
            let r = http
                .post(url)
                .bearer_auth(key)
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await?;
            anyhow::ensure!(r.status() == 201, "create answered {}", r.status());
            anyhow::Ok(())
        }
    };
    let run_batch = |count: usize| stream::iter(0..count).map(create).buffer_unordered(8).collect::<Vec<_>>();
    let account = api_account(&setup).await?;
    let unfinished = || async {
        let predictions = setup.store.predictions();
        let mut open = 0;
        for status in [PredictionStatus::Starting, PredictionStatus::Processing] {
            open += predictions.list_for_account(&account, Some(status), 0, 1).await?.1;
        }
        anyhow::Ok(open)
    };
    let settle = || async {
        // Done when nothing is left unfinished, plus time for the last webhooks to be recorded.
        loop {
            let open = unfinished().await?;
            if open == 0 {
                tokio::time::sleep(Duration::from_secs(2)).await;
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    for r in run_batch(20).await {
        r?;
    }
    settle().await?;
    let pages = [
        ("api", format!("{base}/metrics")),
        ("runner", format!("http://{runner_metrics}/metrics")),
        ("notifier", format!("http://{notifier_metrics}/metrics")),
    ];
    let mut before = BTreeMap::new();
    for (service, url) in &pages {
        before.insert(*service, commands(&http, url).await?);
    }
    for r in run_batch(options.predictions).await {
        r?;
    }
    settle().await?;
    let mut report = serde_json::Map::new();
    let mut table = format!(
        "MongoDB commands per prediction (demo/echo, webhook with all events, {} predictions)\n| service | command | per prediction |\n|---|---|---|\n",
        options.predictions
    );
    let n = options.predictions as f64;
    let (mut writes, mut reads) = (0.0, 0.0);
    for (service, url) in &pages {
        let after = commands(&http, url).await?;
        let mut per = serde_json::Map::new();
        for (command, total) in &after {
            let delta = (total - before[service].get(command).copied().unwrap_or(0.0)) / n;
            if delta > 0.0 {
                table.push_str(&format!("| {service} | {command} | {delta:.2} |\n"));
                per.insert(command.clone(), json!(delta));
                match command.as_str() {
                    "insert" | "update" | "delete" | "findAndModify" => writes += delta,
                    "find" | "count" | "aggregate" | "getMore" => reads += delta,
                    _ => {}
                }
            }
        }
        report.insert((*service).to_owned(), Value::Object(per));
    }
    table.push_str(&format!("| all | writes | {writes:.2} |\n| all | reads | {reads:.2} |"));
    println!("{table}");
    stop.cancel();
    Ok(
        json!({"scenario": "cost", "predictions": options.predictions, "per_prediction": report, "writes": writes, "reads": reads}),
    )
}

async fn api_account(setup: &Setup) -> anyhow::Result<common::domain::AccountId> {
    Ok(setup.store.accounts().find_by_name("bench").await?.context("the bench account")?.id)
}
