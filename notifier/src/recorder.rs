//! Attempt records, stored before acknowledging and several per write: every attempt is
//! stored in MongoDB before its event message is acknowledged, but attempts that finish close
//! together share one `insert_many` ([`common::store::GroupCommit`], one write at a time,
//! gathering for the configured linger).
//!
//! The caller acknowledges its message only after [`AttemptRecorder::record`] returns, so a
//! crash loses no record of an attempt whose message was acknowledged: at worst the message
//! is delivered again (at least once, as before). The linger delays acknowledgements, never
//! webhooks, and it is what makes the MongoDB writes per prediction fall as load grows (the
//! `start` and `completed` records of one fast prediction usually share a write).

use std::time::Duration;

use common::store::{Batching, GroupCommit, GroupCommitError, WebhookAttempt, WebhookAttempts};

/// The most records one write carries.
pub const MAX_BATCH: usize = 256;

/// Why a record was not stored.
#[derive(Debug, thiserror::Error)]
#[error("storing the attempt record failed: {0}")]
pub struct RecordError(#[from] pub GroupCommitError);

/// Hands attempt records to the writer task. Cheap to clone; the task stops when the last
/// clone is dropped, after writing what it was given.
#[derive(Clone)]
pub struct AttemptRecorder {
    writer: GroupCommit<WebhookAttempt>,
}

impl AttemptRecorder {
    /// Starts the writer task: records are gathered for up to `linger` after the first one
    /// of a batch arrives (zero writes each as soon as the previous write is done).
    pub fn start(attempts: WebhookAttempts, linger: Duration) -> Self {
        let batching = Batching { linger, max_batch: MAX_BATCH, max_in_flight: 1 };
        Self { writer: attempts.group_commit(batching) }
    }

    /// Stores `record`, returning once it is written (or the write failed).
    pub async fn record(&self, record: WebhookAttempt) -> Result<(), RecordError> {
        Ok(self.writer.insert(record).await?)
    }
}
