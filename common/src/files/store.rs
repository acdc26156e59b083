//! A file's bytes, behind one small interface: [`FileStore`]. Two implementations: GridFS in
//! MongoDB ([`super::gridfs`], the default) and any S3-compatible object store
//! ([`super::s3`]). Each file's record names its store ([`FileStoreKind`]), so nothing above
//! this trait (handlers, runner, retention) knows which one holds a file's bytes.
//!
//! Bytes go in and out as streams, never whole: [`FileStore::put`] writes a body chunk by chunk
//! while it counts and hashes it, and stops past a size limit without keeping anything;
//! [`FileStore::read`] answers a byte range as a stream.

use std::{fmt, ops::Range, time::Duration};

use bytes::Bytes;
use futures::{future::BoxFuture, stream::BoxStream};
use md5::Md5;
use sha2::{Digest, Sha256};

use crate::{domain::FileId, store::UnfinishedUpload};

pub use crate::domain::FileStoreKind;

/// A stream of a file's bytes.
pub type ByteStream<'a> = BoxStream<'a, Result<Bytes, std::io::Error>>;

/// What a completed write stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// Bytes stored.
    pub size: u64,
    /// SHA-256 of the bytes, lowercase hex.
    pub sha256: String,
    /// MD5 of the bytes, lowercase hex (the `etag`).
    pub md5: String,
}

/// Why a file's bytes could not be stored or read.
#[derive(Debug, thiserror::Error)]
pub enum FileStoreError {
    /// The body went past the size limit; nothing was kept.
    #[error("the file is larger than {max_bytes} bytes")]
    TooLarge {
        /// The limit.
        max_bytes: u64,
    },
    /// The body could not be read (the client went away, a malformed upload).
    #[error("the upload could not be read: {0}")]
    Body(std::io::Error),
    /// No bytes are stored under this id.
    #[error("no such file")]
    NotFound,
    /// The store cannot be reached or answers that it is unavailable: worth a retry later
    /// (the api answers 503 with `Retry-After`).
    #[error("the file store is unavailable: {0}")]
    Unavailable(String),
    /// The store holds no bytes of this kind of file (a file recorded in a store this process
    /// is not configured for).
    #[error("this process has no {0} file store configured")]
    NotConfigured(&'static str),
    /// The storage failed.
    #[error("file storage failed: {0}")]
    Storage(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Where files' bytes live.
pub trait FileStore: Send + Sync + fmt::Debug {
    /// Streams `body` into new file `id` (named `name`), hashing it as it goes; past
    /// `max_bytes` it stops with [`FileStoreError::TooLarge`] and keeps nothing. Stored bytes are
    /// not readable until the returned future completes.
    fn put<'a>(
        &'a self,
        id: &'a FileId,
        name: &'a str,
        body: ByteStream<'a>,
        max_bytes: u64,
    ) -> BoxFuture<'a, Result<Written, FileStoreError>>;

    /// Bytes `range` of file `id` (the caller knows its size), as a stream.
    fn read<'a>(
        &'a self,
        id: &'a FileId,
        range: Range<u64>,
    ) -> BoxFuture<'a, Result<ByteStream<'static>, FileStoreError>>;

    /// Removes file `id`'s bytes; removing a file that is not there succeeds.
    fn delete<'a>(&'a self, id: &'a FileId) -> BoxFuture<'a, Result<(), FileStoreError>>;

    /// Removes whatever an upload cut short left of its file (GridFS chunks, an incomplete
    /// multipart upload, an object whose record was never stored); nothing left succeeds.
    fn discard_unfinished<'a>(&'a self, upload: &'a UnfinishedUpload) -> BoxFuture<'a, Result<(), FileStoreError>>;

    /// A URL that reads file `id`'s bytes straight from the store, without a key, for
    /// `valid_for`, answered with `content_type` and as a download named `name`; none for a
    /// store that cannot hand one out (GridFS).
    fn presigned_get(&self, id: &FileId, name: &str, content_type: &str, valid_for: Duration) -> Option<url::Url> {
        let _ = (id, name, content_type, valid_for);
        None
    }
}

/// Counts and hashes bytes as they pass, for [`Written`].
#[derive(Default)]
pub struct Tally {
    size: u64,
    sha256: Sha256,
    md5: Md5,
}

impl Tally {
    /// Counts and hashes `chunk`; the new size.
    pub fn add(&mut self, chunk: &[u8]) -> u64 {
        self.size += chunk.len() as u64;
        self.sha256.update(chunk);
        self.md5.update(chunk);
        self.size
    }

    /// What was counted.
    pub fn finish(self) -> Written {
        Written { size: self.size, sha256: hex(&self.sha256.finalize()), md5: hex(&self.md5.finalize()) }
    }
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tally_counts_and_hashes_across_chunks_as_if_whole() {
        let mut tally = Tally::default();
        tally.add(b"hello ");
        assert_eq!(tally.add(b"world"), 11);
        let written = tally.finish();
        assert_eq!(written.size, 11);
        assert_eq!(written.sha256, "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9");
        assert_eq!(written.md5, "5eb63bbbe01eeed093cb22bb8f5acdc3");
    }
}
