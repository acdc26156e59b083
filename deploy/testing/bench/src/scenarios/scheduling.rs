//! Scheduling: how long a prediction waits for a slot (`started_at - created_at`).
//!
//! 1. **Start delay under load**: one runner serving the default model set (`*`, the five
//!    demo models) with `SLOTS` slots, given `demo/sleep` predictions of `SLEEP_SECONDS` at a
//!    fixed interval for the window, at 50 % and then 90 % of its slot capacity
//!    (`SLOTS / SLEEP_SECONDS` per second). Slots are free whenever a prediction arrives, so
//!    any delay is the scheduler's. Target: p99 under 50 ms.
//! 2. **A light account behind a heavy backlog**: the account `bench` creates
//!    `BACKLOG_PER_SLOT × SLOTS` predictions at once, then the account `light` creates one. Its
//!    start delay is compared with the model's run time. Target: under two run times, whatever
//!    the backlog.

use std::{collections::HashMap, time::Duration};

use chrono::{DateTime, Utc};
use common::domain::Priority;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::time::Instant;

use harness::cluster::{Cluster, round};
use harness::stats::{Samples, ms};

/// Slots of the runner.
pub const SLOTS: usize = 8;
/// Seconds each prediction sleeps.
pub const SLEEP_SECONDS: f64 = 0.5;
/// The heavy account's backlog, in predictions per slot.
const BACKLOG_PER_SLOT: usize = 25;
/// How long to wait for the last prediction of a phase to complete.
const DRAIN: Duration = Duration::from_secs(60);

/// Options of `bench scheduling`.
#[derive(clap::Args)]
pub struct Options {
    /// Seconds of each load phase.
    #[arg(long, default_value_t = 15)]
    seconds: u64,
}

/// `bench scheduling`
pub async fn run(options: Options) -> anyhow::Result<Value> {
    let mut cluster = Cluster::start(&[], false).await?;
    let results = measure(&mut cluster, Duration::from_secs(options.seconds)).await;
    cluster.stop().await?;
    let results = results?;
    println!("{}", table(&results).trim_end());
    Ok(json!({"scenario": "scheduling", "scheduling": results}))
}

/// Runs both measurements on `cluster` (its runners are replaced by one serving every model).
pub async fn measure(cluster: &mut Cluster, window: Duration) -> anyhow::Result<Value> {
    cluster.stop_runners().await?;
    let slots = SLOTS.to_string();
    cluster.add_runners(1, &[("RUNNER_MODELS", "*"), ("RUNNER_CONCURRENCY", slots.as_str())]).await?;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let capacity = SLOTS as f64 / SLEEP_SECONDS;
    let mut loads = Vec::new();
    for share in [0.5, 0.9] {
        let rate = capacity * share;
        let delays = under_load(cluster, &http, rate, window).await?;
        loads.push(json!({
            "share_of_capacity": share, "offered_per_second": round(rate, 2), "predictions": delays.len(),
            "start_delay_p50_ms": round(ms(delays.percentile(50.0)), 1),
            "start_delay_p99_ms": round(ms(delays.percentile(99.0)), 1),
        }));
    }
    let light = light_behind_heavy(cluster, &http).await?;
    Ok(json!({
        "runner": {"models": "*", "slots": SLOTS}, "model": "demo/sleep", "sleep_seconds": SLEEP_SECONDS,
        "window_seconds": window.as_secs_f64(), "loads": loads, "light_account": light,
    }))
}

/// Creates one `demo/sleep` prediction of `seconds` with `key` at `priority`; returns its id.
pub async fn create_sleep(
    base: &str,
    http: &reqwest::Client,
    key: &str,
    priority: Priority,
    seconds: f64,
) -> anyhow::Result<String> {
    let response = http
        .post(format!("{base}/v1/models/demo/sleep/predictions"))
        .bearer_auth(key)
        .json(&json!({"input": {"seconds": seconds}, "priority": priority}))
        .send()
        .await?;
    anyhow::ensure!(response.status() == 201, "create answered {}", response.status());
    let body: Value = response.json().await?;
    body["id"].as_str().map(str::to_owned).ok_or_else(|| anyhow::anyhow!("no id in {body}"))
}

/// Creates one `demo/sleep` prediction of [`SLEEP_SECONDS`] with `key`; returns its id.
async fn create(base: &str, http: &reqwest::Client, key: &str) -> anyhow::Result<String> {
    create_sleep(base, http, key, Priority::Normal, SLEEP_SECONDS).await
}

/// The start delays of predictions offered at `rate` per second over `window`.
async fn under_load(cluster: &Cluster, http: &reqwest::Client, rate: f64, window: Duration) -> anyhow::Result<Samples> {
    let mut events = cluster.setup.bus.client().subscribe(cluster.setup.bus.subjects().all_events()).await?;
    let interval = Duration::from_secs_f64(1.0 / rate);
    let count = (window.as_secs_f64() * rate).round() as usize;
    // Each create is sent at its time, whether or not earlier ones have been answered.
    let mut creates = tokio::task::JoinSet::new();
    let mut tick = tokio::time::interval(interval);
    for _ in 0..count {
        tick.tick().await;
        let (base, http, key) = (cluster.base.clone(), http.clone(), cluster.key.clone());
        creates.spawn(async move { create(&base, &http, &key).await });
    }
    let mut ids = Vec::with_capacity(count);
    while let Some(id) = creates.join_next().await {
        ids.push(id??);
    }
    let started = started_delays(&mut events, &ids).await?;
    Ok(Samples::new(started.into_values().collect()))
}

/// Reads `completed` events until every one of `ids` has one; returns each start delay.
async fn started_delays(
    events: &mut async_nats::Subscriber,
    ids: &[String],
) -> anyhow::Result<HashMap<String, Duration>> {
    let times = start_times(events, ids, DRAIN).await?;
    Ok(times
        .into_iter()
        .map(|(id, (created, started))| (id, (started - created).to_std().unwrap_or_default()))
        .collect())
}

/// Reads `completed` events until every one of `ids` has one, for at most `drain`; returns
/// each one's creation and start.
pub async fn start_times(
    events: &mut async_nats::Subscriber,
    ids: &[String],
    drain: Duration,
) -> anyhow::Result<HashMap<String, (DateTime<Utc>, DateTime<Utc>)>> {
    let wanted: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
    let mut times = HashMap::new();
    let until = Instant::now() + drain;
    while times.len() < wanted.len() {
        let Ok(Some(message)) = tokio::time::timeout_at(until, events.next()).await else {
            anyhow::bail!("only {} of {} predictions completed within {drain:?}", times.len(), wanted.len());
        };
        let event: Value = serde_json::from_slice(&message.payload).unwrap_or_default();
        let p = &event["prediction"];
        let time = |field: &str| p[field].as_str().and_then(|t| t.parse::<DateTime<Utc>>().ok());
        if event["event"] == "completed"
            && let (Some(id), Some(created), Some(started)) = (p["id"].as_str(), time("created_at"), time("started_at"))
            && wanted.contains(id)
        {
            times.insert(id.to_owned(), (created, started));
        }
    }
    Ok(times)
}

/// The start delay of one prediction of another account created behind the backlog.
async fn light_behind_heavy(cluster: &Cluster, http: &reqwest::Client) -> anyhow::Result<Value> {
    let config = api::config::ApiConfig::from_env(&cluster.setup.env())?;
    let light = api::admin::bootstrap(&config, "light").await?.key.expose().to_owned();
    let mut events = cluster.setup.bus.client().subscribe(cluster.setup.bus.subjects().all_events()).await?;
    let backlog = BACKLOG_PER_SLOT * SLOTS;
    let heavy: Vec<String> = futures::stream::iter(0..backlog)
        .map(|_| create(&cluster.base, http, &cluster.key))
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<_>>()?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let single = create(&cluster.base, http, &light).await?;
    // Every prediction is awaited, so the backlog has drained before the next scenario.
    let all: Vec<String> = heavy.into_iter().chain([single.clone()]).collect();
    let delay = started_delays(&mut events, &all).await?[&single];
    Ok(json!({
        "heavy_backlog": backlog, "start_delay_ms": round(ms(delay), 1),
        "run_time_ms": SLEEP_SECONDS * 1000.0, "start_delay_in_run_times": round(delay.as_secs_f64() / SLEEP_SECONDS, 2),
    }))
}

/// The results of [`measure`] as a table.
pub fn table(s: &Value) -> String {
    let mut out = format!(
        "start delay (created → started), one runner serving every demo model with {} slots, demo/sleep {} s\n\n\
         | load | offered /s | predictions | p50 | p99 |\n|---|---|---|---|---|\n",
        s["runner"]["slots"], s["sleep_seconds"]
    );
    for load in s["loads"].as_array().cloned().unwrap_or_default() {
        out.push_str(&format!(
            "| {:.0} % of capacity | {} | {} | {} ms | {} ms |\n",
            load["share_of_capacity"].as_f64().unwrap_or(f64::NAN) * 100.0,
            load["offered_per_second"],
            load["predictions"],
            load["start_delay_p50_ms"],
            load["start_delay_p99_ms"]
        ));
    }
    let light = &s["light_account"];
    out.push_str(&format!(
        "\na light account's one prediction behind another account's backlog of {}: start delay {} ms = {} run times\n",
        light["heavy_backlog"], light["start_delay_ms"], light["start_delay_in_run_times"]
    ));
    out
}
