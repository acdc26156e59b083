//! Retention: `RETENTION_SECONDS` (1 hour by default) after a prediction ended, its input,
//! output, logs and files are deleted and `data_removed` becomes `true`. Every runner sweeps,
//! in batches of [`BATCH`]; the update is conditional on `data_removed` still being false, so
//! sweepers never trip over each other. Files go first: a crash between the two steps leaves
//! a prediction that the next pass finishes, never a file that nothing points to.
//!
//! The usage of predictions whose writer died before counting it is counted here too
//! ([`UsageLedger::recover`]).
//!
//! Uploads cut off mid-write (a killed process) are swept here too, once they are older than
//! the upload timeout: [`Files::sweep_unfinished`] removes their partial bytes from the store.
//!
//! Uploads of the Files API expire at their `expires_at` (`FILES_RETENTION_HOURS` after the
//! upload) and the same passes delete them, record first, then bytes. A file that a prediction
//! which has not ended names in its input is kept: its expiry moves [`IN_USE_GRACE`] on, and a
//! later pass looks again.

use std::time::Duration;

use bson::DateTime;
use common::{files::Files, store::Store, usage::UsageLedger};
use tokio_util::sync::CancellationToken;

/// The most predictions (and expired files) one pass clears.
pub const BATCH: i64 = 100;
/// How far an expired file still in use as an input is postponed.
pub const IN_USE_GRACE: Duration = Duration::from_secs(600);

/// The retention sweeper of one runner.
pub struct Sweeper {
    store: Store,
    files: Files,
    usage: Option<UsageLedger>,
    retention: Duration,
    interval: Duration,
}

impl Sweeper {
    /// A sweeper clearing data `retention` after completion, every `interval`.
    pub fn new(store: Store, files: Files, retention: Duration, interval: Duration) -> Self {
        Self { store, files, usage: None, retention, interval }
    }

    /// Also counts the usage of predictions whose writer died before counting it.
    pub fn with_usage(mut self, usage: UsageLedger) -> Self {
        self.usage = Some(usage);
        self
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
            self.files.delete_outputs_of(&p.id).await?;
            self.store.predictions().remove_data(&p.id).await?;
        }
        let swept = self.files.sweep_unfinished(BATCH).await?;
        let recovered = match &self.usage {
            Some(usage) => usage.recover(BATCH).await?,
            None => 0,
        };
        Ok(expired.len().max(self.expire_files(&self.files).await?).max(swept).max(recovered))
    }

    /// Deletes a batch of expired uploads (postponing those still in use); how many it looked at.
    pub async fn expire_files(&self, files: &Files) -> anyhow::Result<usize> {
        let now = DateTime::now();
        let expired = files.records().expired(now, BATCH).await?;
        let grace = i64::try_from(IN_USE_GRACE.as_millis()).unwrap_or(i64::MAX);
        for file in &expired {
            if self.store.predictions().file_in_use(&file.id).await? {
                let until = DateTime::from_millis(now.timestamp_millis().saturating_add(grace));
                files.records().postpone(&file.id, until).await?;
            } else {
                files.delete(&file.id).await?;
            }
        }
        if !expired.is_empty() {
            tracing::info!(files = expired.len(), "retention looked at expired files");
        }
        Ok(expired.len())
    }
}
