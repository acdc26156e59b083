//! The runner's presence: its record in the `runners` collection (its hardware pool, the
//! model versions it serves, what it runs of each: [`crate::run_figures`], and how the model
//! servers it starts itself stand: [`Instance::report`]), rewritten every
//! [`HEARTBEAT`] while it runs, and within [`REPORT_EVERY`] of a change of what it runs, and
//! removed when it stops. A version is live while some runner's record names it, which is how the api picks
//! `latest_version` and lists the pools of `GET /v1/hardware`; a runner that dies drops out
//! once its record is older than [`LIVE_WITHIN`](common::store::runners::LIVE_WITHIN).

use std::{sync::Arc, time::Duration};

use bson::DateTime;
use common::store::runners::{HEARTBEAT, RunnerRecord, Runners};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::{models::cog::instance::Instance, run_figures::RunFigures};

/// How soon a change of what the runner runs is written (one write a second at most, however
/// many predictions start and end).
pub const REPORT_EVERY: Duration = Duration::from_secs(1);

/// A name for this process: host, process id and a random part (a restarted process with the
/// same pid is another runner).
pub fn runner_id() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "runner".into());
    format!(
        "{host}:{}:{}",
        std::process::id(),
        common::domain::AccountId::generate().as_str().trim_start_matches("acct_")
    )
}

/// Writes `record` now (so the api sees the versions before the first job), then with the
/// current `figures` and the reports of its `instances` every [`HEARTBEAT`] and within
/// [`REPORT_EVERY`] of their change, until `shutdown`, and removes it then.
pub async fn announce(
    runners: Runners,
    mut record: RunnerRecord,
    figures: Arc<RunFigures>,
    instances: Vec<Arc<Instance>>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    record.instances = instances.iter().map(|i| i.report()).collect();
    runners.heartbeat(&record).await?;
    tracing::info!(runner = %record.id, pool = %record.pool, "presence announced");
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(REPORT_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut written = Instant::now();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            let (runs, changed) = figures.take();
            let reports: Vec<_> = instances.iter().map(|i| i.report()).collect();
            if !changed && reports == record.instances && written.elapsed() < HEARTBEAT {
                continue;
            }
            record.runs = runs;
            record.instances = reports;
            match runners.heartbeat(&record).await {
                Ok(()) => written = Instant::now(),
                Err(e) => tracing::warn!(error = %e, "presence not rewritten; the api may count this runner gone"),
            }
        }
        if let Err(e) = runners.remove(&record.id).await {
            tracing::warn!(error = %e, "presence not removed; it ages out");
        }
    });
    Ok(())
}

/// The record of a runner that starts now.
pub fn record(id: String, pool: common::domain::Pool, serves: Vec<common::store::runners::Served>) -> RunnerRecord {
    let now = DateTime::now();
    RunnerRecord { id, pool, serves, started_at: now, seen_at: now, runs: Vec::new(), instances: Vec::new() }
}
