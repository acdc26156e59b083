//! The `unfinished_uploads` collection: one document per file whose bytes are being written
//! and whose record is not stored yet. [`crate::files::Files`] inserts it before the first byte
//! goes to a file store and removes it once the record is stored (or the bytes are discarded).
//!
//! A process killed in between leaves the document behind, and with it what the sweep needs
//! to remove the partial bytes: the store they went to and, for S3, the multipart upload id
//! (an incomplete multipart upload is invisible to a listing of objects but is kept, and
//! billed, until it is aborted). Documents are found by age: the sweep takes those older than
//! the longest an upload may take, so it never touches one still under way.

use bson::{DateTime, doc};
use futures::TryStreamExt;
use mongodb::{Collection, Database};
use serde::{Deserialize, Serialize};

use super::StoreError;
use crate::domain::{FileId, FileStoreKind};

/// A file being written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnfinishedUpload {
    /// The file id.
    #[serde(rename = "_id")]
    pub id: FileId,
    /// The store its bytes go to.
    pub store: FileStoreKind,
    /// The S3 multipart upload under way, once one is started.
    #[serde(default)]
    pub multipart_upload_id: Option<String>,
    /// When the upload began, or when a sweep last failed to discard its bytes.
    pub started_at: DateTime,
}

/// Typed access to `unfinished_uploads`.
#[derive(Clone, Debug)]
pub struct UnfinishedUploads {
    coll: Collection<UnfinishedUpload>,
}

impl UnfinishedUploads {
    pub(super) fn new(db: &Database) -> Self {
        Self { coll: db.collection("unfinished_uploads") }
    }

    /// Notes that the bytes of file `id` start going to `store`.
    pub async fn begin(&self, id: &FileId, store: FileStoreKind) -> Result<(), StoreError> {
        let upload = UnfinishedUpload { id: id.clone(), store, multipart_upload_id: None, started_at: DateTime::now() };
        self.coll.insert_one(upload).await.map(|_| ())
    }

    /// Notes the S3 multipart upload that holds file `id`'s bytes so far.
    pub async fn multipart_started(&self, id: &FileId, upload_id: &str) -> Result<(), StoreError> {
        let update = doc! { "$set": { "multipart_upload_id": upload_id } };
        self.coll.update_one(doc! { "_id": id.as_str() }, update).await.map(|_| ())
    }

    /// File `id` is finished: its record is stored, or its bytes are gone.
    pub async fn end(&self, id: &FileId) -> Result<(), StoreError> {
        self.coll.delete_one(doc! { "_id": id.as_str() }).await.map(|_| ())
    }

    /// The sweep could not discard file `id`'s bytes (the store refused): it is taken again
    /// once an upload begun now would be, after the ones already waiting.
    pub async fn sweep_later(&self, id: &FileId) -> Result<(), StoreError> {
        let update = doc! { "$set": { "started_at": DateTime::now() }, "$inc": { "sweeps_failed": 1 } };
        self.coll.update_one(doc! { "_id": id.as_str() }, update).await.map(|_| ())
    }

    /// Up to `limit` uploads begun before `before`, oldest first.
    pub async fn begun_before(&self, before: DateTime, limit: i64) -> Result<Vec<UnfinishedUpload>, StoreError> {
        let filter = doc! { "started_at": { "$lt": before } };
        self.coll.find(filter).sort(doc! { "started_at": 1 }).limit(limit).await?.try_collect().await
    }
}
