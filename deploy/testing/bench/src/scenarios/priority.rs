//! `bench priority`: what priority levels do under load, and how far the lanes scale.
//!
//! 1. **Levels under a saturating normal load**: one runner of `SLOTS` slots serving
//!    `demo/sleep` (`SLEEP_SECONDS` a run, so `SLOTS / SLEEP_SECONDS` a second), with a
//!    shortened aging bound (`--aging`, default 20 s; the service's default is 60). For
//!    `--seconds` (default 30), the account `bench` offers normal work at `HEAVY` of the
//!    capacity and the account `light` at `LIGHT` of it (1.2 times the capacity together: every
//!    slot stays busy and both accounts keep a backlog, which stays younger than the aging
//!    bound), the account `urgent` one high prediction a second, and the account `batch` two
//!    low ones after 2 s. Figures:
//!    - the high predictions' start delays (p50, p95; target: p95 within one run time);
//!    - the longest wait of a low prediction (target: within the aging bound plus one run);
//!    - the light account's share of the normal starts while both normal accounts have a
//!      backlog (the second half of the window), against its fair half (target: at least 0.9).
//! 2. **Lanes at scale** (`--accounts`, default 1,000 and 10,000): that many accounts each
//!    create one `demo/sleep` prediction (`LANE_SLEEP_SECONDS`) at `LANE_RATE` a second on a
//!    runner that starts fewer, so each waits in a lane of its own; then as many from one
//!    account, for comparison. Figures: the JetStream consumers of the jobs stream at the
//!    peak, the api's create p99, and the runner's CPU per job, for both.

use std::{collections::HashMap, time::Duration};

use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::time::Instant;

use api::store::{ApiCollections, ApiKeyRecord};
use common::{
    domain::{Priority, Scope},
    store::Account,
};
use harness::cluster::{Cluster, round};
use harness::stats::{Samples, ms};

use super::scheduling::{create_sleep as create, start_times};

/// Slots of the runner in the levels measurement.
const SLOTS: usize = 8;
/// Seconds each prediction sleeps in the levels measurement.
const SLEEP_SECONDS: f64 = 0.5;
/// Seconds each prediction sleeps in the lanes measurement.
const LANE_SLEEP_SECONDS: f64 = 0.05;
/// Creates a second in the lanes measurement (the runner starts `SLOTS / LANE_SLEEP_SECONDS`).
const LANE_RATE: f64 = 250.0;
/// The heavy normal account's offered load, as a share of the runner's capacity.
const HEAVY: f64 = 0.65;
/// The light normal account's: more than its fair half of what high leaves, so it keeps a
/// backlog too, and its share of the starts is the scheduler's choice.
const LIGHT: f64 = 0.55;
/// How long the last prediction may take to complete.
const DRAIN: Duration = Duration::from_secs(300);

/// Options of `bench priority`.
#[derive(clap::Args)]
pub struct Options {
    /// Seconds of the levels load.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// `PRIORITY_AGING_SECONDS` of the levels measurement's runner.
    #[arg(long, default_value_t = 20)]
    aging: u64,
    /// Numbers of accounts of the lanes measurement (none: skip it).
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    accounts: Vec<usize>,
}

/// `bench priority`
pub async fn run(options: Options) -> anyhow::Result<Value> {
    let mut cluster = Cluster::start(&[("MONGODB_COMMAND_METRICS", "false")], false).await?;
    let levels = levels(&mut cluster, Duration::from_secs(options.seconds), options.aging).await;
    cluster.stop().await?;
    let levels = levels?;
    println!("{}", levels_table(&levels).trim_end());
    let mut lanes = Vec::new();
    for accounts in options.accounts {
        let mut cluster = Cluster::start(&[("MONGODB_COMMAND_METRICS", "false")], false).await?;
        let measured = lanes_at_scale(&mut cluster, accounts).await;
        cluster.stop().await?;
        let measured = measured?;
        println!("{}", lanes_table(&measured).trim_end());
        lanes.push(measured);
    }
    Ok(json!({"scenario": "priority", "priority": {"levels": levels, "lanes": lanes}}))
}

/// An account `name` with a key of every scope (no rate limit to speak of), made in the
/// database directly (as `api admin bootstrap` does, without its connection per call); at
/// most `max_priority` when given.
async fn account(cluster: &Cluster, name: &str, max_priority: Option<Priority>) -> anyhow::Result<String> {
    let store = &cluster.setup.store;
    let master = &cluster.setup.common.master_key;
    let (account, _) = Account::new(name, master);
    store.accounts().insert(&account).await?;
    if let Some(max) = max_priority {
        store.accounts().set_max_priority(&account.id, max).await?;
    }
    let scopes = vec![Scope::Read, Scope::Write, Scope::Admin];
    let (record, key) = ApiKeyRecord::new(account.id, "bench".into(), scopes, 100_000_000, None, master);
    store.api_keys().insert(&record).await?;
    Ok(key.expose().to_owned())
}

/// Offers predictions of `key` at `priority` at `rate` a second for `window`, open loop;
/// returns their ids.
async fn offer(
    cluster: &Cluster,
    http: &reqwest::Client,
    key: &str,
    priority: Priority,
    rate: f64,
    window: Duration,
) -> anyhow::Result<Vec<String>> {
    let count = (window.as_secs_f64() * rate).round() as usize;
    let mut creates = tokio::task::JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    for _ in 0..count {
        tick.tick().await;
        let (base, http, key) = (cluster.base.clone(), http.clone(), key.to_owned());
        creates.spawn(async move { create(&base, &http, &key, priority, SLEEP_SECONDS).await });
    }
    let mut ids = Vec::with_capacity(count);
    while let Some(id) = creates.join_next().await {
        ids.push(id??);
    }
    Ok(ids)
}

/// The levels measurement (see the module's doc).
async fn levels(cluster: &mut Cluster, window: Duration, aging: u64) -> anyhow::Result<Value> {
    cluster.stop_runners().await?;
    let (slots, aging_text) = (SLOTS.to_string(), aging.to_string());
    let runner = [
        ("RUNNER_MODELS", "demo/sleep"),
        ("RUNNER_CONCURRENCY", slots.as_str()),
        ("PRIORITY_AGING_SECONDS", aging_text.as_str()),
    ];
    cluster.add_runners(1, &runner).await?;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
    let light = account(cluster, "light", None).await?;
    let urgent = account(cluster, "urgent", Some(Priority::High)).await?;
    let batch = account(cluster, "batch", None).await?;
    let mut events = cluster.setup.bus.client().subscribe(cluster.setup.bus.subjects().all_events()).await?;
    let capacity = SLOTS as f64 / SLEEP_SECONDS;
    let began = Utc::now();
    let (heavy_ids, light_ids, high_ids, low_ids) = tokio::try_join!(
        offer(cluster, &http, &cluster.key, Priority::Normal, capacity * HEAVY, window),
        offer(cluster, &http, &light, Priority::Normal, capacity * LIGHT, window),
        offer(cluster, &http, &urgent, Priority::High, 1.0, window),
        async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let mut low = Vec::new();
            for _ in 0..2 {
                low.push(create(&cluster.base, &http, &batch, Priority::Low, SLEEP_SECONDS).await?);
            }
            Ok::<_, anyhow::Error>(low)
        },
    )?;
    let all: Vec<String> = [&heavy_ids, &light_ids, &high_ids, &low_ids].into_iter().flatten().cloned().collect();
    let times = start_times(&mut events, &all, DRAIN).await?;
    let delays = |ids: &[String]| {
        Samples::new(ids.iter().map(|id| (times[id].1 - times[id].0).to_std().unwrap_or_default()).collect())
    };
    let (high, low) = (delays(&high_ids), delays(&low_ids));
    // The light account's share of the normal starts in the window's second half, when both
    // normal accounts have a backlog.
    let (from, to) = (began + window / 2, began + window);
    let started_within = |ids: &[String]| ids.iter().filter(|id| (from..to).contains(&times[*id].1)).count();
    let (light_started, heavy_started) = (started_within(&light_ids), started_within(&heavy_ids));
    let share = light_started as f64 / (light_started + heavy_started).max(1) as f64;
    Ok(json!({
        "runner": {"model": "demo/sleep", "slots": SLOTS, "run_seconds": SLEEP_SECONDS, "aging_seconds": aging},
        "window_seconds": window.as_secs_f64(),
        "offered_per_second": {"normal_heavy": round(capacity * HEAVY, 1), "normal_light": round(capacity * LIGHT, 1), "high": 1.0, "low": "2 after 2 s"},
        "high": {"predictions": high.len(), "start_delay_p50_ms": round(ms(high.percentile(50.0)), 1),
                 "start_delay_p95_ms": round(ms(high.percentile(95.0)), 1),
                 "p95_in_run_times": round(high.percentile(95.0).as_secs_f64() / SLEEP_SECONDS, 2)},
        "low": {"predictions": low.len(), "longest_wait_s": round(low.percentile(100.0).as_secs_f64(), 2),
                "bound_s": aging as f64 + SLEEP_SECONDS},
        "light_share": {"light_started": light_started, "heavy_started": heavy_started,
                        "share": round(share, 3), "of_fair_half": round(share / 0.5, 3)},
    }))
}

/// The lanes measurement for `accounts` accounts (see the module's doc).
async fn lanes_at_scale(cluster: &mut Cluster, accounts: usize) -> anyhow::Result<Value> {
    cluster.stop_runners().await?;
    let slots = SLOTS.to_string();
    cluster.add_runners(1, &[("RUNNER_MODELS", "demo/sleep"), ("RUNNER_CONCURRENCY", slots.as_str())]).await?;
    let made = Instant::now();
    let names: Vec<String> = (0..accounts).map(|n| format!("lane-{n}")).collect();
    let keys: Vec<String> = futures::stream::iter(&names)
        .map(|name| account(cluster, name, None))
        .buffered(32)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<_>>()?;
    let made = made.elapsed();
    let many = one_each(cluster, &keys).await?;
    let single = one_each(cluster, &vec![cluster.key.clone(); accounts]).await?;
    Ok(json!({
        "accounts": accounts, "accounts_made_in_s": round(made.as_secs_f64(), 1),
        "offered_per_second": LANE_RATE, "runner_starts_per_second": SLOTS as f64 / LANE_SLEEP_SECONDS,
        "one_per_account": many, "all_from_one_account": single,
    }))
}

/// One `demo/sleep` prediction per key of `keys` at [`LANE_RATE`]: the api's create latency,
/// the jobs stream's consumers at the peak, and the runner's and api's CPU per prediction.
async fn one_each(cluster: &mut Cluster, keys: &[String]) -> anyhow::Result<Value> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
    let mut events = cluster.setup.bus.client().subscribe(cluster.setup.bus.subjects().all_events()).await?;
    let before = cluster.snapshot().await?;
    let stream = cluster.setup.bus.jetstream().get_stream(cluster.setup.bus.subjects().jobs_stream()).await?;
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let watcher = {
        let (mut stream, peak) = (stream.clone(), peak.clone());
        tokio::spawn(async move {
            loop {
                if let Ok(info) = stream.info().await {
                    peak.fetch_max(info.state.consumer_count, std::sync::atomic::Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    let mut creates = tokio::task::JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / LANE_RATE));
    for key in keys {
        tick.tick().await;
        let (base, http, key) = (cluster.base.clone(), http.clone(), key.clone());
        creates.spawn(async move {
            let sent = Instant::now();
            let id = create(&base, &http, &key, Priority::Normal, LANE_SLEEP_SECONDS).await?;
            Ok::<_, anyhow::Error>((id, sent.elapsed()))
        });
    }
    let (mut ids, mut latencies) = (Vec::with_capacity(keys.len()), Vec::with_capacity(keys.len()));
    while let Some(created) = creates.join_next().await {
        let (id, latency) = created??;
        ids.push(id);
        latencies.push(latency);
    }
    let times: HashMap<String, (DateTime<Utc>, DateTime<Utc>)> = start_times(&mut events, &ids, DRAIN).await?;
    watcher.abort();
    let after = cluster.snapshot().await?;
    let latencies = Samples::new(latencies);
    let waits = Samples::new(times.values().map(|(c, s)| (*s - *c).to_std().unwrap_or_default()).collect());
    let cpu_us = |service: &str| {
        let used = after.usage.get(service).map_or(0.0, |u| u.cpu_seconds)
            - before.usage.get(service).map_or(0.0, |u| u.cpu_seconds);
        round(used * 1e6 / ids.len().max(1) as f64, 1)
    };
    Ok(json!({
        "predictions": ids.len(),
        "consumers_at_peak": peak.load(std::sync::atomic::Ordering::Relaxed),
        "create_p50_ms": round(ms(latencies.percentile(50.0)), 1),
        "create_p99_ms": round(ms(latencies.percentile(99.0)), 1),
        "start_delay_p99_ms": round(ms(waits.percentile(99.0)), 1),
        "runner_cpu_us_per_job": cpu_us("runner"),
        "api_cpu_us_per_create": cpu_us("api"),
    }))
}

/// The levels measurement as a table.
pub fn levels_table(s: &Value) -> String {
    let (high, low, light) = (&s["high"], &s["low"], &s["light_share"]);
    format!(
        "priority levels: one runner, {} slots, demo/sleep {} s, aging {} s, {} s of normal work at {}/s and {}/s (two accounts), 1 high/s, 2 low\n\n\
         | figure | value | target |\n|---|---|---|\n\
         | high start delay p50 | {} ms | |\n\
         | high start delay p95 | {} ms ({} run times) | within one run time |\n\
         | longest low wait | {} s | within {} s (aging + one run) |\n\
         | light account's share of normal starts | {} ({} of its fair half) | at least 0.9 of it |\n",
        s["runner"]["slots"],
        s["runner"]["run_seconds"],
        s["runner"]["aging_seconds"],
        s["window_seconds"],
        s["offered_per_second"]["normal_heavy"],
        s["offered_per_second"]["normal_light"],
        high["start_delay_p50_ms"],
        high["start_delay_p95_ms"],
        high["p95_in_run_times"],
        low["longest_wait_s"],
        low["bound_s"],
        light["share"],
        light["of_fair_half"],
    )
}

/// One lanes measurement as a table.
pub fn lanes_table(s: &Value) -> String {
    let row = |label: &str, r: &Value| {
        format!(
            "| {label} | {} | {} | {} ms | {} ms | {} µs | {} µs |\n",
            r["predictions"],
            r["consumers_at_peak"],
            r["create_p50_ms"],
            r["create_p99_ms"],
            r["runner_cpu_us_per_job"],
            r["api_cpu_us_per_create"]
        )
    };
    format!(
        "lanes: {} accounts waiting on demo/sleep ({} creates/s, the runner starts {}/s)\n\n\
         | predictions from | n | consumers at peak | create p50 | create p99 | runner CPU/job | api CPU/create |\n\
         |---|---|---|---|---|---|---|\n{}{}",
        s["accounts"],
        s["offered_per_second"],
        s["runner_starts_per_second"],
        row("one per account", &s["one_per_account"]),
        row("one account", &s["all_from_one_account"]),
    )
}
