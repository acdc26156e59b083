//! The `idempotency_keys` collection (written by the api): which prediction an
//! `Idempotency-Key` of an account created, for 24 hours. `_id` = `<account id>:<key>`, so
//! claiming a key is one insert that the unique `_id` makes atomic across api replicas.
//!
//! Expiry is checked here, in code; the TTL index on `expires_at` only cleans up (real MongoDB
//! honours it, the local stand-in does not).

use bson::{DateTime, doc};
use mongodb::{Collection, Database};
use serde::{Deserialize, Serialize};

use common::domain::{AccountId, PredictionId};
use common::store::{StoreError, is_duplicate_key};

/// How long a key keeps returning its first prediction.
pub const IDEMPOTENCY_WINDOW_MS: i64 = 24 * 3600 * 1000;

/// How many times a claim is tried (an insert, and a read when it fails or collides).
const CLAIM_TRIES: usize = 3;

/// Why a claim failed (inside a [`StoreError::custom`]) when every try found the key held,
/// then released, by other requests: a retry shortly may claim it.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the Idempotency-Key was claimed and released by other requests on every try")]
pub struct ClaimRaced;

/// One claimed key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdempotencyRecord {
    /// `<account id>:<key>`.
    #[serde(rename = "_id")]
    pub id: String,
    /// The prediction the first request created.
    pub prediction_id: PredictionId,
    /// When the key was claimed.
    pub created_at: DateTime,
    /// When it may be used again for a new prediction.
    pub expires_at: DateTime,
}

impl IdempotencyRecord {
    /// The claim of `key` of `account` for `prediction`, made at `now`, for the window.
    fn new(account: &AccountId, key: &str, prediction: &PredictionId, now: DateTime) -> Self {
        Self {
            id: format!("{account}:{key}"),
            prediction_id: prediction.clone(),
            created_at: now,
            expires_at: DateTime::from_millis(now.timestamp_millis() + IDEMPOTENCY_WINDOW_MS),
        }
    }
}

/// The outcome of claiming a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The key is now this request's: create the prediction.
    New,
    /// An earlier request within the window holds it, with this prediction.
    Existing(PredictionId),
}

/// Typed access to the `idempotency_keys` collection.
#[derive(Clone, Debug)]
pub struct IdempotencyKeys {
    coll: Collection<IdempotencyRecord>,
}

impl IdempotencyKeys {
    pub(super) fn new(db: &Database) -> Self {
        Self { coll: db.collection("idempotency_keys") }
    }

    /// Claims `key` of `account` for `prediction`, unless a live claim exists. `New` only once
    /// the claim is stored (its insert answered, or a read found it after an insert whose answer
    /// was lost): a create goes on only with its key claimed, so a retry of it replays it. A
    /// claim not settled by its last try, after an insert failed (not as a duplicate), is that
    /// insert's error.
    pub async fn claim(
        &self,
        account: &AccountId,
        key: &str,
        prediction: &PredictionId,
        now: DateTime,
    ) -> Result<Claim, StoreError> {
        let record = IdempotencyRecord::new(account, key, prediction, now);
        let mut failed = None;
        for _ in 0..CLAIM_TRIES {
            match self.coll.insert_one(&record).await {
                Ok(_) => return Ok(Claim::New),
                Err(e) if is_duplicate_key(&e) => {}
                // The insert may have applied with its answer lost: what is stored tells.
                Err(e) => failed = Some(e),
            }
            let stored = match self.coll.find_one(doc! { "_id": &record.id }).await {
                Ok(stored) => stored,
                Err(read) => return Err(failed.unwrap_or(read)),
            };
            let Some(existing) = stored else { continue };
            // This request's own claim: its insert applied, and the answer was lost.
            if existing.prediction_id == *prediction {
                return Ok(Claim::New);
            }
            if existing.expires_at > now {
                return Ok(Claim::Existing(existing.prediction_id));
            }
            // Expired: take it over, unless another request just did.
            let filter = doc! { "_id": &record.id, "prediction_id": existing.prediction_id.as_str() };
            if self.coll.replace_one(filter, &record).await?.modified_count == 1 {
                return Ok(Claim::New);
            }
        }
        match failed {
            Some(e) => Err(e),
            // Every try raced another request's claim or release: whatever holds the key now.
            None => match self.coll.find_one(doc! { "_id": &record.id }).await? {
                Some(current) if current.prediction_id == *prediction => Ok(Claim::New),
                Some(current) => Ok(Claim::Existing(current.prediction_id)),
                None => Err(StoreError::custom(ClaimRaced)),
            },
        }
    }

    /// Takes over `key`'s claim for `prediction` if it still names `stale`, a prediction that
    /// does not exist (the caller read so), and is older than `stale_after` (longer than the
    /// request that claimed it may go on, so it will not store its prediction any more);
    /// whether it did.
    pub async fn take_over_stale(
        &self,
        account: &AccountId,
        key: &str,
        stale: &PredictionId,
        prediction: &PredictionId,
        now: DateTime,
        stale_after: std::time::Duration,
    ) -> Result<bool, StoreError> {
        let record = IdempotencyRecord::new(account, key, prediction, now);
        let age = i64::try_from(stale_after.as_millis()).unwrap_or(i64::MAX);
        let before = DateTime::from_millis(now.timestamp_millis().saturating_sub(age));
        let filter = doc! { "_id": &record.id, "prediction_id": stale.as_str(), "created_at": { "$lt": before } };
        Ok(self.coll.replace_one(filter, &record).await?.modified_count == 1)
    }

    /// Gives up a claim whose prediction could not be stored, so a retry can create it.
    pub async fn release(&self, account: &AccountId, key: &str, prediction: &PredictionId) -> Result<(), StoreError> {
        self.coll
            .delete_one(doc! { "_id": format!("{account}:{key}"), "prediction_id": prediction.as_str() })
            .await
            .map(|_| ())
    }
}
