//! `bench`: benchmarks of the prediction service against real NATS and MongoDB
//! (`MONGODB_URI`, `NATS_URL`; `deploy/testing/bench/run` starts the local stand-ins when unset).
//! Each run uses its own database and NATS prefix, is bounded in time and traffic, sends only
//! to loopback, and stops by itself.
//!
//! - `bench cog`: the latency the service adds over calling a Cog server directly, and the
//!   first `start` webhook and SSE output of `demo/echo`.
//! - `bench coldstart [--rounds N]`: a model at zero's first prediction, from the create to
//!   `processing`, beside coglet's own time from spawn to `READY` on the same fixture.
//! - `bench cost [--traces]`: CPU, memory and MongoDB commands per prediction, per service
//!   process (with `--traces`, every span exported over OTLP to a sink on loopback).
//! - `bench baselines`: raw MongoDB and JetStream rates with the same clients.
//! - `bench api`: create, get and list through the api at 1, 8, 32 and 128 clients.
//! - `bench files`: upload and download MB/s through the api against the raw store (GridFS and S3), the api's
//!   memory during a transfer, and the latency a file input adds to a Cog model.
//! - `bench queue`: a read of a waiting prediction (with its queue place) beside a read of an
//!   ended one, and what an account's concurrency cap costs per job.
//! - `bench overload [--rate N]`: a step load at 1x, 2x and 1x of N a second, with a
//!   timeline of goodput, rejections and p99 per second (see [`scenarios::overload`]).
//! - `bench sustained [--searches N]`: the standard set's searches for the sustained
//!   end-to-end rate alone, each on a fresh system, every phase printed.
//! - `bench scaling`: demo/sleep completions per second with 1, 2, 4 and 8 runner processes,
//!   then creates per second with 1 and 2 api replicas.
//! - `bench scheduling`: start delays on the default model set, and of a light account.
//! - `bench soak --state DIR`: a day of real use against a running `deploy/local/up`
//!   (`deploy/testing/bench/soak` starts one of its own and times its restart; see [`scenarios::soak`]).
//! - `bench trainings`: a training through the service against the trainer alone, and a
//!   fine-tune's predictions (weights by signed URL) against the base version's.
//! - `bench charts --from FILE`: the standard set's SVG charts drawn again from its results
//!   (see [`report::charts`]).
//! - `bench standard`: the standard set in one bounded run, with ratios and targets
//!   (see [`standard`]); the tables also go to the `--out` file's name with `.md`.
//!
//! Inside: [`scenarios`] (a file per scenario), [`measure`] (the instruments besides
//! latency), [`report`] (the CPU floor, tables and charts), [`standard`] (the set, in order);
//! what the fault-injection suite (`deploy/testing/faults`) needs as well lives in the `harness` crate.
#![forbid(unsafe_code)]

mod measure;
mod report;
mod scenarios;
mod standard;

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
    /// The latency the service adds over a direct call to a Cog server.
    Cog(scenarios::cog::Options),
    /// The first prediction of a model at zero instances, beside coglet's own start.
    Coldstart(scenarios::cold_start::Options),
    /// MongoDB commands per prediction, per service.
    Cost(scenarios::cost::Options),
    /// Raw MongoDB and JetStream rates.
    Baselines(scenarios::baselines::Options),
    /// The api's throughput and latency at several concurrency levels.
    Api(scenarios::api_alone::Options),
    /// Files: upload and download MB/s and the api's memory, and file inputs on a Cog model.
    Files(scenarios::files::Options),
    /// File outputs of a Cog model streamed through the runner: a 1 GiB file's memory and time, images at load.
    Outputs(scenarios::outputs::Options),
    /// A read with the queue place beside one without, and the cost of the cap check per job.
    Queue(scenarios::queue::Options),
    /// A step load at 1x, 2x and 1x the sustained rate: goodput, rejections and recovery.
    Overload(scenarios::overload::Options),
    /// The searches for the sustained end-to-end rate alone, every phase of each.
    Sustained(scenarios::e2e::Options),
    /// Runner scale-out with demo/sleep at 1, 2, 4 and 8 runner processes, then api replicas.
    Scaling(scenarios::scaling::Options),
    /// Priority levels under a saturating normal load, and the lanes at 1,000 and 10,000 accounts.
    Priority(scenarios::priority::Options),
    /// Start delays on the default model set, and a light account behind a heavy backlog.
    Scheduling(scenarios::scheduling::Options),
    /// A day of real use against a running `deploy/local/up`.
    Soak(scenarios::soak::Options),
    /// A training through the service against the trainer alone, and a fine-tune's predictions.
    Trainings(scenarios::trainings::Options),
    /// The standard set: baselines, api, end to end, cost and runner scale-out, each figure
    /// then compared with the committed run's (`--committed`).
    Standard {
        #[command(flatten)]
        options: standard::Options,
        /// The run to compare with: a figure worse than its by more than 10 % is flagged.
        #[arg(long, default_value = "deploy/testing/bench/results/bench-results.json")]
        committed: String,
    },
    /// Compares two standard runs' results files, figure by figure, as `standard` does at its end.
    Compare {
        /// The later run's results.
        now: String,
        /// The run to compare it with.
        #[arg(long, default_value = "deploy/testing/bench/results/bench-results.json")]
        committed: String,
    },
    /// Draws the standard set's SVG charts again from a results file, next to it.
    Charts {
        /// The results JSON of a standard run.
        #[arg(long, default_value = "deploy/testing/bench/results/bench-results.json")]
        from: String,
    },
}

/// A results file of the bench, as JSON.
fn read_results(path: &str) -> anyhow::Result<serde_json::Value> {
    let bytes = std::fs::read(path).map_err(|e| anyhow::anyhow!("{path}: {e}"))?;
    Ok(serde_json::from_slice(&bytes)?)
}

/// Draws the charts of `results` next to the file `out`, and says where.
fn draw_charts(results: &serde_json::Value, out: &str) -> anyhow::Result<()> {
    let dir =
        std::path::Path::new(out).parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    for path in report::charts::write_all(results, dir)? {
        println!("chart written to {}", path.display());
    }
    Ok(())
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
    match harness::load_tool_runtime() {
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
        Scenario::Cog(options) => scenarios::cog::run(options).await,
        Scenario::Coldstart(options) => scenarios::cold_start::run(options).await,
        Scenario::Cost(options) => scenarios::cost::run(options).await,
        Scenario::Baselines(options) => scenarios::baselines::run(options).await,
        Scenario::Api(options) => scenarios::api_alone::run(options).await,
        Scenario::Files(options) => scenarios::files::run(options).await,
        Scenario::Outputs(options) => scenarios::outputs::run(options).await,
        Scenario::Queue(options) => scenarios::queue::run(options).await,
        Scenario::Overload(options) => scenarios::overload::run(options).await,
        Scenario::Sustained(options) => scenarios::e2e::run(options).await,
        Scenario::Scaling(options) => scenarios::scaling::run(options).await,
        Scenario::Scheduling(options) => scenarios::scheduling::run(options).await,
        Scenario::Priority(options) => scenarios::priority::run(options).await,
        Scenario::Trainings(options) => scenarios::trainings::run(options).await,
        Scenario::Soak(options) => scenarios::soak::run(options).await,
        Scenario::Standard { options, committed } => {
            // Read before the run, which may write over it.
            let before = read_results(&committed);
            let mut tables = String::new();
            let mut results = standard::run(options, &mut tables).await;
            if let Ok(results) = &mut results {
                match &before {
                    Ok(before) => {
                        let changes = report::gate::compare(results, before);
                        tables.push_str(&report::gate::summary(&changes, &committed));
                        results["change_from_committed"] = report::gate::json(&changes, &committed);
                    }
                    Err(e) => {
                        tables.push_str(&format!("\nNo comparison: the committed run {committed} not read: {e:#}\n"))
                    }
                }
                println!("{tables}");
                write_table(&cli.out, &tables);
                if let Err(e) = draw_charts(results, &cli.out) {
                    eprintln!("charts not drawn: {e:#}");
                }
            }
            results
        }
        Scenario::Compare { now, committed } => {
            return match read_results(&now).and_then(|n| Ok((n, read_results(&committed)?))) {
                Ok((now, before)) => {
                    println!("{}", report::gate::summary(&report::gate::compare(&now, &before), &committed));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("bench compare failed: {e:#}");
                    ExitCode::FAILURE
                }
            };
        }
        Scenario::Charts { from } => {
            return match read_results(&from).and_then(|results| draw_charts(&results, &from)) {
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
