//! Files: uploads of the Files API and the file outputs of predictions, one kind of object.
//!
//! [`Files`] is what the services use: it writes a file's bytes to a [`FileStore`] and then
//! its record to `file_records` ([`crate::store::files`]), so a file is listed, read or used as
//! an input only once it is whole; it reads a byte range back as a stream; it deletes the record
//! first (the file is gone for every reader at once), then the bytes.
//!
//! File outputs stored before files had records keep their owner in GridFS's own metadata;
//! [`Files::get`] still finds them there, so links handed out before keep working.

pub mod gridfs;
pub mod store;

use std::{ops::Range, sync::Arc};

use bson::{DateTime, Document};

pub use self::{
    gridfs::GridFsStore,
    store::{ByteStream, FileStore, FileStoreError, Written},
};
use crate::{
    domain::{AccountId, FileId, PredictionId},
    store::{FileRecords, Store, StoreError, files::FileRecord},
};

/// What a new file is, besides its bytes.
#[derive(Debug, Clone)]
pub struct NewFile {
    /// The owning account.
    pub account_id: AccountId,
    /// Its file name.
    pub name: String,
    /// Its media type.
    pub content_type: String,
    /// The uploader's metadata (compact JSON of an object; empty for none).
    pub metadata: String,
    /// When it expires, if ever.
    pub expires_at: Option<DateTime>,
    /// The prediction that produced it, for an output.
    pub prediction_id: Option<PredictionId>,
}

/// Why a file operation failed.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// The bytes could not be stored or read.
    #[error(transparent)]
    Bytes(#[from] FileStoreError),
    /// The record could not be stored or read.
    #[error("file records: {0}")]
    Records(#[from] StoreError),
}

/// Files of every account: records and bytes.
#[derive(Clone, Debug)]
pub struct Files {
    bytes: Arc<dyn FileStore>,
    records: FileRecords,
    gridfs: GridFsStore,
}

impl Files {
    /// Files on `store`'s database, their bytes in its GridFS bucket.
    pub fn new(store: &Store) -> Self {
        let gridfs = GridFsStore::new(store.database());
        Self { bytes: Arc::new(gridfs.clone()), records: store.file_records(), gridfs }
    }

    /// Stores `body` as a new file (at most `max_bytes`), then its record; the record.
    pub async fn create(&self, new: NewFile, body: ByteStream<'_>, max_bytes: u64) -> Result<FileRecord, FilesError> {
        let (id, written) = self.put_bytes(&new.name, body, max_bytes).await?;
        self.add_record(id, written, new).await
    }

    /// Stores the bytes of a new file (at most `max_bytes`) that is not visible yet: nothing
    /// lists, reads or uses it until [`Self::add_record`].
    pub async fn put_bytes(
        &self,
        name: &str,
        body: ByteStream<'_>,
        max_bytes: u64,
    ) -> Result<(FileId, Written), FilesError> {
        let id = FileId::generate();
        let written = self.bytes.put(&id, name, body, max_bytes).await?;
        Ok((id, written))
    }

    /// Makes the file whose bytes [`Self::put_bytes`] stored visible, with its record; if the
    /// record cannot be stored, the bytes are deleted.
    pub async fn add_record(&self, id: FileId, written: Written, new: NewFile) -> Result<FileRecord, FilesError> {
        let record = FileRecord {
            id,
            account_id: new.account_id,
            name: new.name,
            content_type: new.content_type,
            size: i64::try_from(written.size).unwrap_or(i64::MAX),
            sha256: written.sha256,
            md5: written.md5,
            metadata: new.metadata,
            created_at: DateTime::now(),
            expires_at: new.expires_at,
            prediction_id: new.prediction_id,
        };
        if let Err(e) = self.records.insert(&record).await {
            self.discard(&record.id).await;
            return Err(e.into());
        }
        Ok(record)
    }

    /// Deletes the bytes of a file that never got its record (a failed upload).
    pub async fn discard(&self, id: &FileId) {
        if let Err(e) = self.bytes.delete(id).await {
            tracing::warn!(file_id = %id, error = %e, "the bytes of a failed upload were not deleted");
        }
    }

    /// File `id`, whoever owns it (callers check the account).
    pub async fn get(&self, id: &FileId) -> Result<Option<FileRecord>, FilesError> {
        if let Some(record) = self.records.get(id).await? {
            return Ok(Some(record));
        }
        Ok(self
            .gridfs
            .metadata(id)
            .await?
            .and_then(|(length, meta, filename)| legacy_output(id, length, &meta, filename)))
    }

    /// Bytes `range` of `file`.
    pub async fn read(&self, file: &FileRecord, range: Range<u64>) -> Result<ByteStream<'static>, FilesError> {
        Ok(self.bytes.read(&file.id, range).await?)
    }

    /// All of `file`'s bytes in memory (for a consumer that needs them whole: a built-in
    /// model, a test).
    pub async fn read_all(&self, file: &FileRecord) -> Result<Vec<u8>, FilesError> {
        let size = u64::try_from(file.size).unwrap_or(0);
        let mut stream = self.read(file, 0..size).await?;
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        while let Some(chunk) = futures::TryStreamExt::try_next(&mut stream).await.map_err(FileStoreError::Body)? {
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }

    /// Deletes file `id`; whether there was one.
    /// The bytes go first: a failure after them leaves a record whose delete can be retried,
    /// where the other order would leave bytes that nothing names any more.
    pub async fn delete(&self, id: &FileId) -> Result<bool, FilesError> {
        self.bytes.delete(id).await?;
        let removed = self.records.remove(id).await?;
        Ok(removed.is_some())
    }

    /// A page of `account`'s files, newest first, and how many it has.
    pub async fn list(
        &self,
        account: &AccountId,
        offset: u64,
        limit: u32,
    ) -> Result<(Vec<FileRecord>, u64), FilesError> {
        Ok((self.records.list(account, offset, limit).await?, self.records.count(account).await?))
    }

    /// Deletes the files `prediction` produced (its outputs, old ones too); how many.
    pub async fn delete_outputs_of(&self, prediction: &PredictionId) -> Result<usize, FilesError> {
        let mut ids: Vec<FileId> = self.records.of_prediction(prediction).await?.into_iter().map(|r| r.id).collect();
        ids.extend(self.gridfs.legacy_outputs_of(prediction).await?);
        ids.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        ids.dedup();
        for id in &ids {
            self.delete(id).await?;
        }
        Ok(ids.len())
    }

    /// The records (`file_records`), for the retention sweep.
    pub fn records(&self) -> &FileRecords {
        &self.records
    }
}

/// The record of an output stored before files had records, from its GridFS metadata.
fn legacy_output(id: &FileId, length: u64, meta: &Document, filename: Option<String>) -> Option<FileRecord> {
    let account_id = AccountId::parse(meta.get_str("account_id").ok()?).ok()?;
    let prediction_id = PredictionId::parse(meta.get_str("prediction_id").ok()?).ok()?;
    Some(FileRecord {
        id: id.clone(),
        account_id,
        name: filename.unwrap_or_default(),
        content_type: meta.get_str("content_type").unwrap_or("application/octet-stream").to_owned(),
        size: i64::try_from(length).unwrap_or(i64::MAX),
        sha256: String::new(),
        md5: String::new(),
        metadata: String::new(),
        created_at: DateTime::from_millis(0),
        expires_at: None,
        prediction_id: Some(prediction_id),
    })
}
