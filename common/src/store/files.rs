//! Files: the file outputs of predictions, in the GridFS bucket `files` (collections
//! `files.files` and `files.chunks`). Written by the runner, served by the api
//! (`GET /v1/files/{id}`, to the owning account only), deleted by the retention sweeper.
//! The GridFS `_id` is the [`FileId`]; the metadata names the account, the prediction and the
//! content type.

use bson::{Bson, doc};
use futures::{AsyncReadExt, AsyncWriteExt, TryStreamExt};
use mongodb::{Database, gridfs::GridFsBucket, options::GridFsBucketOptions};

use super::StoreError;
use crate::domain::{AccountId, FileId, PredictionId};

/// What is known about a stored file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFile {
    /// The file id.
    pub id: FileId,
    /// The owning account.
    pub account_id: AccountId,
    /// The prediction that produced it.
    pub prediction_id: PredictionId,
    /// Its media type.
    pub content_type: String,
    /// Its size in bytes.
    pub length: u64,
    /// Its file name.
    pub filename: String,
}

/// Typed access to the `files` bucket.
#[derive(Clone, Debug)]
pub struct Files {
    bucket: GridFsBucket,
}

impl Files {
    pub(super) fn new(db: &Database) -> Self {
        Self { bucket: db.gridfs_bucket(GridFsBucketOptions::builder().bucket_name("files".to_owned()).build()) }
    }

    /// Stores `bytes` as file `id` of `prediction`.
    pub async fn put(
        &self,
        id: &FileId,
        account: &AccountId,
        prediction: &PredictionId,
        filename: &str,
        content_type: &str,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        let metadata = doc! {
            "account_id": account.as_str(),
            "prediction_id": prediction.as_str(),
            "content_type": content_type,
        };
        let mut upload =
            self.bucket.open_upload_stream(filename).id(Bson::String(id.to_string())).metadata(metadata).await?;
        upload.write_all(bytes).await.map_err(StoreError::from)?;
        upload.close().await.map_err(StoreError::from)?;
        Ok(())
    }

    /// What is known about file `id`, if it exists.
    pub async fn info(&self, id: &FileId) -> Result<Option<StoredFile>, StoreError> {
        let Some(doc) = self.bucket.find_one(doc! { "_id": id.as_str() }).await? else { return Ok(None) };
        let meta = doc.metadata.unwrap_or_default();
        let text = |key: &str| meta.get_str(key).unwrap_or_default().to_owned();
        let (Ok(account_id), Ok(prediction_id)) =
            (AccountId::parse(&text("account_id")), PredictionId::parse(&text("prediction_id")))
        else {
            return Ok(None);
        };
        Ok(Some(StoredFile {
            id: id.clone(),
            account_id,
            prediction_id,
            content_type: text("content_type"),
            length: doc.length,
            filename: doc.filename.unwrap_or_default(),
        }))
    }

    /// The contents of file `id`.
    pub async fn read(&self, id: &FileId) -> Result<Vec<u8>, StoreError> {
        let mut download = self.bucket.open_download_stream(Bson::String(id.to_string())).await?;
        let mut bytes = Vec::new();
        download.read_to_end(&mut bytes).await.map_err(StoreError::from)?;
        Ok(bytes)
    }

    /// Deletes every file of `prediction`; returns how many.
    pub async fn delete_for_prediction(&self, prediction: &PredictionId) -> Result<usize, StoreError> {
        let files: Vec<_> =
            self.bucket.find(doc! { "metadata.prediction_id": prediction.as_str() }).await?.try_collect().await?;
        for file in &files {
            self.bucket.delete(file.id.clone()).await?;
        }
        Ok(files.len())
    }
}
