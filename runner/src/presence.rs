//! The runner's presence: its record in the `runners` collection (its hardware pool and the
//! model versions it serves), rewritten every [`HEARTBEAT`] while it runs and removed when it
//! stops. A version is live while some runner's record names it, which is how the api picks
//! `latest_version` and lists the pools of `GET /v1/hardware`; a runner that dies drops out
//! once its record is older than [`LIVE_WITHIN`](common::store::runners::LIVE_WITHIN).

use bson::DateTime;
use common::store::runners::{HEARTBEAT, RunnerRecord, Runners};
use tokio_util::sync::CancellationToken;

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

/// Writes `record` now (so the api sees the versions before the first job), then every
/// [`HEARTBEAT`] until `shutdown`, and removes it then.
pub async fn announce(runners: Runners, record: RunnerRecord, shutdown: CancellationToken) -> anyhow::Result<()> {
    runners.heartbeat(&record).await?;
    tracing::info!(runner = %record.id, pool = %record.pool, "presence announced");
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(HEARTBEAT);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            if let Err(e) = runners.heartbeat(&record).await {
                tracing::warn!(error = %e, "presence not rewritten; the api may count this runner gone");
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
    RunnerRecord { id, pool, serves, started_at: now, seen_at: now }
}
