//! The `webhook_attempts` collection (written by the notifier): one document per delivery
//! attempt, with what the receiver answered and how long it took.

use bson::{DateTime, doc};
use futures::TryStreamExt;
use mongodb::{Collection, Database};
use serde::{Deserialize, Serialize};

use super::{
    StoreError,
    group_commit::{Batching, GroupCommit},
};
use crate::domain::{AccountId, PredictionId, WebhookEvent};

/// What became of an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// The receiver answered 2xx in time.
    Delivered,
    /// It did not; another attempt is scheduled.
    WillRetry,
    /// It did not, and this was the last attempt.
    Failed,
    /// The target was refused before sending (e.g. a private address).
    Refused,
}

/// One delivery attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebhookAttempt {
    /// The prediction the event is about.
    pub prediction_id: PredictionId,
    /// Its account.
    pub account_id: AccountId,
    /// The `webhook-id` (the same on every attempt of one event).
    pub webhook_id: String,
    /// The event delivered.
    pub event: WebhookEvent,
    /// The prediction's change sequence this event carries.
    pub seq: i64,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// Where it was sent.
    pub url: String,
    /// The receiver's HTTP status, if it answered.
    pub status_code: Option<u16>,
    /// Milliseconds from sending to the answer (or the failure).
    pub latency_ms: u64,
    /// What went wrong, if anything.
    pub error: Option<String>,
    /// What became of it.
    pub outcome: AttemptOutcome,
    /// When the attempt was made.
    pub at: DateTime,
}

/// Typed access to the `webhook_attempts` collection.
#[derive(Clone, Debug)]
pub struct WebhookAttempts {
    coll: Collection<WebhookAttempt>,
}

impl WebhookAttempts {
    pub(super) fn new(db: &Database) -> Self {
        Self { coll: db.collection("webhook_attempts") }
    }

    /// Records an attempt.
    pub async fn record(&self, attempt: &WebhookAttempt) -> Result<(), StoreError> {
        self.coll.insert_one(attempt).await.map(|_| ())
    }

    /// A writer that records attempts several per `insert_many` (see [`GroupCommit`]); each
    /// caller still waits for its own record to be stored.
    pub fn group_commit(&self, batching: Batching) -> GroupCommit<WebhookAttempt> {
        GroupCommit::start(self.coll.clone(), batching)
    }

    /// How many attempts of the delivery `webhook_id` are recorded.
    pub async fn count_for_webhook(&self, webhook_id: &str) -> Result<u64, StoreError> {
        self.coll.count_documents(doc! { "webhook_id": webhook_id }).await
    }

    /// Whether any attempt of the event `webhook_id` was recorded: one indexed look-up that
    /// stops at the first record (a count runs an aggregation, measured at 16 % of the
    /// notifier's CPU when done for every `completed` event).
    pub async fn any_for_webhook(&self, webhook_id: &str) -> Result<bool, StoreError> {
        let first = self
            .coll
            .clone_with_type::<bson::Document>()
            .find_one(doc! { "webhook_id": webhook_id })
            .projection(doc! { "_id": 1 })
            .await?;
        Ok(first.is_some())
    }

    /// Every attempt for a prediction, oldest first.
    pub async fn for_prediction(&self, id: &PredictionId) -> Result<Vec<WebhookAttempt>, StoreError> {
        self.coll
            .find(doc! { "prediction_id": id.as_str() })
            .sort(doc! { "at": 1, "_id": 1 })
            .await?
            .try_collect()
            .await
    }
}
