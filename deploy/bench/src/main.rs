//! `bench`: benchmarks of the prediction service against real NATS and MongoDB
//! (`MONGODB_URI`, `NATS_URL`; `deploy/bench/run` starts the local stand-ins when unset).
//! Each run uses its own database and NATS prefix, is bounded in time and traffic, sends only
//! to loopback, and stops by itself.
//!
//! - `bench notifier`: webhook deliveries per second to a fast local receiver with one
//!   notifier, and the latency from status event published to webhook received.
//! - `bench runner`: demo/echo predictions per second through one runner.
//! - `bench cog --url URL`: the latency a runner adds over calling a Cog server directly.
//! - `bench cost`: MongoDB commands per prediction, per service.
//! - `bench baselines`: raw MongoDB and JetStream rates with the same clients.
//! - `bench api`: create, get and list through the api at 1, 8, 32 and 128 clients.
#![forbid(unsafe_code)]

mod api_bench;
mod baselines;
mod cost_bench;
mod notifier_bench;
mod runner_bench;
mod setup;
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
    /// The latency a runner adds over a direct call to a Cog server.
    Cog(runner_bench::CogOptions),
    /// MongoDB commands per prediction, per service.
    Cost(cost_bench::Options),
    /// Raw MongoDB and JetStream rates.
    Baselines(baselines::Options),
    /// The api's throughput and latency at several concurrency levels.
    Api(api_bench::Options),
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    common::telemetry::init("bench");
    let result = match cli.scenario {
        Scenario::Notifier(options) => notifier_bench::run(options).await.map(|report| {
            println!("{}", report.table());
            report.json()
        }),
        Scenario::Runner(options) => runner_bench::run_runner(options).await,
        Scenario::Cog(options) => runner_bench::run_cog(options).await,
        Scenario::Cost(options) => cost_bench::run(options).await,
        Scenario::Baselines(options) => baselines::run(options).await,
        Scenario::Api(options) => api_bench::run(options).await,
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
