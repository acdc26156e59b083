//! Scale-out, simulated on one machine.
//!
//! Runners: `demo/sleep` predictions of `SLEEP_SECONDS` each, served by 1, 2, 4 and then 8
//! runner processes with the same per-runner concurrency. Before each step a backlog larger
//! than the runners can finish in the window is created, so the runners, not the client, set
//! the pace; completions are counted from the status events (`completed`) on NATS over a fixed
//! window after a short warm-up. The ideal is runners × concurrency / `SLEEP_SECONDS`; each
//! step's efficiency is its rate over N times the one-runner rate.
//!
//! Api replicas ([`api_replicas`]): creates per second from 64 closed-loop clients against one
//! api, then split over two api processes on the same NATS and database. Beside each step,
//! how busy the machine's cores were and whose CPU each create took (api, load tool, NATS and
//! MongoDB servers): when one replica already keeps the cores busy, a second cannot add
//! creates on this machine, and the table says so instead of leaving it to be guessed.

use std::{collections::HashSet, time::Duration};

use chrono::{DateTime, Utc};
use futures::{StreamExt, stream};
use serde_json::{Value, json};
use tokio::time::Instant;

use futures::future::try_join_all;
use http::Method;

use crate::measure::machine_cpu::{CpuTimes, ProcessCpu, Role};
use harness::cluster::{Cluster, round};
use harness::load_client::Template;
use harness::load_client::closed_loop;

/// Seconds each prediction sleeps.
pub const SLEEP_SECONDS: f64 = 0.5;
const WARM_UP: Duration = Duration::from_secs(2);
/// How long after the window events are still read.
const EVENT_LAG: Duration = Duration::from_secs(2);

/// One step's outcome.
pub struct Step {
    /// Runner processes.
    pub runners: usize,
    /// Completions per second measured.
    pub per_second: f64,
    /// Runners × concurrency / sleep.
    pub ideal: f64,
}

/// Runner processes per step.
pub const RUNNER_STEPS: [usize; 4] = [1, 2, 4, 8];

/// Measures 1, 2, 4 and 8 runners at `concurrency` each over `window`. Stops any runners of the
/// cluster first, and leaves the sleep runners to be stopped with it.
pub async fn measure(cluster: &mut Cluster, concurrency: usize, window: Duration) -> anyhow::Result<Vec<Step>> {
    cluster.stop_runners().await?;
    let concurrency_text = concurrency.to_string();
    let runner_settings = [("RUNNER_MODELS", "demo/sleep"), ("RUNNER_CONCURRENCY", concurrency_text.as_str())];
    let mut events = cluster.setup.bus.client().subscribe(cluster.setup.bus.subjects().all_events()).await?;
    let mut steps = Vec::new();
    for runners in RUNNER_STEPS {
        let ideal = (runners * concurrency) as f64 / SLEEP_SECONDS;
        let backlog = (ideal * (WARM_UP + window + Duration::from_secs(2)).as_secs_f64()).ceil() as usize;
        create_backlog(cluster, backlog).await?;
        cluster.add_runners(runners - cluster.runner_count(), &runner_settings).await?;
        tokio::time::sleep(WARM_UP).await;
        // Completions are counted by their `completed_at`, so events that reach this process
        // late still count in the right window; each prediction counts once (a republished
        // event reaches plain subscribers twice).
        let opened = Utc::now();
        let closes = opened + chrono::Duration::from_std(window)?;
        let read_until = Instant::now() + window + EVENT_LAG;
        let mut completed = HashSet::new();
        while let Ok(Some(message)) = tokio::time::timeout_at(read_until, events.next()).await {
            let event: Value = serde_json::from_slice(&message.payload).unwrap_or_default();
            let at = event["prediction"]["completed_at"].as_str().and_then(|t| t.parse::<DateTime<Utc>>().ok());
            if event["event"] == "completed"
                && let (Some(id), Some(at)) = (event["prediction_id"].as_str(), at)
                && (opened..closes).contains(&at)
            {
                completed.insert(id.to_owned());
            }
        }
        let per_second = completed.len() as f64 / window.as_secs_f64();
        steps.push(Step { runners, per_second, ideal });
    }
    Ok(steps)
}

/// Creates `count` demo/sleep predictions as fast as the api takes them.
async fn create_backlog(cluster: &Cluster, count: usize) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let url = format!("{}/v1/models/demo/sleep/predictions", cluster.base);
    let body = json!({"input": {"seconds": SLEEP_SECONDS}}).to_string();
    let results: Vec<anyhow::Result<()>> = stream::iter(0..count)
        .map(|_| {
            let request = http.post(&url).bearer_auth(&cluster.key).header("content-type", "application/json");
            let body = body.clone();
            async move {
                let response = request.body(body).send().await?;
                anyhow::ensure!(response.status() == 201, "create answered {}", response.status());
                Ok(())
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    results.into_iter().collect()
}

/// The steps as JSON.
pub fn json(steps: &[Step], concurrency: usize, window: Duration) -> Value {
    let one = steps.first().map_or(f64::NAN, |s| s.per_second);
    json!({
        "model": "demo/sleep", "sleep_seconds": SLEEP_SECONDS, "concurrency_per_runner": concurrency,
        "window_seconds": window.as_secs_f64(),
        "steps": steps.iter().map(|s| json!({
            "runners": s.runners, "completions_per_second": round(s.per_second, 2),
            "ideal_per_second": s.ideal, "ratio_to_ideal": round(s.per_second / s.ideal, 3),
            "efficiency": round(efficiency(s.per_second, one, s.runners), 3),
        })).collect::<Vec<_>>(),
    })
}

/// A step's rate over `n` times the rate of one.
pub fn efficiency(rate: f64, one: f64, n: usize) -> f64 {
    rate / (n as f64 * one)
}

/// Clients of the api-replicas measurement, split evenly over the replicas.
const API_CLIENTS: usize = 64;

/// Creates per second with 1 and then 2 api processes (the second is started here), `seconds`
/// each; JSON with each step's rate and efficiency.
pub async fn api_replicas(cluster: &mut Cluster, seconds: u64) -> anyhow::Result<Value> {
    let body = harness::load_client::CREATE_BODY;
    let path = "/v1/models/demo/echo/predictions";
    let mut bases = vec![cluster.base.clone()];
    let mut steps = Vec::new();
    for replicas in [1, 2] {
        if bases.len() < replicas {
            bases.push(cluster.add_api().await?);
        }
        let key = cluster.key.as_str();
        let loops = bases.iter().map(|base| async move {
            let template = Template::new(Method::POST, base, path, key)?.json(body);
            let (per_second, _, _) = closed_loop(seconds, API_CLIENTS / replicas, base, &template, 201).await?;
            anyhow::Ok(per_second)
        });
        let (cores_before, processes_before) = (CpuTimes::now()?, ProcessCpu::now()?);
        let per_second: f64 = try_join_all(loops).await?.into_iter().sum();
        let (cores, by_role) = (CpuTimes::now()?.since(cores_before), ProcessCpu::now()?.since(&processes_before));
        let creates = per_second * seconds as f64;
        let us_per_create = |role: Role| round(1e6 * by_role.get(&role).copied().unwrap_or(0.0) / creates.max(1.0), 0);
        let cpu: serde_json::Map<String, Value> = [Role::Api, Role::LoadTool, Role::Nats, Role::Mongodb]
            .into_iter()
            .map(|role| (role.name().to_owned(), json!(us_per_create(role))))
            .collect();
        steps.push((replicas, per_second, cores.busy_share().map(|b| round(b, 2)), cpu));
    }
    let one = steps[0].1;
    Ok(json!({
        "request": "create demo/echo", "clients": API_CLIENTS, "seconds_per_step": seconds,
        "steps": steps.iter().map(|(replicas, rate, busy, cpu)| json!({
            "api_replicas": replicas, "creates_per_second": round(*rate, 0),
            "efficiency": round(efficiency(*rate, one, *replicas), 3),
            "machine_cpu_busy": busy, "cpu_us_per_create_by_process": cpu,
        })).collect::<Vec<_>>(),
    }))
}

/// The api-replicas results of [`api_replicas`] as a table.
pub fn api_table(replicas: &Value) -> String {
    let mut out = format!(
        "api replicas: creates/s from {} closed-loop clients split over the replicas, {} s each; the machine's cores busy \
         (all processes) and CPU per create by process, µs\n\n\
         | api replicas | creates/s | efficiency (rate / N × one replica's) | cores busy | api | load tool | nats | mongodb |\n\
         |---|---|---|---|---|---|---|---|\n",
        replicas["clients"], replicas["seconds_per_step"]
    );
    for s in replicas["steps"].as_array().into_iter().flatten() {
        let cpu = &s["cpu_us_per_create_by_process"];
        let busy = s["machine_cpu_busy"].as_f64().map_or("-".to_owned(), |b| format!("{:.0} %", 100.0 * b));
        out.push_str(&format!(
            "| {} | {} | {} | {busy} | {} | {} | {} | {} |\n",
            s["api_replicas"],
            s["creates_per_second"],
            s["efficiency"],
            cpu["api"],
            cpu["load_tool"],
            cpu["nats"],
            cpu["mongodb"]
        ));
    }
    out
}

/// Options of `bench scaling` (runners, then api replicas).
#[derive(clap::Args)]
pub struct Options {
    /// Predictions running at once in each runner.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Seconds each step is measured.
    #[arg(long, default_value_t = 8)]
    seconds: u64,
}

/// `bench scaling`
pub async fn run(options: Options) -> anyhow::Result<Value> {
    let mut cluster = Cluster::start(&[], false).await?;
    let window = Duration::from_secs(options.seconds);
    let measured = async {
        let steps = measure(&mut cluster, options.concurrency, window).await?;
        let replicas = api_replicas(&mut cluster, options.seconds).await?;
        anyhow::Ok((steps, replicas))
    }
    .await;
    cluster.stop().await?;
    let (steps, replicas) = measured?;
    let results = json(&steps, options.concurrency, window);
    println!("{}\n\n{}", table(&results).trim_end(), api_table(&replicas).trim_end());
    Ok(json!({"scenario": "scaling", "scaling": results, "api_replicas": replicas}))
}

/// The results of [`json()`] as a table.
pub fn table(scaling: &Value) -> String {
    let mut out = format!(
        "runner scale-out (demo/sleep {} s, {} per runner)\n\n\
         | runners | completions/s | ideal | ratio to ideal | efficiency (rate / N × one runner's) |\n|---|---|---|---|---|\n",
        scaling["sleep_seconds"], scaling["concurrency_per_runner"]
    );
    let steps = scaling["steps"].as_array().cloned().unwrap_or_default();
    let rate = |s: &Value| s["completions_per_second"].as_f64().unwrap_or(f64::NAN);
    let one = steps.first().map_or(f64::NAN, rate);
    for s in &steps {
        out.push_str(&format!(
            "| {} | {:.1} | {} | {} | {:.2} |\n",
            s["runners"],
            rate(s),
            s["ideal_per_second"],
            s["ratio_to_ideal"],
            efficiency(rate(s), one, s["runners"].as_u64().unwrap_or(1) as usize)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replicas_table_shows_how_busy_the_cores_were_and_whose_cpu_each_create_took() {
        let replicas = json!({"clients": 64, "seconds_per_step": 3, "steps": [
            {"api_replicas": 1, "creates_per_second": 10000.0, "efficiency": 1.0, "machine_cpu_busy": 0.97,
             "cpu_us_per_create_by_process": {"api": 70.0, "load_tool": 40.0, "nats": 30.0, "mongodb": 50.0}},
            {"api_replicas": 2, "creates_per_second": 9000.0, "efficiency": 0.45, "machine_cpu_busy": null,
             "cpu_us_per_create_by_process": {"api": 90.0, "load_tool": 45.0, "nats": 35.0, "mongodb": 60.0}},
        ]});
        let table = api_table(&replicas);
        assert!(table.contains("| 1 | 10000.0 | 1.0 | 97 % | 70.0 | 40.0 | 30.0 | 50.0 |"), "{table}");
        assert!(table.contains("| 2 | 9000.0 | 0.45 | - | 90.0 |"), "an unread share shows as -: {table}");
        assert_eq!(efficiency(9000.0, 10000.0, 2), 0.45);
    }
}
