//! `bench queue`: what the queue's visibility and the account caps cost.
//!
//! 1. **A read with its queue place, beside one without, as the queue grows.** One runner
//!    serves `demo/sleep` one at a time: one prediction runs for minutes and the others wait
//!    behind it, `--waiting` of them in turn (100, 1,000, 3,000 by default). At each size a
//!    closed loop of `--clients` clients reads the newest waiting one
//!    (`GET /v1/predictions/{id}`: the prediction and its queue place) for `--seconds`; then
//!    an ended prediction (the prediction alone) as long: reads per second and latency
//!    percentiles of each, and the ratio at the largest queue. A place that cost a query
//!    growing with the queue shows as reads slowing from one size to the next.
//! 2. **The cap check per job.** `--predictions` demo/echo predictions (8 in flight, a webhook
//!    with every event, as `bench cost`) on fresh systems, the account uncapped, then capped at
//!    a cap the load never reaches (only the check is paid: a KV create before the job is
//!    fetched, a delete after it ends, and the watch's pushes), alternated `--repeat` times:
//!    the runner's CPU per prediction, median of each; then [`ONE_AT_A_TIME`] predictions one
//!    after another with `Prefer: wait`, uncapped and capped: the latency the check adds to a
//!    prediction's round trip.

use std::time::Duration;

use anyhow::Context;
use http::Method;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::scenarios::cost;
use harness::cluster::{Cluster, round};
use harness::load_client::{Template, closed_loop};
use harness::receiver::Receiver;
use harness::stats::{Samples, ms};

/// Options of `bench queue`.
#[derive(clap::Args)]
pub struct Options {
    /// Seconds of reads of each kind.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Clients reading at once.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Predictions of each cost run.
    #[arg(long, default_value_t = 400)]
    predictions: usize,
    /// Cost runs of each kind (uncapped, capped), alternated.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// The queue sizes at which a waiting prediction is read, in order.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,3000")]
    waiting: Vec<usize>,
    /// Measures the reads only (part 1), not the cap check.
    #[arg(long)]
    reads_only: bool,
}

/// Creates at once while the queue is filled.
const FILLING: usize = 16;
/// Predictions made one after another for the round-trip latency.
const ONE_AT_A_TIME: usize = 200;
/// The cap of the capped runs: more than the load ever runs at once.
const HIGH_CAP: u32 = 1000;

/// `bench queue`
pub async fn run(options: Options) -> anyhow::Result<Value> {
    let reads = reads(&options).await?;
    let cap = if options.reads_only { Value::Null } else { cap_check(&options).await? };
    println!("{}", table(&reads, &cap).trim_end());
    Ok(json!({"scenario": "queue", "reads": reads, "cap_check": cap}))
}

/// Part 1: reads of a waiting prediction and of an ended one.
async fn reads(options: &Options) -> anyhow::Result<Value> {
    let mut cluster = Cluster::start(&harness::cluster::AS_DEPLOYED, false).await?;
    let measured = async {
        cluster.add_runners(1, &[("RUNNER_MODELS", "demo/sleep,demo/echo"), ("RUNNER_MODEL_CONCURRENCY", "1")]).await?;
        let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
        let create = |model: &str, input: Value| {
            let request = http
                .post(format!("{}/v1/models/{model}/predictions", cluster.base))
                .bearer_auth(&cluster.key)
                .json(&json!({ "input": input }));
            async move {
                let answer: Value = request.send().await?.error_for_status()?.json().await?;
                answer["id"].as_str().map(str::to_owned).context("a create answered no id")
            }
        };
        let ended = create("demo/echo", json!({"prompt": "ended"})).await?;
        let get = |id: &str| Template::new(Method::GET, &cluster.base, &format!("/v1/predictions/{id}"), &cluster.key);
        let row = |rate: f64, latency: &Samples| {
            json!({"per_second": round(rate, 0), "p50_ms": round(ms(latency.percentile(50.0)), 2), "p99_ms": round(ms(latency.percentile(99.0)), 2)})
        };
        // The first one runs; every later one waits.
        let mut newest = create("demo/sleep", json!({"seconds": 300})).await?;
        let (mut waiting, mut by_size) = (0, Vec::new());
        for &size in &options.waiting {
            while waiting < size {
                let batch = (size - waiting).min(FILLING);
                let made = futures::future::try_join_all(
                    (0..batch).map(|_| create("demo/sleep", json!({"seconds": 300}))),
                )
                .await?;
                waiting += batch;
                newest = made.last().cloned().unwrap_or(newest);
            }
            settle(&http, &cluster.base, &cluster.key, &newest, &ended).await?;
            let (rate, latency, _) =
                closed_loop(options.seconds, options.clients, &cluster.base, &get(&newest)?, 200).await?;
            by_size.push(json!({"waiting": waiting, "read": row(rate, &latency)}));
        }
        let (without_rate, without_latency, _) =
            closed_loop(options.seconds, options.clients, &cluster.base, &get(&ended)?, 200).await?;
        let largest = by_size.last().map(|r| r["read"].clone()).unwrap_or_default();
        let with_rate = largest["per_second"].as_f64().unwrap_or_default();
        anyhow::Ok(json!({
            "clients": options.clients, "seconds": options.seconds,
            "with_queue_by_waiting": by_size, "with_queue": largest,
            "without_queue": row(without_rate, &without_latency),
            "rate_ratio": round(with_rate / without_rate.max(1e-9), 3),
        }))
    }
    .await;
    cluster.stop().await?;
    measured
}

/// Waits until the newest waiting prediction shows a queue place (the places are reused
/// for up to a second) and the ended one has ended.
async fn settle(http: &reqwest::Client, base: &str, key: &str, newest: &str, ended: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let read: Value =
            http.get(format!("{base}/v1/predictions/{newest}")).bearer_auth(key).send().await?.json().await?;
        let done: Value =
            http.get(format!("{base}/v1/predictions/{ended}")).bearer_auth(key).send().await?.json().await?;
        if read["queue"]["position"].as_u64().is_some() && done["status"] == "succeeded" {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "the queue did not settle: {read} / {done}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Part 2: the runner's CPU and a prediction's round trip, uncapped and capped.
async fn cap_check(options: &Options) -> anyhow::Result<Value> {
    let mut uncapped = Vec::new();
    let mut capped = Vec::new();
    for _ in 0..options.repeat.max(1) {
        uncapped.push(on_fresh_system(None, async |c, r| cost::measure(c, r, options.predictions, 8).await).await?);
        capped.push(
            on_fresh_system(Some(HIGH_CAP), async |c, r| cost::measure(c, r, options.predictions, 8).await).await?,
        );
    }
    let runner_us = |runs: &[Value]| {
        let mut each: Vec<f64> = runs
            .iter()
            .filter_map(|r| r["services"]["runner"]["cpu_seconds_per_1000"].as_f64())
            .map(|s| s * 1000.0)
            .collect();
        each.sort_by(f64::total_cmp);
        (each.get((each.len().max(1) - 1) / 2).copied().unwrap_or_default(), each)
    };
    let (uncapped_us, uncapped_each) = runner_us(&uncapped);
    let (capped_us, capped_each) = runner_us(&capped);
    let plain = on_fresh_system(None, one_at_a_time).await?;
    let checked = on_fresh_system(Some(HIGH_CAP), one_at_a_time).await?;
    Ok(json!({
        "predictions": options.predictions, "cap": HIGH_CAP,
        "runner_cpu_us_per_prediction": {
            "uncapped": round(uncapped_us, 0), "capped": round(capped_us, 0),
            "added": round(capped_us - uncapped_us, 0),
            "uncapped_runs": uncapped_each.iter().map(|x| round(*x, 0)).collect::<Vec<_>>(),
            "capped_runs": capped_each.iter().map(|x| round(*x, 0)).collect::<Vec<_>>(),
        },
        "round_trip_ms": {
            "predictions": ONE_AT_A_TIME,
            "uncapped_p50": plain.0, "capped_p50": checked.0,
            "uncapped_p99": plain.1, "capped_p99": checked.1,
            "added_p50": round(checked.0 - plain.0, 2),
        },
    }))
}

/// [`ONE_AT_A_TIME`] demo/echo predictions, each created with `Prefer: wait` once the one
/// before has ended: their round trips' p50 and p99 in ms.
async fn one_at_a_time(cluster: &mut Cluster, _: &Receiver) -> anyhow::Result<(f64, f64)> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
    let url = format!("{}/v1/models/demo/echo/predictions", cluster.base);
    let mut took = Vec::new();
    for n in 0..ONE_AT_A_TIME + 20 {
        let sent = Instant::now();
        let request = http.post(&url).bearer_auth(&cluster.key).header("prefer", "wait=10");
        let answer: Value = request.json(&json!({"input": {"prompt": "cap"}})).send().await?.json().await?;
        anyhow::ensure!(answer["status"] == "succeeded", "a prediction did not end in time: {answer}");
        if n >= 20 {
            took.push(sent.elapsed()); // after 20 of warm-up
        }
    }
    let took = Samples::new(took);
    Ok((round(ms(took.percentile(50.0)), 2), round(ms(took.percentile(99.0)), 2)))
}

/// Runs `measure` on a fresh system of one echo runner, its account capped at `cap`.
async fn on_fresh_system<T>(
    cap: Option<u32>,
    measure: impl AsyncFnOnce(&mut Cluster, &Receiver) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let mut cluster = Cluster::start(&harness::cluster::AS_DEPLOYED, true).await?;
    let stop = CancellationToken::new();
    let outcome = async {
        if let Some(cap) = cap {
            let accounts = cluster.setup.store.accounts();
            let account = accounts.find_by_name("bench").await?.context("the account bench")?;
            accounts.set_max_concurrency(&account.id, Some(cap)).await?;
        }
        cluster.add_runners(1, &cost::ECHO_RUNNER).await?;
        let receiver = Receiver::start(cluster.secret.clone(), stop.clone()).await?;
        measure(&mut cluster, &receiver).await
    }
    .await;
    stop.cancel();
    cluster.stop().await?;
    outcome
}

/// The results as a table.
pub fn table(reads: &Value, cap: &Value) -> String {
    let mut out = format!(
        "reads of one prediction, {} clients for {} s each\n| read | per second | p50 ms | p99 ms |\n|---|---:|---:|---:|\n",
        reads["clients"], reads["seconds"]
    );
    for size in reads["with_queue_by_waiting"].as_array().into_iter().flatten() {
        let r = &size["read"];
        let name = format!("the newest of {} waiting (with its queue place)", size["waiting"]);
        out.push_str(&format!("| {name} | {} | {} | {} |\n", r["per_second"], r["p50_ms"], r["p99_ms"]));
    }
    let r = &reads["without_queue"];
    out.push_str(&format!("| ended (no queue place) | {} | {} | {} |\n", r["per_second"], r["p50_ms"], r["p99_ms"]));
    out.push_str(&format!("ratio of rates: {}\n\n", reads["rate_ratio"]));
    if cap.is_null() {
        return out;
    }
    let cpu = &cap["runner_cpu_us_per_prediction"];
    let trip = &cap["round_trip_ms"];
    out.push_str(&format!(
        "the cap check per job (cap {} never reached)\n| | uncapped | capped | added |\n|---|---:|---:|---:|\n\
         | runner CPU µs per prediction (median of runs) | {} | {} | {} |\n\
         | round trip p50 ms, one at a time, Prefer: wait | {} | {} | {} |\n",
        cap["cap"],
        cpu["uncapped"],
        cpu["capped"],
        cpu["added"],
        trip["uncapped_p50"],
        trip["capped_p50"],
        trip["added_p50"]
    ));
    out
}
