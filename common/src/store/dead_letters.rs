//! The `dead_letters` collection (written by the runner and the notifier): messages that could
//! not be decoded, kept for an operator to look at. Their JetStream messages are terminated,
//! so they are never redelivered.

use bson::{DateTime, doc};
use mongodb::{Collection, Database};
use serde::{Deserialize, Serialize};

use super::StoreError;

/// The most payload bytes kept.
const MAX_PAYLOAD: usize = 64 * 1024;

/// One message that could not be handled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// The service that gave up on it.
    pub service: String,
    /// The subject it arrived on.
    pub subject: String,
    /// Its payload as text (lossy UTF-8, at most 64 KiB).
    pub payload: String,
    /// Why it could not be handled.
    pub error: String,
    /// When.
    pub at: DateTime,
}

/// Typed access to the `dead_letters` collection.
#[derive(Clone, Debug)]
pub struct DeadLetters {
    coll: Collection<DeadLetter>,
}

impl DeadLetters {
    pub(super) fn new(db: &Database) -> Self {
        Self { coll: db.collection("dead_letters") }
    }

    /// Records a message `service` could not handle.
    pub async fn record(&self, service: &str, subject: &str, payload: &[u8], error: &str) -> Result<(), StoreError> {
        let payload = String::from_utf8_lossy(&payload[..payload.len().min(MAX_PAYLOAD)]).into_owned();
        let letter = DeadLetter {
            service: service.into(),
            subject: subject.into(),
            payload,
            error: error.into(),
            at: DateTime::now(),
        };
        self.coll.insert_one(letter).await.map(|_| ())
    }

    /// Every dead letter of `service` (tests and operators).
    pub async fn of_service(&self, service: &str) -> Result<Vec<DeadLetter>, StoreError> {
        use futures::TryStreamExt;
        self.coll.find(doc! { "service": service }).await?.try_collect().await
    }
}
