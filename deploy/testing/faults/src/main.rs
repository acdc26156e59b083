//! `faults`: the fault-injection suite of the prediction service. Every scenario runs the api,
//! runner and notifier as processes on a nats-server and a MongoDB stand-in (H2 file backend)
//! that the suite starts, kills and restarts itself, under steady load with webhooks to a
//! recording receiver, and checks that nothing is lost, stuck or (where not allowed)
//! duplicated. `deploy/local/fault-tests` builds and runs it; `deploy/local/test` (and so CI)
//! calls that.
//!
//! - [`scenarios`]: the faults and the run of each;
//! - [`topology`]: the services of one scenario as processes, any number of replicas each;
//! - [`load`]: the steady load, every answer kept with its time;
//! - [`recorder`]: the webhook receiver that records deliveries and can misbehave;
//! - [`uploads`]: files uploaded slowly under the fault, then read back whole;
//! - [`capped`]: what a capped account runs at once, sampled through the fault;
//! - [`rollout`]: a rolling update of a model version, and what ran where;
//! - [`trainings`]: real Cog trainings through a killed runner, and how each ended;
//! - [`outputs`]: a real Cog model's file outputs streamed to a runner killed mid-upload;
//! - [`cog_crashes`]: a Cog project the runner starts, its model servers killed at random;
//! - [`poison`]: a job whose runner is killed on every delivery;
//! - [`leaders`]: a cluster's stream and consumer leaders moved, then its jobs leader killed;
//! - [`upgrade`]: every service rolled from the previous release's build to this one;
//! - [`report`]: what a scenario must show to pass, and the table.
//!
//! The servers, processes and settings come from the `harness` crate, which the bench shares.
//!
//! Also here:
//! - [`budget`]: a monthly budget crossed while the usage ledger's runner dies.
//! - [`dead_receiver`]: one account's receiver is dead while another's is healthy.
//! - [`flood`]: overload for a fault run, for the length of the fault, of one of two kinds.
//! - [`levels`]: priority levels under a fault.
//! - [`lost_replies`]: mongoDB's answers lost under load, as in a failover.
//! - [`rows`]: the fault suite's rows.
#![forbid(unsafe_code)]

mod budget;
mod capped;
mod cog_crashes;
mod dead_receiver;
mod flood;
mod leaders;
mod levels;
mod load;
mod lost_replies;
mod outputs;
mod poison;
mod recorder;
mod report;
mod rollout;
mod rows;
mod scenarios;
mod topology;
mod trainings;
mod upgrade;
mod uploads;

use std::process::ExitCode;

use clap::Parser;

#[derive(Parser)]
#[command(name = "faults", about = "The fault-injection suite of the prediction service")]
struct Cli {
    #[command(flatten)]
    options: scenarios::Options,
    /// Where to write the results as JSON (the table goes beside it, with `.md`).
    #[arg(long, default_value = "faults.json")]
    out: String,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match harness::load_tool_runtime() {
        Ok(runtime) => runtime.block_on(run(cli)),
        Err(e) => {
            eprintln!("faults failed: no tokio runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> ExitCode {
    let _telemetry = common::telemetry::init("faults");
    let mut table = String::new();
    let result = scenarios::run(cli.options, &mut table).await.and_then(|json| {
        println!("{table}");
        let md = std::path::Path::new(&cli.out).with_extension("md");
        std::fs::write(&md, &table)?;
        std::fs::write(&cli.out, serde_json::to_vec_pretty(&json)?)?;
        println!("results written to {}", cli.out);
        Ok(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("faults failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}
