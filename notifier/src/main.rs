//! The notifier binary.

use std::process::ExitCode;

use clap::Parser;
use common::config::Env;

#[derive(Parser)]
#[command(name = "notifier", version, about = "Delivers signed prediction webhooks")]
struct Cli {}

/// mimalloc rather than glibc's malloc, whose bookkeeping (`malloc_consolidate`, `unlink_chunk`)
/// was a tenth of the service's CPU in its profile.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    common::runtime::block_on(serve())
}

async fn serve() -> ExitCode {
    let _ = Cli::parse();
    let _telemetry = common::telemetry::init("notifier");
    let config = match notifier::config::NotifierConfig::from_env(&Env::process()) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(2);
        }
    };
    match common::runtime::on_workers(notifier::run(config, common::shutdown::on_signals())).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}
