//! Group commit of attempt records: every attempt is stored in MongoDB before its event
//! message is acknowledged, but attempts that finish close together share one `insert_many`.
//!
//! A delivery hands its record to [`AttemptRecorder::record`] and waits for the answer. One
//! background task takes the first waiting record, gathers whatever else arrives within the
//! linger time (at most [`MAX_BATCH`] records), writes them with one unordered `insert_many`
//! and tells each waiter how it went. The caller acknowledges its message only after that, so
//! a crash loses no record of an attempt whose message was acknowledged: at worst the message
//! is delivered again (at least once, as before). The linger delays acknowledgements, never
//! webhooks, and it is what makes the MongoDB writes per prediction fall as load grows (the
//! `start` and `completed` records of one fast prediction usually share a write).

use std::time::Duration;

use common::store::{StoreError, WebhookAttempt, WebhookAttempts};
use tokio::sync::{mpsc, oneshot};

/// The most records one write carries.
pub const MAX_BATCH: usize = 256;
/// How many records may wait for the writer before `record` itself waits (back-pressure).
const QUEUE: usize = 4 * MAX_BATCH;

/// Why a record was not stored.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The database refused or failed the write.
    #[error("storing the attempt record failed: {0}")]
    Store(#[from] std::sync::Arc<StoreError>),
    /// The writer task has stopped (the process is shutting down).
    #[error("the attempt recorder has stopped")]
    Stopped,
}

/// A record waiting to be written, with whom to tell.
struct Waiting {
    record: WebhookAttempt,
    done: oneshot::Sender<Result<(), std::sync::Arc<StoreError>>>,
}

/// Hands attempt records to the writer task. Cheap to clone; the task stops when the last
/// clone is dropped, after writing what it was given.
#[derive(Clone)]
pub struct AttemptRecorder {
    queue: mpsc::Sender<Waiting>,
}

impl AttemptRecorder {
    /// Starts the writer task: records are gathered for up to `linger` after the first one
    /// of a batch arrives (zero writes each as soon as the previous write is done).
    pub fn start(attempts: WebhookAttempts, linger: Duration) -> Self {
        let (queue, receiver) = mpsc::channel(QUEUE);
        tokio::spawn(write_batches(attempts, linger, receiver));
        Self { queue }
    }

    /// Stores `record`, returning once it is written (or the write failed).
    pub async fn record(&self, record: WebhookAttempt) -> Result<(), RecordError> {
        let (done, answer) = oneshot::channel();
        self.queue.send(Waiting { record, done }).await.map_err(|_| RecordError::Stopped)?;
        answer.await.map_err(|_| RecordError::Stopped)?.map_err(RecordError::Store)
    }
}

/// The writer task: one batch at a time until every sender is gone and the queue is empty.
async fn write_batches(attempts: WebhookAttempts, linger: Duration, mut queue: mpsc::Receiver<Waiting>) {
    let mut batch: Vec<Waiting> = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = queue.recv().await {
        batch.push(first);
        let until = tokio::time::Instant::now() + linger;
        while batch.len() < MAX_BATCH {
            // Whatever is already queued joins without waiting; then wait out the linger.
            match queue.try_recv() {
                Ok(next) => batch.push(next),
                Err(mpsc::error::TryRecvError::Disconnected) => break,
                Err(mpsc::error::TryRecvError::Empty) => match tokio::time::timeout_at(until, queue.recv()).await {
                    Ok(Some(next)) => batch.push(next),
                    Ok(None) | Err(_) => break,
                },
            }
        }
        let records: Vec<WebhookAttempt> = batch.iter().map(|w| w.record.clone()).collect();
        let outcome = attempts.record_many(&records).await.map_err(std::sync::Arc::new);
        if let Err(e) = &outcome {
            tracing::warn!(error = %e, records = batch.len(), "attempt records not stored");
        }
        for waiting in batch.drain(..) {
            let _ = waiting.done.send(outcome.clone());
        }
    }
}
