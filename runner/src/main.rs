//! The runner binary: `runner [--models demo/*,acme/x] [--concurrency N]`.

use std::process::ExitCode;

use clap::Parser;
use common::config::Env;

#[derive(Parser)]
#[command(name = "runner", version, about = "Runs prediction jobs")]
struct Cli {
    /// Which models to serve: comma-separated `owner/name`, `owner/*` or `*`
    /// (default: RUNNER_MODELS, else every built-in model).
    #[arg(long)]
    models: Option<String>,
    /// How many predictions run at once (default: RUNNER_CONCURRENCY, else 4).
    #[arg(long)]
    concurrency: Option<usize>,
    /// A model served by a Cog server: `owner/name=[capability@]http://host:port` (repeatable;
    /// adds to RUNNER_COG).
    #[arg(long)]
    cog: Vec<String>,
}

/// mimalloc rather than glibc's malloc, whose bookkeeping (`malloc_consolidate`, `unlink_chunk`)
/// was a tenth of the service's CPU in its profile.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    common::runtime::block_on(serve())
}

async fn serve() -> ExitCode {
    let cli = Cli::parse();
    let _telemetry = common::telemetry::init("runner");
    let mut config = match runner::config::RunnerConfig::from_env(&Env::process()) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(2);
        }
    };
    if let Some(models) = cli.models {
        match runner::config::parse_selectors(&models) {
            Ok(s) => config.models = s,
            Err(e) => {
                tracing::error!("--models: {e}");
                return ExitCode::from(2);
            }
        }
    }
    for target in &cli.cog {
        match runner::models::cog::parse_targets(target) {
            Ok(t) => config.cog.extend(t),
            Err(e) => {
                tracing::error!("--cog: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if let Some(n) = cli.concurrency.filter(|n| *n > 0) {
        config.concurrency = n;
    }
    match common::runtime::on_workers(runner::run(config, common::shutdown::on_signals())).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}
