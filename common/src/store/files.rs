//! The `file_records` collection: one document per file, what the Files API shows (name,
//! type, size, checksums, metadata, expiry) and who owns it. The bytes live in a
//! [`crate::files::FileStore`]; a record is written only once its bytes are stored, so a file
//! is visible exactly when it is whole. Written by the api (uploads, deletes) and the runner
//! (file outputs, retention).

use bson::{DateTime, doc};
use futures::TryStreamExt;
use mongodb::{Collection, Database, options::FindOptions};
use serde::{Deserialize, Serialize};

use super::StoreError;
use crate::domain::{AccountId, FileId, PredictionId};

/// A file as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileRecord {
    /// The file id (also its bytes' id in the file store).
    #[serde(rename = "_id")]
    pub id: FileId,
    /// The owning account.
    pub account_id: AccountId,
    /// Its file name.
    pub name: String,
    /// Its media type.
    pub content_type: String,
    /// Its size in bytes.
    pub size: i64,
    /// SHA-256 of its bytes, lowercase hex.
    pub sha256: String,
    /// MD5 of its bytes, lowercase hex (the `etag`).
    pub md5: String,
    /// The uploader's metadata: a JSON object, kept as its compact JSON text (any names may
    /// stand in it, which a stored document's field names could not all hold).
    #[serde(default)]
    pub metadata: String,
    /// When it was stored.
    pub created_at: DateTime,
    /// When the retention sweep deletes it; none for a prediction's output, which goes with
    /// the prediction's data.
    #[serde(default)]
    pub expires_at: Option<DateTime>,
    /// The prediction that produced it, for an output.
    #[serde(default)]
    pub prediction_id: Option<PredictionId>,
    /// The store that holds its bytes (GridFS for files recorded before stores were named).
    #[serde(default)]
    pub store: crate::domain::FileStoreKind,
    /// A value of prediction `prediction_id` kept out of its document (see
    /// [`crate::files::payloads`]): never listed, and not one of its output files.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub payload: bool,
}

/// The files of `account` that are listed: all but its predictions' payloads.
fn listed(account: &AccountId) -> bson::Document {
    doc! { "account_id": account.as_str(), "payload": { "$ne": true } }
}

/// Typed access to `file_records`.
#[derive(Clone, Debug)]
pub struct FileRecords {
    coll: Collection<FileRecord>,
}

impl FileRecords {
    pub(super) fn new(db: &Database) -> Self {
        Self { coll: db.collection("file_records") }
    }

    /// The collection (indexes).
    pub fn collection(&self) -> &Collection<FileRecord> {
        &self.coll
    }

    /// Stores `record`.
    pub async fn insert(&self, record: &FileRecord) -> Result<(), StoreError> {
        self.coll.insert_one(record).await.map(|_| ())
    }

    /// File `id`, if it exists.
    pub async fn get(&self, id: &FileId) -> Result<Option<FileRecord>, StoreError> {
        self.coll.find_one(doc! { "_id": id.as_str() }).await
    }

    /// A file's record as the primary has it now ([`super::settling_read`]): to settle a
    /// write whose outcome is unknown.
    pub async fn get_settled(&self, id: &FileId) -> Result<Option<FileRecord>, StoreError> {
        self.coll.find_one(doc! { "_id": id.as_str() }).with_options(super::settling_read()).await
    }

    /// A page of `account`'s files, newest first.
    pub async fn list(&self, account: &AccountId, offset: u64, limit: u32) -> Result<Vec<FileRecord>, StoreError> {
        let options = FindOptions::builder()
            .sort(doc! { "created_at": -1, "_id": -1 })
            .skip(offset)
            .limit(i64::from(limit))
            .build();
        self.coll.find(listed(account)).with_options(options).await?.try_collect().await
    }

    /// How many files `account` has.
    pub async fn count(&self, account: &AccountId) -> Result<u64, StoreError> {
        self.coll.count_documents(listed(account)).await
    }

    /// Removes file `id`'s record; the record it removed, if any.
    pub async fn remove(&self, id: &FileId) -> Result<Option<FileRecord>, StoreError> {
        self.coll.find_one_and_delete(doc! { "_id": id.as_str() }).await
    }

    /// Keeps file `id` for good: its expiry is removed (weights once their version is recorded).
    pub async fn keep(&self, id: &FileId) -> Result<(), StoreError> {
        self.coll.update_one(doc! { "_id": id.as_str() }, doc! { "$unset": { "expires_at": "" } }).await.map(|_| ())
    }

    /// Up to `limit` files whose expiry passed before `now`.
    pub async fn expired(&self, now: DateTime, limit: i64) -> Result<Vec<FileRecord>, StoreError> {
        let filter = doc! { "expires_at": { "$lt": now } };
        self.coll.find(filter).sort(doc! { "expires_at": 1 }).limit(limit).await?.try_collect().await
    }

    /// Moves file `id`'s expiry to `until` (a file still in use waits for its prediction).
    pub async fn postpone(&self, id: &FileId, until: DateTime) -> Result<(), StoreError> {
        self.coll.update_one(doc! { "_id": id.as_str() }, doc! { "$set": { "expires_at": until } }).await.map(|_| ())
    }

    /// The files prediction `prediction` produced.
    pub async fn of_prediction(&self, prediction: &PredictionId) -> Result<Vec<FileRecord>, StoreError> {
        self.coll.find(doc! { "prediction_id": prediction.as_str() }).await?.try_collect().await
    }
}
