//! Files: uploads of the Files API and the file outputs of predictions, one kind of object.
//!
//! [`Files`] is what the services use: it writes a file's bytes to a [`FileStore`] (GridFS by
//! default, or an S3-compatible bucket with `FILES_STORE=s3`: [`FilesConfig`]) and then its
//! record to `file_records` ([`crate::store::files`]), naming the store, so a file is listed,
//! read or used as an input only once it is whole, and is read from the store that holds it
//! whatever the configured store is now. It reads a byte range back as a stream; it deletes
//! the bytes first, then the record.
//!
//! Every write is noted in `unfinished_uploads` before its first byte and the note removed
//! once the record is stored (or the bytes discarded): a process killed in between leaves the
//! note, and [`Files::sweep_unfinished`] removes what it left in the store.
//!
//! File outputs stored before files had records keep their owner in GridFS's own metadata;
//! [`Files::get`] still finds them there, so links handed out before keep working.
//!
//! Also here:
//! - [`gridfs`]: `FileStore` on MongoDB GridFS.
//! - [`payloads`]: a prediction's values too large for its document.

pub mod gridfs;
pub mod payloads;
pub mod s3;
pub mod store;

use std::{ops::Range, sync::Arc, time::Duration};

use bson::{DateTime, Document};

pub use self::{
    gridfs::GridFsStore,
    s3::{S3Settings, S3Store},
    store::{ByteStream, FileBody, FileStore, FileStoreError, FileStoreKind, Written},
};
use crate::{
    domain::{AccountId, FileId, PredictionId},
    store::{FileRecords, Store, StoreError, UnfinishedUploads, files::FileRecord},
};

/// Where files' bytes go, from `FILES_STORE`, `S3_*` and `AWS_*`.
#[derive(Debug, Clone)]
pub struct FilesConfig {
    /// `FILES_STORE`: where new files' bytes go (`gridfs`, the default, or `s3`).
    pub store: FileStoreKind,
    /// The S3-compatible store, when `S3_BUCKET` is set (required by `FILES_STORE=s3`; kept
    /// after a switch back to GridFS so the files stored there stay readable).
    pub s3: Option<S3Settings>,
    /// `FILES_S3_REDIRECT`: whether a download of a file in S3 answers 307 to a presigned URL
    /// of the object (default) rather than streaming its bytes through the api.
    pub s3_redirect: bool,
    /// `FILES_UPLOAD_TIMEOUT_SECONDS`: the longest a file's bytes may take to be stored; an
    /// upload begun longer ago than this (and a minute) and never finished is swept.
    pub upload_timeout: Duration,
}

impl Default for FilesConfig {
    fn default() -> Self {
        Self { store: FileStoreKind::Gridfs, s3: None, s3_redirect: true, upload_timeout: DEFAULT_UPLOAD_TIMEOUT }
    }
}

/// The default of `FILES_UPLOAD_TIMEOUT_SECONDS`.
pub const DEFAULT_UPLOAD_TIMEOUT: Duration = Duration::from_secs(3600);
/// How often the bucket is checked again while the S3 store was unreachable at start.
const BUCKET_RETRY: Duration = Duration::from_secs(2);
/// How much older than the upload timeout an unfinished upload must be before it is swept.
const SWEEP_MARGIN: Duration = Duration::from_secs(60);

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

/// The bytes of a file stored but not visible yet ([`Files::put_bytes`]).
#[derive(Debug, Clone)]
pub struct StoredBytes {
    /// The new file's id.
    pub id: FileId,
    /// What was stored.
    pub written: Written,
    /// Where.
    pub store: FileStoreKind,
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
    /// A prediction's payload file could not be written or read back as JSON.
    #[error("payload: {0}")]
    Payload(String),
}

/// Files of every account: records and bytes.
#[derive(Clone, Debug)]
pub struct Files {
    gridfs: GridFsStore,
    s3: Option<Arc<S3Store>>,
    write_to: FileStoreKind,
    redirect: bool,
    upload_timeout: Duration,
    records: FileRecords,
    unfinished: UnfinishedUploads,
}

impl Files {
    /// Files on `store`'s database, their bytes in its GridFS bucket.
    pub fn new(store: &Store) -> Self {
        Self {
            gridfs: GridFsStore::new(store.database()),
            s3: None,
            write_to: FileStoreKind::Gridfs,
            redirect: false,
            upload_timeout: DEFAULT_UPLOAD_TIMEOUT,
            records: store.file_records(),
            unfinished: store.unfinished_uploads(),
        }
    }

    /// Files on `store`'s database, their bytes where `config` says; checks that the S3
    /// bucket answers (creating it if it does not exist). A store that cannot be reached does
    /// not stop the service (file requests answer 503 until it is back); one that refuses the
    /// credentials or the bucket does.
    pub async fn open(store: &Store, config: &FilesConfig) -> Result<Self, FileStoreError> {
        let mut files = Self::new(store);
        if let Some(settings) = &config.s3 {
            let s3 = S3Store::new(settings, store.unfinished_uploads())?;
            match s3.ensure_bucket().await {
                Ok(()) => {}
                Err(FileStoreError::Unavailable(e)) => {
                    tracing::warn!(error = %e, "the S3 store is unreachable at start; file requests answer 503 until it is back");
                    let s3 = s3.clone();
                    tokio::spawn(async move {
                        // Until it answers: then the bucket is there (or created).
                        while let Err(FileStoreError::Unavailable(_)) = s3.ensure_bucket().await {
                            tokio::time::sleep(BUCKET_RETRY).await;
                        }
                    });
                }
                Err(e) => return Err(e),
            }
            files.s3 = Some(Arc::new(s3));
        }
        files.write_to = config.store;
        files.redirect = config.s3_redirect;
        files.upload_timeout = config.upload_timeout;
        Ok(files)
    }

    /// The store of `kind`.
    fn bytes(&self, kind: FileStoreKind) -> Result<&dyn FileStore, FileStoreError> {
        match kind {
            FileStoreKind::Gridfs => Ok(&self.gridfs),
            FileStoreKind::S3 => {
                self.s3.as_deref().map(|s| s as &dyn FileStore).ok_or(FileStoreError::NotConfigured("S3"))
            }
        }
    }

    /// The S3 store, if one is configured (for operators and tests).
    pub fn s3(&self) -> Option<&S3Store> {
        self.s3.as_deref()
    }

    /// Where new files' bytes go.
    pub fn writes_to(&self) -> FileStoreKind {
        self.write_to
    }

    /// Stores `body` as a new file (at most `max_bytes`), then its record; the record.
    pub async fn create<'a>(
        &self,
        new: NewFile,
        body: impl Into<FileBody<'a>>,
        max_bytes: u64,
    ) -> Result<FileRecord, FilesError> {
        let stored = self.put_bytes(&new.name, body, max_bytes).await?;
        self.add_record(stored, new).await
    }

    /// Stores the bytes of a new file (at most `max_bytes`) that is not visible yet: nothing
    /// lists, reads or uses it until [`Self::add_record`] (or [`Self::discard`]).
    pub async fn put_bytes<'a>(
        &self,
        name: &str,
        body: impl Into<FileBody<'a>>,
        max_bytes: u64,
    ) -> Result<StoredBytes, FilesError> {
        let body = body.into();
        // A body declared past the limit is refused unread.
        if body.length.is_some_and(|l| l > max_bytes) {
            return Err(FileStoreError::TooLarge { max_bytes }.into());
        }
        let id = FileId::generate();
        let store = self.write_to;
        let bytes = self.bytes(store)?;
        self.unfinished.begin(&id, store).await?;
        let put = tokio::time::timeout(self.upload_timeout, bytes.put(&id, name, body, max_bytes)).await;
        match put {
            Ok(Ok(written)) => Ok(StoredBytes { id, written, store }),
            Err(_elapsed) => {
                // Cut off mid-write: what it left is the sweep's.
                let timed_out = std::io::Error::new(std::io::ErrorKind::TimedOut, "the upload took too long");
                Err(FileStoreError::Body(timed_out).into())
            }
            Ok(Err(e)) => {
                // The store removed what it had written; the note goes too.
                if let Err(e) = self.unfinished.end(&id).await {
                    tracing::warn!(file_id = %id, error = %e, "a failed upload stays noted until the sweep");
                }
                Err(e.into())
            }
        }
    }

    /// Makes the file whose bytes [`Self::put_bytes`] stored visible, with its record; if the
    /// record is surely not stored, the bytes are deleted.
    pub async fn add_record(&self, stored: StoredBytes, new: NewFile) -> Result<FileRecord, FilesError> {
        self.add_record_as(stored, new, false).await
    }

    /// [`Self::add_record`] of a file that is a prediction's `payload` or not.
    async fn add_record_as(&self, stored: StoredBytes, new: NewFile, payload: bool) -> Result<FileRecord, FilesError> {
        let StoredBytes { id, written, store } = stored;
        let record = FileRecord {
            id,
            account_id: new.account_id,
            name: new.name,
            content_type: new.content_type,
            size: i64::try_from(written.size).unwrap_or(i64::MAX),
            sha256: written.sha256.clone(),
            md5: written.md5.clone(),
            metadata: new.metadata,
            created_at: DateTime::now(),
            expires_at: new.expires_at,
            prediction_id: new.prediction_id,
            store,
            payload,
        };
        if let Err(e) = self.records.insert(&record).await {
            // Unknown whether it applied (its answer lost, or its majority acknowledgment timed
            // out): a record the primary holds keeps its bytes; only one surely not stored has
            // them discarded (if even the reading fails, they are left to the sweep of
            // unfinished uploads, which reads again).
            match self.records.get_settled(&record.id).await {
                Ok(Some(_)) => {}
                Ok(None) => {
                    self.discard(&StoredBytes { id: record.id.clone(), written, store }).await;
                    return Err(e.into());
                }
                Err(_) => return Err(e.into()),
            }
        }
        if let Err(e) = self.unfinished.end(&record.id).await {
            // The sweep finds the record and leaves the bytes alone.
            tracing::warn!(file_id = %record.id, error = %e, "a stored file stays noted as unfinished until the sweep");
        }
        Ok(record)
    }

    /// Deletes the bytes of a file that never got its record (a failed upload).
    pub async fn discard(&self, stored: &StoredBytes) {
        let deleted = match self.bytes(stored.store) {
            Ok(bytes) => bytes.delete(&stored.id).await,
            Err(e) => Err(e),
        };
        match deleted {
            Ok(()) => {
                if let Err(e) = self.unfinished.end(&stored.id).await {
                    tracing::warn!(file_id = %stored.id, error = %e, "a discarded upload stays noted until the sweep");
                }
            }
            Err(e) => {
                tracing::warn!(file_id = %stored.id, error = %e, "the bytes of a failed upload wait for the sweep")
            }
        }
    }

    /// Removes what uploads that can no longer be under way (begun longer ago than the upload
    /// timeout) left in the stores: GridFS chunks, incomplete multipart uploads, objects
    /// without a record (a process killed mid-upload). A file whose record was stored is left
    /// alone. At most `limit` per call; how many were swept.
    pub async fn sweep_unfinished(&self, limit: i64) -> Result<usize, FilesError> {
        self.sweep_unfinished_older_than(self.upload_timeout + SWEEP_MARGIN, limit).await
    }

    /// [`Self::sweep_unfinished`] of uploads begun more than `older_than` ago (tests, which
    /// know that nothing is under way).
    pub async fn sweep_unfinished_older_than(&self, older_than: Duration, limit: i64) -> Result<usize, FilesError> {
        let age = i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
        let before = DateTime::from_millis(DateTime::now().timestamp_millis().saturating_sub(age));
        let mut swept = 0;
        for upload in self.unfinished.begun_before(before, limit).await? {
            // On the primary: a record whose majority acknowledgment timed out is stored there.
            if self.records.get_settled(&upload.id).await?.is_none() {
                let discarded = match self.bytes(upload.store) {
                    Ok(bytes) => bytes.discard_unfinished(&upload).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = discarded {
                    // Kept for a later sweep, behind the others: one upload the store will
                    // not discard holds up neither this sweep nor the next.
                    tracing::warn!(file_id = %upload.id, store = upload.store.as_str(), error = %e,
                        "an unfinished upload was not swept; it is tried again later");
                    self.unfinished.sweep_later(&upload.id).await?;
                    continue;
                }
                swept += 1;
                tracing::info!(file_id = %upload.id, store = upload.store.as_str(), "swept an unfinished upload");
            }
            self.unfinished.end(&upload.id).await?;
        }
        Ok(swept)
    }

    /// A URL that reads `file` straight from its store for `valid_for` (a presigned S3 URL),
    /// when downloads are redirected there (`FILES_S3_REDIRECT`) and its store can give one.
    pub fn redirect_for(&self, file: &FileRecord, valid_for: Duration) -> Option<url::Url> {
        self.presigned(file, valid_for).filter(|_| self.redirect)
    }

    /// The origin (`scheme://host[:port]`) downloads redirect to, when they redirect (files in
    /// the S3-compatible store and `FILES_S3_REDIRECT` on): what a page showing files must
    /// allow its images from.
    pub fn redirect_origin(&self) -> Option<String> {
        let s3 = self.s3.as_deref().filter(|_| self.redirect)?;
        let url =
            s3.presigned_get(&FileId::generate(), "origin", "application/octet-stream", Duration::from_secs(1))?;
        Some(url.origin().ascii_serialization())
    }

    /// A URL that reads `file` straight from its store for `valid_for`, whatever
    /// `FILES_S3_REDIRECT` says (a model's file input); none for a file in GridFS.
    pub fn presigned(&self, file: &FileRecord, valid_for: Duration) -> Option<url::Url> {
        let bytes = self.bytes(file.store).ok()?;
        bytes.presigned_get(&file.id, &file.name, &file.content_type, valid_for)
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
        Ok(self.bytes(file.store)?.read(&file.id, range).await?)
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
        let store = self.records.get(id).await?.map_or(FileStoreKind::Gridfs, |r| r.store);
        self.bytes(store)?.delete(id).await?;
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

    /// Deletes the files `prediction` produced that `keep` does not name: what earlier runs of
    /// it stored (a runner killed after a Cog server uploaded a file, say) once its output is
    /// final; how many.
    pub async fn delete_outputs_of_except(
        &self,
        prediction: &PredictionId,
        keep: &[FileId],
    ) -> Result<usize, FilesError> {
        let stale: Vec<FileId> = self
            .records
            .of_prediction(prediction)
            .await?
            .into_iter()
            .filter(|r| !r.payload)
            .map(|r| r.id)
            .filter(|id| !keep.contains(id))
            .collect();
        for id in &stale {
            self.delete(id).await?;
        }
        Ok(stale.len())
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
        store: FileStoreKind::Gridfs,
        payload: false,
    })
}
