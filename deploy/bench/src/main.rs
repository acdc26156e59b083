//! `bench`: benchmarks of the prediction service against real NATS and MongoDB
//! (`MONGODB_URI`, `NATS_URL`; `deploy/bench/run` starts the local stand-ins when unset).
//! Each run uses its own database and NATS prefix, is bounded in time and traffic, sends only
//! to loopback, and stops by itself.
//!
//! - `bench notifier`: webhook deliveries per second to a fast local receiver with one
//!   notifier, and the latency from status event published to webhook received.
//! - `bench runner`: demo/echo predictions per second through one runner.
//! - `bench cog`: the latency the service adds over calling a Cog server directly, and the
//!   first `start` webhook and SSE output of `demo/echo`.
//! - `bench cost [--traces]`: CPU, memory and MongoDB commands per prediction, per service
//!   process (with `--traces`, every span exported over OTLP to a sink on loopback).
//! - `bench baselines`: raw MongoDB and JetStream rates with the same clients.
//! - `bench api`: create, get and list through the api at 1, 8, 32 and 128 clients.
//! - `bench scaling`: demo/sleep completions per second with 1, 2, 4 and 8 runner processes,
//!   then creates per second with 1 and 2 api replicas.
//! - `bench scheduling`: start delays on the default model set, and of a light account.
//! - `bench faults`: the fault-injection suite (see [`faults`]).
//! - `bench charts --from FILE`: the standard set's SVG charts drawn again from its results
//!   (see [`charts`]).
//! - `bench standard`: the standard set in one bounded run, with ratios and targets
//!   (see [`standard`]); the tables also go to the `--out` file's name with `.md`.
#![forbid(unsafe_code)]

mod api_bench;
mod baselines;
mod charts;
mod cluster;
mod cog_bench;
mod cost_bench;
mod cpu_floor;
mod create_vs_insert;
mod e2e_bench;
mod faults;
mod load_client;
mod machine_cpu;
mod notifier_bench;
mod otlp_sink;
mod paced;
mod processes;
mod profiler;
mod receiver;
mod runner_bench;
mod scaling_bench;
mod scheduling_bench;
mod setup;
mod standard;
mod standard_report;
mod stats;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "bench", about = "Benchmarks of the prediction service")]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
    /// Where to write the results as JSON.
    #[arg(long, global = true, default_value = "bench-results.json")]
    out: String,
}

#[derive(Subcommand)]
enum Scenario {
    /// Notifier throughput and event-to-webhook latency.
    Notifier(notifier_bench::Options),
    /// demo/echo predictions per second through one runner.
    Runner(runner_bench::RunnerOptions),
    /// The latency the service adds over a direct call to a Cog server.
    Cog(cog_bench::Options),
    /// MongoDB commands per prediction, per service.
    Cost(cost_bench::Options),
    /// Raw MongoDB and JetStream rates.
    Baselines(baselines::Options),
    /// The api's throughput and latency at several concurrency levels.
    Api(api_bench::Options),
    /// Runner scale-out with demo/sleep at 1, 2, 4 and 8 runner processes, then api replicas.
    Scaling(scaling_bench::Options),
    /// Start delays on the default model set, and a light account behind a heavy backlog.
    Scheduling(scheduling_bench::Options),
    /// The standard set: baselines, api, end to end, cost and runner scale-out.
    Standard(standard::Options),
    /// The fault-injection suite: kills, restarts and bad receivers under steady load.
    Faults(faults::Options),
    /// Draws the standard set's SVG charts again from a results file, next to it.
    Charts {
        /// The results JSON of a standard run.
        #[arg(long, default_value = "deploy/bench/results/bench-results.json")]
        from: String,
    },
}

/// Draws the charts of `results` next to the file `out`, and says where.
fn draw_charts(results: &serde_json::Value, out: &str) -> anyhow::Result<()> {
    let dir =
        std::path::Path::new(out).parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    for path in charts::write_all(results, dir)? {
        println!("chart written to {}", path.display());
    }
    Ok(())
}

/// The load tool's tokio worker threads: `BENCH_LOAD_TOOL_THREADS`, by default 1. On two
/// cores shared with the system under test, a second worker mostly adds cross-thread wake-ups:
/// the api's creates cost the tool 34 µs of CPU each with one worker and 43–46 µs with two.
fn load_tool_threads() -> usize {
    std::env::var("BENCH_LOAD_TOOL_THREADS").ok().and_then(|n| n.parse().ok()).filter(|n| *n > 0).unwrap_or(1)
}

/// Writes a run's Markdown tables next to its JSON (`out` with the extension `.md`).
fn write_table(out: &str, tables: &str) {
    let md = std::path::Path::new(out).with_extension("md");
    if let Err(e) = std::fs::write(&md, tables) {
        eprintln!("could not write {}: {e}", md.display());
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match tokio::runtime::Builder::new_multi_thread().worker_threads(load_tool_threads()).enable_all().build() {
        Ok(runtime) => runtime.block_on(run(cli)),
        Err(e) => {
            eprintln!("bench failed: no tokio runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> ExitCode {
    let _telemetry = common::telemetry::init("bench");
    let result = match cli.scenario {
        Scenario::Notifier(options) => notifier_bench::run(options).await.map(|report| {
            println!("{}", report.table());
            report.json()
        }),
        Scenario::Runner(options) => runner_bench::run_runner(options).await,
        Scenario::Cog(options) => cog_bench::run(options).await,
        Scenario::Cost(options) => cost_bench::run(options).await,
        Scenario::Baselines(options) => baselines::run(options).await,
        Scenario::Api(options) => api_bench::run(options).await,
        Scenario::Scaling(options) => scaling_bench::run(options).await,
        Scenario::Scheduling(options) => scheduling_bench::run(options).await,
        Scenario::Faults(options) => {
            let mut table = String::new();
            let results = faults::run(options, &mut table).await;
            if results.is_ok() {
                println!("{table}");
                write_table(&cli.out, &table);
            }
            results
        }
        Scenario::Standard(options) => {
            let mut tables = String::new();
            let results = standard::run(options, &mut tables).await;
            if let Ok(results) = &results {
                println!("{tables}");
                write_table(&cli.out, &tables);
                if let Err(e) = draw_charts(results, &cli.out) {
                    eprintln!("charts not drawn: {e:#}");
                }
            }
            results
        }
        Scenario::Charts { from } => {
            return match std::fs::read(&from)
                .map_err(anyhow::Error::from)
                .and_then(|bytes| Ok(serde_json::from_slice(&bytes)?))
                .and_then(|results| draw_charts(&results, &from))
            {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("bench charts failed: {e:#}");
                    ExitCode::FAILURE
                }
            };
        }
    };
    match result.and_then(|json| {
        std::fs::write(&cli.out, serde_json::to_vec_pretty(&json)?)?;
        println!("results written to {}", cli.out);
        Ok(())
    }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}
