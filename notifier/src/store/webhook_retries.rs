//! The `webhook_retries` and `webhook_targets` collections (written by the notifier): the
//! events waiting for their next delivery attempt, kept apart per receiver.
//!
//! A failed attempt's event does not wait in JetStream: there it would hold a place in the
//! notifier consumer's window of unacknowledged messages (`max_ack_pending`, 1,000 by default),
//! and about a thousand events waiting for a receiver that is down would fill it and stop every
//! other account's webhooks. Instead the event is written here and its message acknowledged.
//!
//! - `webhook_retries`: `{_id: <webhook-id>, target, due_at, attempts, taken, message, ...}`,
//!   one per event waiting, with the event's message as published (its payload bytes).
//!   `taken` is set while a notifier attempts it: a retry found taken when it is taken again
//!   was abandoned mid-attempt (a notifier that died), and its attempts are recounted from
//!   their records.
//! - `webhook_targets`: `{_id: <host:port>, due_at, leased_until, version}`, one per receiver
//!   with events waiting: when its next one is due. A notifier claims a *receiver* (the one due
//!   first), not an event, and works through that receiver's due events with that receiver's
//!   own concurrency for a while, then puts the receiver back with its next due time. So the
//!   events of one receiver, however many, are one entry in the order the others wait in,
//!   and every claim is one indexed look-up. A claim is a lease (`leased_until`): one notifier
//!   at a time works a receiver, so no event is taken twice at once, and a notifier that dies
//!   holding one lets another have it when the lease ends. `version` grows with every event
//!   scheduled for the receiver, so putting it back after working through its events cannot
//!   hide one scheduled meanwhile.

use std::time::Duration;

use bson::{Binary, DateTime, doc, spec::BinarySubtype};
use mongodb::{Collection, Database, options::ReturnDocument};
use serde::{Deserialize, Serialize};

use common::domain::{AccountId, PredictionId, WebhookEvent};
use common::store::StoreError;

/// One event waiting for its next delivery attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitingRetry {
    /// The event's `webhook-id`.
    #[serde(rename = "_id")]
    pub webhook_id: String,
    /// Its receiver, `host:port` (what its concurrency is limited by).
    pub target: String,
    /// The prediction it is about.
    pub prediction_id: PredictionId,
    /// Its account.
    pub account_id: AccountId,
    /// The event.
    pub event: WebhookEvent,
    /// Attempts made so far.
    pub attempts: u32,
    /// When the next attempt is due.
    pub due_at: DateTime,
    /// Whether a notifier is attempting it now (see the module's notes).
    #[serde(default)]
    pub taken: bool,
    /// The event's message as published (the notifier decodes it again to deliver it).
    pub message: Binary,
}

impl WaitingRetry {
    /// The event `message` (its payload as published) for `target`, due at `due_at` after
    /// `attempts` attempts.
    pub fn new(
        webhook_id: String,
        target: String,
        (prediction_id, account_id, event): (PredictionId, AccountId, WebhookEvent),
        attempts: u32,
        due_at: DateTime,
        message: &[u8],
    ) -> Self {
        let message = Binary { subtype: BinarySubtype::Generic, bytes: message.to_vec() };
        Self { webhook_id, target, prediction_id, account_id, event, attempts, due_at, taken: false, message }
    }
}

/// A receiver claimed for a while (see the module's notes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedTarget {
    /// `host:port`.
    pub target: String,
    /// Its version when it was claimed.
    pub version: i64,
}

#[derive(Debug, Serialize, Deserialize)]
struct TargetDoc {
    #[serde(rename = "_id")]
    target: String,
    due_at: DateTime,
    leased_until: DateTime,
    #[serde(default)]
    version: i64,
}

/// Typed access to `webhook_retries` and `webhook_targets`.
#[derive(Clone, Debug)]
pub struct WebhookRetries {
    retries: Collection<WaitingRetry>,
    targets: Collection<TargetDoc>,
}

/// `now + d` as a BSON date.
fn after(d: Duration) -> DateTime {
    let millis = i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2);
    DateTime::from_millis(DateTime::now().timestamp_millis().saturating_add(millis))
}

impl WebhookRetries {
    pub(super) fn new(db: &Database) -> Self {
        Self { retries: db.collection("webhook_retries"), targets: db.collection("webhook_targets") }
    }

    /// Keeps `retry` until it is due (replacing an earlier state of the same event: writing it
    /// again is harmless), and makes its receiver due no later than it.
    pub async fn schedule(&self, retry: &WaitingRetry) -> Result<(), StoreError> {
        self.retries.replace_one(doc! { "_id": &retry.webhook_id }, retry).upsert(true).await?;
        let update = doc! {
            "$min": { "due_at": retry.due_at },
            "$inc": { "version": 1_i64 },
            "$setOnInsert": { "leased_until": DateTime::from_millis(0) },
        };
        self.targets.update_one(doc! { "_id": &retry.target }, update).upsert(true).await?;
        Ok(())
    }

    /// Claims the receiver due first, if one is due and no other notifier holds it, for
    /// `lease`.
    pub async fn claim_target(&self, lease: Duration) -> Result<Option<ClaimedTarget>, StoreError> {
        let now = DateTime::now();
        let claimed = self
            .targets
            .find_one_and_update(
                doc! { "due_at": { "$lte": now }, "leased_until": { "$lte": now } },
                doc! { "$set": { "leased_until": after(lease) } },
            )
            .sort(doc! { "due_at": 1 })
            .return_document(ReturnDocument::After)
            .await?;
        Ok(claimed.map(|t| ClaimedTarget { target: t.target, version: t.version }))
    }

    /// Takes up to `limit` of `target`'s due events, the first due first, for `lease` (they
    /// are not due again until then), each as it was before it was taken: `taken` set means an
    /// earlier taker never settled it. One read and one write however many.
    pub async fn take_due(&self, target: &str, lease: Duration, limit: usize) -> Result<Vec<WaitingRetry>, StoreError> {
        use futures::TryStreamExt;
        let now = DateTime::now();
        let due: Vec<WaitingRetry> = self
            .retries
            .find(doc! { "target": target, "due_at": { "$lte": now } })
            .sort(doc! { "due_at": 1 })
            .limit(i64::try_from(limit).unwrap_or(i64::MAX))
            .await?
            .try_collect()
            .await?;
        if due.is_empty() {
            return Ok(due);
        }
        let ids: Vec<&str> = due.iter().map(|r| r.webhook_id.as_str()).collect();
        let taken = doc! { "$set": { "due_at": after(lease), "taken": true } };
        self.retries.update_many(doc! { "_id": { "$in": ids }, "due_at": { "$lte": now } }, taken).await?;
        Ok(due)
    }

    /// Sets a taken event's next attempt `delay` from now, after `attempts` attempts.
    pub async fn put_back(&self, webhook_id: &str, delay: Duration, attempts: u32) -> Result<(), StoreError> {
        let update = doc! { "$set": { "due_at": after(delay), "attempts": i64::from(attempts), "taken": false } };
        self.retries.update_one(doc! { "_id": webhook_id }, update).await?;
        Ok(())
    }

    /// Forgets an event that needs no more attempts.
    pub async fn remove(&self, webhook_id: &str) -> Result<(), StoreError> {
        self.retries.delete_one(doc! { "_id": webhook_id }).await?;
        Ok(())
    }

    /// Puts a claimed receiver back, due when its next event is (or gone, with none left),
    /// unless an event was scheduled for it since the claim: then it is read again.
    pub async fn release_target(&self, claim: &ClaimedTarget) -> Result<(), StoreError> {
        let unleased = DateTime::from_millis(0);
        let mut version = claim.version;
        for _ in 0..3 {
            let next = self
                .retries
                .clone_with_type::<bson::Document>()
                .find_one(doc! { "target": &claim.target })
                .sort(doc! { "due_at": 1 })
                .projection(doc! { "due_at": 1, "_id": 0 })
                .await?
                .and_then(|d| d.get_datetime("due_at").ok().copied());
            let this = doc! { "_id": &claim.target, "version": version };
            let settled = match next {
                Some(due_at) => {
                    let put_back = doc! { "$set": { "due_at": due_at, "leased_until": unleased } };
                    self.targets.update_one(this, put_back).await?.matched_count
                }
                None => self.targets.delete_one(this).await?.deleted_count,
            };
            if settled == 1 {
                return Ok(());
            }
            match self.targets.find_one(doc! { "_id": &claim.target }).await? {
                Some(now) => version = now.version,
                None => return Ok(()),
            }
        }
        // Still changing under us: due at once, so the next claim reads it again.
        let again = doc! { "$set": { "due_at": DateTime::now(), "leased_until": unleased } };
        self.targets.update_one(doc! { "_id": &claim.target }, again).await?;
        Ok(())
    }

    /// How many events wait (from the collection's metadata).
    pub async fn waiting(&self) -> Result<u64, StoreError> {
        self.retries.estimated_document_count().await
    }

    /// The events waiting for `target` (tests).
    pub async fn of_target(&self, target: &str) -> Result<Vec<WaitingRetry>, StoreError> {
        use futures::TryStreamExt;
        self.retries.find(doc! { "target": target }).sort(doc! { "due_at": 1 }).await?.try_collect().await
    }
}
