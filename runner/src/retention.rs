//! Retention: `RETENTION_SECONDS` (1 hour by default) after a prediction ended, its input,
//! output, logs and files are deleted and `data_removed` becomes `true`. Every runner sweeps,
//! in batches of [`BATCH`]; the update is conditional on `data_removed` still being false, so
//! sweepers never trip over each other. Files go first: a crash between the two steps leaves
//! a prediction that the next pass finishes, never a file that nothing points to.

use std::time::Duration;

use bson::DateTime;
use common::store::Store;
use tokio_util::sync::CancellationToken;

/// The most predictions one pass clears.
pub const BATCH: i64 = 100;

/// The retention sweeper of one runner.
pub struct Sweeper {
    store: Store,
    retention: Duration,
    interval: Duration,
}

impl Sweeper {
    /// A sweeper clearing data `retention` after completion, every `interval`.
    pub fn new(store: Store, retention: Duration, interval: Duration) -> Self {
        Self { store, retention, interval }
    }

    /// Sweeps until `shutdown` fires.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(self.interval) => {}
            }
            loop {
                match self.pass().await {
                    Ok(n) if n as i64 == BATCH => continue,
                    Ok(0) => break,
                    Ok(n) => {
                        tracing::info!(predictions = n, "retention removed the data of ended predictions");
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(error = format!("{e:#}"), "retention sweep failed; trying again next time");
                        break;
                    }
                }
            }
        }
    }

    /// Clears one batch; returns how many predictions it looked at.
    pub async fn pass(&self) -> anyhow::Result<usize> {
        let retention_ms = i64::try_from(self.retention.as_millis()).unwrap_or(i64::MAX);
        let before = DateTime::from_millis(DateTime::now().timestamp_millis().saturating_sub(retention_ms));
        let expired = self.store.predictions().data_expired(before, BATCH).await?;
        for p in &expired {
            self.store.files().delete_for_prediction(&p.id).await?;
            self.store.predictions().remove_data(&p.id).await?;
        }
        Ok(expired.len())
    }
}
