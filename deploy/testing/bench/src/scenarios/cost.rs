//! `bench cost`: MongoDB commands, CPU and memory per prediction, per service, with a webhook
//! for every event (the most a prediction costs). The three services run as processes (one
//! runner); `--predictions` demo/echo predictions are created over HTTP, 8 at a time, each with
//! a webhook to a signed receiver on loopback, and the growth of each service's counters over
//! the run, divided by the number of predictions, is its cost. Services run as deployed unless
//! `--count-commands` turns on their MongoDB command monitoring. With `--rate` the predictions
//! come in an open loop instead, as the standard set's end-to-end phases send them.

use std::time::Duration;

use anyhow::Context;
use futures::{StreamExt, stream};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::measure::profiler::Profiler;
use harness::cluster::{Cluster, cost};
use harness::otlp_sink::OtlpSink;
use harness::receiver::Receiver;

/// Options of `bench cost`.
#[derive(clap::Args)]
pub struct Options {
    /// Predictions to create.
    #[arg(long, default_value_t = 500)]
    predictions: usize,
    /// Creates in flight at once.
    #[arg(long, default_value_t = 8)]
    in_flight: usize,
    /// Export every service's spans over OTLP/HTTP to a sink on loopback (the cost of tracing
    /// export); without it no exporter runs, as in a deployment without an endpoint.
    #[arg(long)]
    traces: bool,
    /// Measure this many times, each on a fresh system, and report each run and the median
    /// (runs on this 2-core machine differ by up to 30 %; compare builds in alternating runs).
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Turn on the services' MongoDB command monitoring to count their commands (it costs
    /// CPU; without it the services run as deployed and no commands are counted).
    #[arg(long)]
    count_commands: bool,
    /// Record each service with `perf` during one more measured run on a fresh system, into
    /// this directory (`deploy/testing/bench/profile` draws flame graphs from it); that run is not
    /// reported.
    #[arg(long)]
    perf: Option<std::path::PathBuf>,
    /// Instead of batches, an open loop at this many predictions a second for `--seconds`,
    /// as the standard set's end-to-end phases run (`Prefer: wait`, a webhook for
    /// `completed`), so that `--perf` records where an open loop's CPU goes.
    #[arg(long)]
    rate: Option<u64>,
    /// Seconds of the open loop of `--rate`.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// What spend adds: each repeat measures a fresh system without prices and one with the
    /// runners' pool priced and the account under a budget it does not reach (so every job's
    /// cost is reckoned and added, each create checks the budget, each batch of costs checks
    /// the thresholds), in alternating order; reports both medians and their ratio.
    #[arg(long)]
    spend: bool,
}

/// The price of the pool and the account's budget in the priced runs of `--spend`: demo/echo
/// runs for a millisecond or two, so at $1 a second each job costs something (a job that
/// costs nothing adds nothing to check), and the budget is never reached.
const SPEND_PRICE: &str = "1";
const SPEND_BUDGET: &str = "1000000";

/// How long the last webhooks may take to arrive.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Settings of the runner the cost runs use.
pub const ECHO_RUNNER: [(&str, &str); 2] = [("RUNNER_MODELS", "demo/echo"), ("RUNNER_CONCURRENCY", "16")];

/// Creates `predictions` (after a warm-up) on `cluster`, which runs demo/echo, and returns
/// each service's cost per prediction.
pub async fn measure(
    cluster: &mut Cluster,
    receiver: &Receiver,
    predictions: usize,
    in_flight: usize,
) -> anyhow::Result<Value> {
    let http = reqwest::Client::new();
    let url = format!("{}/v1/models/demo/echo/predictions", cluster.base);
    let key = cluster.key.clone();
    let run_batch = |count: usize| {
        let body = json!({"input": {"prompt": "cost"}, "webhook": receiver.url}).to_string();
        let (http, url, key) = (&http, &url, &key);
        let target = receiver.completed_count() + count;
        async move {
            let created: Vec<anyhow::Result<()>> = stream::iter(0..count)
                .map(|_| {
                    let request =
                        http.post(url).bearer_auth(key).header("content-type", "application/json").body(body.clone());
                    async move {
                        let response = request.send().await?;
                        anyhow::ensure!(response.status() == 201, "create answered {}", response.status());
                        Ok(())
                    }
                })
                .buffer_unordered(in_flight)
                .collect()
                .await;
            created.into_iter().collect::<anyhow::Result<()>>()?;
            let deadline = Instant::now() + SETTLE_TIMEOUT;
            while receiver.completed_count() < target {
                anyhow::ensure!(Instant::now() < deadline, "webhooks still missing after {SETTLE_TIMEOUT:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            // The notifier records each attempt right after its answer.
            tokio::time::sleep(Duration::from_secs(1)).await;
            anyhow::Ok(())
        }
    };
    run_batch(20).await?;
    let before = cluster.snapshot().await?;
    let delivered_before = receiver.deliveries();
    run_batch(predictions).await?;
    let mut measured = cost(&before, &cluster.snapshot().await?, predictions);
    let webhooks = (receiver.deliveries() - delivered_before) as f64 / predictions.max(1) as f64;
    measured["webhooks_per_prediction"] = json!(harness::cluster::round(webhooks, 3));
    Ok(measured)
}

/// The run whose total CPU per prediction is the median (the lower middle of an even count).
fn median_run(runs: &[Value]) -> &Value {
    let cpu = |r: &Value| r["cpu_us_per_prediction"].as_f64().unwrap_or_default();
    let mut sorted: Vec<&Value> = runs.iter().collect();
    sorted.sort_by(|a, b| cpu(a).total_cmp(&cpu(b)));
    sorted[(sorted.len() - 1) / 2]
}

/// The cost as a table.
pub fn table(cost: &Value) -> String {
    let mut table = String::from(
        "| service | CPU s per 1,000 | in the kernel | peak RSS | MongoDB writes | MongoDB reads | commands per prediction | context switches |\n|---|---|---|---|---|---|---|---|\n",
    );
    for (service, c) in cost["services"].as_object().into_iter().flatten() {
        let commands: Vec<String> = c["mongodb_commands_per_prediction"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(command, n)| format!("{command} {n}"))
            .collect();
        table.push_str(&format!(
            "| {service} | {} | {:.0} % | {} MiB | {} | {} | {} | {} |\n",
            c["cpu_seconds_per_1000"],
            c["kernel_share_of_cpu"].as_f64().unwrap_or_default() * 100.0,
            c["peak_rss_mib"],
            counted(&c["mongodb_writes_per_prediction"]),
            counted(&c["mongodb_reads_per_prediction"]),
            commands.join(", "),
            c["context_switches_per_prediction"],
        ));
    }
    table.push_str(&format!(
        "| all | {:.3} | {:.0} % | | {} | {} | | {} |\n",
        cost["cpu_us_per_prediction"].as_f64().unwrap_or_default() / 1000.0,
        cost["kernel_share_of_cpu"].as_f64().unwrap_or_default() * 100.0,
        counted(&cost["mongodb_writes_per_prediction"]),
        counted(&cost["mongodb_reads_per_prediction"]),
        cost["context_switches_per_prediction"],
    ));
    table
}

/// A command count, or "not counted" when the services ran without command monitoring.
fn counted(value: &Value) -> String {
    if value.is_null() { "not counted".into() } else { value.to_string() }
}

/// One measured batch on a fresh system (its database and streams dropped afterwards, so a
/// run does not pay for the data of the one before), recorded with `perf` into `perf` when
/// given.
async fn fresh_run(
    extra: &[(&str, &str)],
    options: &Options,
    perf: Option<&std::path::Path>,
    priced: bool,
) -> anyhow::Result<Value> {
    let stop = CancellationToken::new();
    let mut cluster = Cluster::start(extra, true).await?;
    let result = async {
        if priced {
            price_and_budget(&cluster).await?;
        }
        cluster.add_runners(1, &ECHO_RUNNER).await?;
        let receiver = Receiver::start(cluster.secret.clone(), stop.clone()).await?;
        let Some(dir) = perf else {
            return measured_run(&mut cluster, &receiver, options).await;
        };
        let profiler = Profiler::start(dir, &cluster.pids()).await?;
        let profiled = measured_run(&mut cluster, &receiver, options).await;
        for file in profiler.stop().await? {
            println!("perf recording written to {}", file.display());
        }
        profiled
    }
    .await;
    stop.cancel();
    cluster.stop().await?;
    result
}

/// A batch as `options` ask, or their open loop.
async fn measured_run(cluster: &mut Cluster, receiver: &Receiver, options: &Options) -> anyhow::Result<Value> {
    let Some(rate) = options.rate else {
        return measure(cluster, receiver, options.predictions, options.in_flight).await;
    };
    let plan = super::e2e::Plan { fixed: vec![(rate, options.seconds)], ramp_seconds: 0, max_rate: rate };
    let phases = super::e2e::measure(cluster, receiver, &plan).await?;
    let phase = phases.first().context("the open loop's phase")?;
    anyhow::ensure!(phase.lost() == 0, "{} predictions of the open loop were lost", phase.lost());
    phase.cost().cloned().context("the open loop's cost")
}

/// Prices the default pool at [`SPEND_PRICE`] (before the runner starts, so it reads it) and
/// gives the account a budget of [`SPEND_BUDGET`].
async fn price_and_budget(cluster: &Cluster) -> anyhow::Result<()> {
    use common::domain::{Micros, Pool, Price};
    let store = &cluster.setup.store;
    let price = Price::parse_dollars(SPEND_PRICE).map_err(|e| anyhow::anyhow!("{e}"))?;
    store.prices().set(&Pool::default_pool(), price).await?;
    let budget = Micros::parse_dollars(SPEND_BUDGET).map_err(|e| anyhow::anyhow!("{e}"))?;
    let account = store.accounts().find_by_name("bench").await?.context("the account bench")?;
    store.accounts().set_operator_budget(&account.id, Some(budget)).await?;
    Ok(())
}

/// `bench cost --spend`: pairs of fresh runs without and with prices and a budget.
async fn spend(extra: &[(&str, &str)], options: &Options) -> anyhow::Result<Value> {
    fresh_run(extra, options, None, false).await?;
    let (mut plain, mut priced) = (Vec::new(), Vec::new());
    for n in 0..options.repeat.max(1) {
        // Alternating which goes first, so a drift of the machine falls on both alike.
        for with_spend in [n % 2 == 1, n % 2 == 0] {
            let run = fresh_run(extra, options, None, with_spend).await?;
            println!(
                "  pair {} {}: {} µs a prediction",
                n + 1,
                if with_spend { "priced" } else { "plain" },
                run["cpu_us_per_prediction"]
            );
            if with_spend { priced.push(run) } else { plain.push(run) }
        }
    }
    let cpu = |r: &Value| r["cpu_us_per_prediction"].as_f64().unwrap_or_default();
    let (without, with) = (cpu(median_run(&plain)), cpu(median_run(&priced)));
    let ratio = harness::cluster::round(with / without.max(1.0), 3);
    println!("spend: {without} µs a prediction without prices, {with} µs with (median of each): {ratio}x");
    Ok(json!({
        "scenario": "cost --spend", "predictions_per_run": options.predictions,
        "price_per_second": SPEND_PRICE, "monthly_budget": SPEND_BUDGET,
        "cpu_us_per_prediction_without": without, "cpu_us_per_prediction_with": with, "ratio": ratio,
        "without_each_run": plain.iter().map(cpu).collect::<Vec<_>>(),
        "with_each_run": priced.iter().map(cpu).collect::<Vec<_>>(),
        "without": median_run(&plain), "with": median_run(&priced),
    }))
}

/// `bench cost`
pub async fn run(options: Options) -> anyhow::Result<Value> {
    let stop = CancellationToken::new();
    let sink = if options.traces { Some(OtlpSink::start(stop.clone()).await?) } else { None };
    let mut extra = Vec::new();
    if !options.count_commands {
        extra.extend(harness::cluster::AS_DEPLOYED);
    }
    if options.rate.is_some() {
        extra.extend(super::e2e::ENV);
    }
    if let Some(sink) = &sink {
        // Exported promptly, so the spans of the run are sent (and paid for) within it.
        // `RUST_LOG` filters spans as well as logs, and the services' spans are at `info`:
        // under the bench's default `warn` nothing was exported (0 exports, 0 bytes).
        extra.extend([
            ("OTEL_EXPORTER_OTLP_ENDPOINT", sink.endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "200"),
            ("RUST_LOG", "info"),
        ]);
    }
    if options.spend {
        let measured = spend(&extra, &options).await;
        stop.cancel();
        return measured;
    }
    let result = async {
        // The servers' first thousands of operations tend to run slower (the stand-in is a
        // JVM): five fresh-system batches right after start cost 880, 960, 600, 740 and 580 µs
        // per prediction; after one unreported warm-up batch, 760, 600, 580, 700 and 770.
        fresh_run(&extra, &options, None, false).await?;
        let mut runs = Vec::new();
        for _ in 0..options.repeat.max(1) {
            runs.push(fresh_run(&extra, &options, None, false).await?);
        }
        if let Some(dir) = &options.perf {
            fresh_run(&extra, &options, Some(dir), false).await?;
        }
        anyhow::Ok(runs)
    }
    .await;
    stop.cancel();
    let runs = result?;
    let traces = sink.map(|s| s.received()).map(|(exports, bytes)| json!({"exports": exports, "bytes": bytes}));
    let export = if traces.is_some() { "exported over OTLP" } else { "not exported" };
    let median = median_run(&runs);
    println!("cost per prediction (demo/echo, webhook with all events, spans {export})\n{}", table(median).trim_end());
    let each: Vec<f64> = runs.iter().filter_map(|r| r["cpu_us_per_prediction"].as_f64()).collect();
    if runs.len() > 1 {
        println!("CPU µs per prediction in each run: {each:?}; the table shows the median run");
        for (n, run) in runs.iter().enumerate() {
            let services: Vec<String> = run["services"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(service, c)| {
                    format!("{service} {}", c["cpu_seconds_per_1000"].as_f64().unwrap_or_default() * 1000.0)
                })
                .collect();
            println!("  run {}: {} µs ({})", n + 1, run["cpu_us_per_prediction"], services.join(", "));
        }
    }
    Ok(json!({
        "scenario": "cost", "webhook_events": "all", "traces_exported": traces,
        "cost": median, "cpu_us_per_prediction_each_run": each,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_run_is_the_middle_one_by_cpu() {
        let runs: Vec<Value> = [1400.0, 1000.0, 1190.0].iter().map(|c| json!({"cpu_us_per_prediction": c})).collect();
        assert_eq!(median_run(&runs)["cpu_us_per_prediction"], 1190.0);
        let two: Vec<Value> = [1330.0, 1220.0].iter().map(|c| json!({"cpu_us_per_prediction": c})).collect();
        assert_eq!(median_run(&two)["cpu_us_per_prediction"], 1220.0, "the lower middle");
    }
}
