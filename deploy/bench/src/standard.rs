//! `bench standard`: the whole standard set in one bounded run (about five minutes here), each
//! figure next to the baseline it is read against:
//!
//! 1. baselines: raw MongoDB insert and find-by-id, raw JetStream publish (1, 8, 32, 128 in flight);
//! 2. api alone (a process): get, list and create at 1, 8, 32 and 128 clients, as ratios of
//!    the raw find and insert rates at the same number in flight;
//! 3. end to end (api, notifier and one runner as processes): open loop at 50 and 200
//!    predictions/s for 30 s, then doubling to find the highest sustained rate; the cost of
//!    the fixed phases (CPU and peak memory per process, MongoDB commands per service);
//! 4. cost with a webhook for every event;
//! 5. runner scale-out with demo/sleep at 1, 2 and 4 runner processes.
//!
//! The results go to the JSON file named by `--out` and, as the tables printed, to the same
//! name with `.md`; the targets of the benchmark issue are checked at the end.

use std::time::Duration;

use bson::doc;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::{
    api_bench, baselines,
    cluster::{Cluster, round},
    cost_bench, e2e_bench,
    receiver::Receiver,
    scaling_bench,
    standard_report::{self, Measured},
};

/// Options of `bench standard`.
#[derive(clap::Args)]
pub struct Options {
    /// Seconds of each fixed end-to-end phase (50/s and 200/s).
    #[arg(long, default_value_t = 30)]
    e2e_seconds: u64,
    /// Seconds per api level.
    #[arg(long, default_value_t = 3)]
    api_seconds: u64,
}

/// Runs the set and returns the JSON results; the tables are printed and kept in `tables`.
pub async fn run(options: Options, tables: &mut String) -> anyhow::Result<Value> {
    let started = Instant::now();
    let step = |n: u32, what: &str| eprintln!("[{:>4.0} s] {n}/6 {what}", started.elapsed().as_secs_f64());

    step(1, "baselines");
    let baselines = baselines::measure(2).await?;

    step(2, "api alone");
    let api_cluster = Cluster::start(&api_bench::AS_DEPLOYED, false).await?;
    let servers = servers(&api_cluster).await;
    let api = api_bench::measure(&api_cluster, options.api_seconds).await;
    api_cluster.stop().await?;
    let api = api?;

    let mut cluster = Cluster::start(&[], true).await?;
    let stop = CancellationToken::new();
    let rest = async {
        cluster.add_runners(1, &cost_bench::ECHO_RUNNER).await?;
        let receiver = Receiver::start(cluster.secret.clone(), stop.clone()).await?;
        step(3, "end to end, open loop");
        let plan = e2e_bench::Plan {
            fixed: vec![(50, options.e2e_seconds), (200, options.e2e_seconds)],
            ramp_seconds: 10,
            max_rate: 1600,
        };
        let e2e = e2e_bench::measure(&mut cluster, &receiver, &plan).await?;
        step(4, "cost with a webhook for every event");
        let all_events = cost_bench::measure(&mut cluster, &receiver, 500).await?;
        anyhow::ensure!(receiver.bad_signatures() == 0, "{} webhooks had bad signatures", receiver.bad_signatures());
        step(5, "runner scale-out");
        let window = Duration::from_secs(8);
        let scaling = scaling_bench::measure(&mut cluster, 8, window).await?;
        anyhow::Ok((e2e, all_events, scaling_bench::json(&scaling, 8, window)))
    }
    .await;
    stop.cancel();
    cluster.stop().await?;
    let (e2e, all_events, scaling) = rest?;

    step(6, "cost with one worker thread per service");
    let all_events_one_worker = one_worker_cost().await?;

    let measured = Measured { baselines, api, e2e, all_events, all_events_one_worker, scaling };
    tables.push_str(&standard_report::tables(&measured));
    let mut results = standard_report::json(&measured);
    results["about"] = json!({
        "scenario": "standard",
        "finished_at": chrono::Utc::now().to_rfc3339(),
        "duration_seconds": round(started.elapsed().as_secs_f64(), 1),
        "servers": servers,
        "machine": machine(),
    });
    Ok(results)
}

/// The cost with a webhook for every event on a fresh system whose services each run one
/// tokio worker thread: fewer cross-thread wake-ups, less CPU per prediction, one core each.
async fn one_worker_cost() -> anyhow::Result<Value> {
    let one_worker = [("TOKIO_WORKER_THREADS", "1")];
    let mut cluster = Cluster::start(&one_worker, true).await?;
    let stop = CancellationToken::new();
    let cost = async {
        cluster.add_runners(1, &cost_bench::ECHO_RUNNER).await?;
        let receiver = Receiver::start(cluster.secret.clone(), stop.clone()).await?;
        cost_bench::measure(&mut cluster, &receiver, 500).await
    }
    .await;
    stop.cancel();
    cluster.stop().await?;
    cost
}

/// The versions of the servers in use, as they report them, and what the run script said of
/// them (`BENCH_SERVERS`: a stand-in does not say it is one).
async fn servers(cluster: &Cluster) -> Value {
    let mongodb = cluster
        .setup
        .store
        .database()
        .run_command(doc! {"buildInfo": 1})
        .await
        .ok()
        .and_then(|info| info.get_str("version").ok().map(str::to_owned));
    json!({
        "described_as": std::env::var("BENCH_SERVERS").ok(),
        "mongodb_reports_version": mongodb,
        "nats_server_version": cluster.setup.bus.client().server_info().version,
    })
}

/// Cores and CPU model of this machine.
fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model =
        cpuinfo.lines().find_map(|l| l.strip_prefix("model name")).map(|l| l.trim_start_matches([' ', '\t', ':']));
    json!({
        "cores": std::thread::available_parallelism().map(usize::from).ok(),
        "cpu": model,
        "memory": std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| m.lines().next().map(str::to_owned)),
    })
}
