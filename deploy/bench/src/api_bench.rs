//! `bench api`: the api alone (a release process; no runner, so created jobs wait in the
//! stream) under a closed loop of 1, 8, 32 and 128 concurrent clients, `--seconds` per level:
//! `GET /v1/predictions/{id}`, a list page (`GET /v1/predictions?limit=20`, on an account of
//! 100 predictions) and predictions created per second (`POST`, demo/echo, bearer auth, a rate
//! limit too high to interfere), each with its latency percentiles, with MongoDB command
//! monitoring off as deployed. Creates run last, so the reads see a small collection. Each
//! level ends by letting requests in flight finish.

use std::time::Duration;

use anyhow::Context;
use futures::future::try_join_all;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::{
    baselines::{Baselines, LEVELS},
    cluster::{Cluster, round},
    stats::{Samples, ms},
};

/// Options of `bench api`.
#[derive(clap::Args)]
pub struct Options {
    /// Seconds per endpoint and concurrency level.
    #[arg(long, default_value_t = 4)]
    seconds: u64,
}

/// The api is measured as deployed: MongoDB command monitoring off (its default; the
/// baselines' client has none either). The cost scenarios turn it on to count commands.
pub const AS_DEPLOYED: [(&str, &str); 1] = [("MONGODB_COMMAND_METRICS", "false")];

/// Predictions in the account whose list is measured.
const LISTED: usize = 100;

/// One endpoint at one level.
pub struct Row {
    /// `get`, `list` or `create`.
    pub request: &'static str,
    /// Concurrent clients.
    pub clients: usize,
    /// Answers per second.
    pub per_second: f64,
    /// Each answer's latency.
    pub latency: Samples,
}

/// Requests per second and latencies of `request` sent by `clients` clients in a loop for
/// `seconds`; requests in flight at the end are finished and counted.
async fn closed_loop<F, Fut>(seconds: u64, clients: usize, request: F) -> anyhow::Result<(f64, Samples)>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Duration>>,
{
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let client = || async {
        let mut samples = Vec::new();
        while Instant::now() < deadline {
            samples.push(request().await?);
        }
        anyhow::Ok(samples)
    };
    let samples: Vec<Duration> = try_join_all((0..clients).map(|_| client())).await?.into_iter().flatten().collect();
    Ok((samples.len() as f64 / started.elapsed().as_secs_f64(), Samples::new(samples)))
}

/// Sends `request` and returns how long the answer took, which must have status `expect`.
async fn timed(request: reqwest::RequestBuilder, expect: u16) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let response = request.send().await?;
    anyhow::ensure!(response.status().as_u16() == expect, "answered {}", response.status());
    response.bytes().await?;
    Ok(started.elapsed())
}

/// A demo/echo create request.
fn create_request(http: &reqwest::Client, url: &str, key: &str) -> reqwest::RequestBuilder {
    http.post(url)
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(r#"{"input":{"prompt":"bench","repeat":2}}"#)
}

/// Measures the api of `cluster`.
pub async fn measure(cluster: &Cluster, seconds: u64) -> anyhow::Result<Vec<Row>> {
    let base = &cluster.base;
    let config = api::config::ApiConfig::from_env(&cluster.setup.env())?;
    let list_key = api::admin::bootstrap(&config, "bench-list").await?.key.expose().to_owned();
    let http = reqwest::Client::new();
    let create_url = format!("{base}/v1/models/demo/echo/predictions");
    for _ in 0..LISTED {
        timed(create_request(&http, &create_url, &list_key), 201).await?;
    }
    let first: Value =
        http.get(format!("{base}/v1/predictions?limit=1")).bearer_auth(&list_key).send().await?.json().await?;
    let id = first["results"][0]["id"].as_str().context("no prediction listed")?.to_owned();
    let get_url = format!("{base}/v1/predictions/{id}");
    let list_url = format!("{base}/v1/predictions?limit=20");

    let mut rows = Vec::new();
    for request in ["get", "list", "create"] {
        for clients in LEVELS {
            let http = reqwest::Client::builder().pool_max_idle_per_host(256).build()?;
            let (per_second, latency) = match request {
                "create" => {
                    let key = &cluster.key;
                    closed_loop(seconds, clients, || timed(create_request(&http, &create_url, key), 201)).await?
                }
                "get" => {
                    closed_loop(seconds, clients, || timed(http.get(&get_url).bearer_auth(&list_key), 200)).await?
                }
                _ => closed_loop(seconds, clients, || timed(http.get(&list_url).bearer_auth(&list_key), 200)).await?,
            };
            rows.push(Row { request, clients, per_second, latency });
        }
    }
    Ok(rows)
}

/// The raw rate a row is compared with: inserts of a prediction for creates, finds by id for
/// reads, at the same number in flight.
fn baseline_of(row: &Row, baselines: &Baselines) -> Option<f64> {
    let rates = if row.request == "create" { &baselines.insert_prediction } else { &baselines.find };
    rates.get(&row.clients).copied()
}

/// The rows as JSON, with their ratios to the baselines when given.
pub fn json(rows: &[Row], baselines: Option<&Baselines>) -> Value {
    let rows: Vec<Value> = rows
        .iter()
        .map(|row| {
            let baseline = baselines.and_then(|b| baseline_of(row, b));
            json!({"request": row.request, "clients": row.clients, "per_second": row.per_second.round(),
                   "p50_ms": ms(row.latency.percentile(50.0)), "p95_ms": ms(row.latency.percentile(95.0)),
                   "p99_ms": ms(row.latency.percentile(99.0)),
                   "baseline": baseline.map(|_| if row.request == "create" { "mongodb_insert_prediction" } else { "mongodb_find_by_id" }),
                   "baseline_per_second": baseline.map(f64::round),
                   "ratio": baseline.map(|b| round(row.per_second / b, 3))})
        })
        .collect();
    json!(rows)
}

/// The rows as a table, with their ratios to the baselines when given.
pub fn table(rows: &[Row], baselines: Option<&Baselines>) -> String {
    let mut table = String::from(
        "| request | clients | per second | p50 | p95 | p99 | raw rate, same in flight | ratio |\n|---|---|---|---|---|---|---|---|\n",
    );
    for row in rows {
        let (p50, p95, p99) =
            (ms(row.latency.percentile(50.0)), ms(row.latency.percentile(95.0)), ms(row.latency.percentile(99.0)));
        let (baseline, ratio) = match baselines.and_then(|b| baseline_of(row, b)) {
            Some(b) => {
                let name = if row.request == "create" { "prediction insert" } else { "find" };
                (format!("{b:.0} {name}/s"), format!("{:.2}", row.per_second / b))
            }
            None => ("-".into(), "-".into()),
        };
        table.push_str(&format!(
            "| {} | {} | {:.0} | {p50} ms | {p95} ms | {p99} ms | {baseline} | {ratio} |\n",
            row.request, row.clients, row.per_second
        ));
    }
    table
}

/// `bench api`
pub async fn run(options: Options) -> anyhow::Result<Value> {
    let cluster = Cluster::start(&AS_DEPLOYED, false).await?;
    let rows = measure(&cluster, options.seconds).await;
    cluster.stop().await?;
    let rows = rows?;
    println!("api alone, closed loop\n{}", table(&rows, None).trim_end());
    Ok(json!({"scenario": "api", "seconds_per_level": options.seconds, "results": json(&rows, None)}))
}
