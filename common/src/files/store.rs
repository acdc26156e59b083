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

/// The bytes of a new file, and their length when the sender declared it (an HTTP upload's
/// `Content-Length`). A stream converts into a body of unknown length, whose checksums are
/// computed as it is written.
pub struct FileBody<'a> {
    /// The bytes.
    pub stream: ByteStream<'a>,
    /// How many there are, if known up front.
    pub length: Option<u64>,
    /// Whether the write computes the bytes' SHA-256 and MD5 ([`Written`]): yes for every
    /// file a client may download; no for a file only the services read back (a prediction's
    /// payload), which spares each write of 1 MB about 4 ms of CPU.
    pub checksummed: bool,
}

impl<'a> FileBody<'a> {
    /// A body of `length` bytes: the stream fails where it would go past them, or where it
    /// ends short of them ([`exactly`]), so no store keeps a body other than the one declared.
    pub fn sized(stream: ByteStream<'a>, length: u64) -> Self {
        Self { stream: exactly(stream, length), length: Some(length), checksummed: true }
    }

    /// This body, written without its checksums (they stay empty in [`Written`]).
    pub fn without_checksums(self) -> Self {
        Self { checksummed: false, ..self }
    }
}

impl<'a> From<ByteStream<'a>> for FileBody<'a> {
    fn from(stream: ByteStream<'a>) -> Self {
        Self { stream, length: None, checksummed: true }
    }
}

/// `stream`, failing with `InvalidData` at a chunk that would take it past `length` bytes
/// (the chunk is not passed on) or at its end if it brought fewer.
fn exactly(stream: ByteStream<'_>, length: u64) -> ByteStream<'_> {
    use futures::StreamExt;
    let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    futures::stream::unfold(Some((stream, 0u64)), move |state| async move {
        let (mut stream, seen) = state?;
        match stream.next().await {
            Some(Ok(chunk)) if seen + chunk.len() as u64 > length => {
                Some((Err(invalid(format!("the body is longer than its declared {length} bytes"))), None))
            }
            Some(Ok(chunk)) => {
                let seen = seen + chunk.len() as u64;
                Some((Ok(chunk), Some((stream, seen))))
            }
            Some(Err(e)) => Some((Err(e), None)),
            None if seen < length => {
                Some((Err(invalid(format!("the body ended at {seen} of its declared {length} bytes"))), None))
            }
            None => None,
        }
    })
    .boxed()
}

/// What a completed write stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// Bytes stored.
    pub size: u64,
    /// SHA-256 of the bytes, lowercase hex; empty for a body written without checksums.
    pub sha256: String,
    /// MD5 of the bytes, lowercase hex (the `etag`); empty for a body written without
    /// checksums.
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
    /// not readable until the returned future completes. A store may write a body of declared
    /// length another way than one of unknown length (S3: in one request).
    fn put<'a>(
        &'a self,
        id: &'a FileId,
        name: &'a str,
        body: FileBody<'a>,
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

/// Counts and hashes bytes as they pass, for [`Written`]. The first [`IN_LINE_BYTES`] are
/// hashed where they are read; past them each digest runs on a blocking thread of its own,
/// fed the chunks (shared, never copied) through a short queue, so a large file's hashing
/// (SHA-256 and MD5: about 3.5 s of CPU per GiB on the reference machine) runs beside its
/// write instead of holding up its reading. A small file costs no thread. A tally of a body
/// written without checksums ([`FileBody::checksummed`]) only counts.
pub struct Tally {
    size: u64,
    digests: Option<(Digesting<Sha256>, Digesting<Md5>)>,
}

/// See [`Tally`].
pub const IN_LINE_BYTES: u64 = 4 * 1024 * 1024;
/// Chunks waiting for each digest's thread before the reader waits for it.
const QUEUED_CHUNKS: usize = 16;

impl Tally {
    /// A tally of a body that is hashed when `checksummed` ([`FileBody::checksummed`]).
    pub fn new(checksummed: bool) -> Self {
        Self { size: 0, digests: checksummed.then(|| (Digesting::new(), Digesting::new())) }
    }

    /// Counts and hashes `chunk`; the new size.
    pub async fn add(&mut self, chunk: &Bytes) -> u64 {
        self.size += chunk.len() as u64;
        let behind = self.size > IN_LINE_BYTES;
        if let Some((sha256, md5)) = &mut self.digests {
            sha256.update(chunk, behind).await;
            md5.update(chunk, behind).await;
        }
        self.size
    }

    /// What was counted, once every chunk is hashed.
    pub async fn finish(self) -> Result<Written, FileStoreError> {
        let Some((sha256, md5)) = self.digests else {
            return Ok(Written { size: self.size, sha256: String::new(), md5: String::new() });
        };
        Ok(Written { size: self.size, sha256: hex(&sha256.finish().await?), md5: hex(&md5.finish().await?) })
    }
}

/// One digest of a [`Tally`]: in line, or on its own blocking thread.
enum Digesting<D> {
    /// Hashed where the chunks are read.
    InLine(D),
    /// Hashed on a blocking thread, fed through a queue; the thread answers the digest.
    Behind { chunks: tokio::sync::mpsc::Sender<Bytes>, done: tokio::task::JoinHandle<D> },
}

impl<D: Digest + Send + 'static> Digesting<D> {
    fn new() -> Self {
        Self::InLine(D::new())
    }

    async fn update(&mut self, chunk: &Bytes, behind: bool) {
        if behind && let Self::InLine(digest) = self {
            let mut digest = std::mem::replace(digest, D::new());
            let (chunks, mut queue) = tokio::sync::mpsc::channel::<Bytes>(QUEUED_CHUNKS);
            let done = tokio::task::spawn_blocking(move || {
                while let Some(chunk) = queue.blocking_recv() {
                    digest.update(&chunk);
                }
                digest
            });
            *self = Self::Behind { chunks, done };
        }
        match self {
            Self::InLine(digest) => digest.update(chunk),
            // A send fails only when the thread is gone, which `finish` reports.
            Self::Behind { chunks, .. } => {
                let _ = chunks.send(chunk.clone()).await;
            }
        }
    }

    async fn finish(self) -> Result<Vec<u8>, FileStoreError> {
        let digest = match self {
            Self::InLine(digest) => digest,
            Self::Behind { chunks, done } => {
                drop(chunks);
                done.await.map_err(|e| FileStoreError::Storage(Box::new(e)))?
            }
        };
        Ok(digest.finalize().to_vec())
    }
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read_all(body: FileBody<'_>) -> Result<Vec<u8>, std::io::Error> {
        use futures::TryStreamExt;
        body.stream
            .try_fold(Vec::new(), |mut all, chunk| async move {
                all.extend_from_slice(&chunk);
                Ok(all)
            })
            .await
    }

    fn chunks(parts: &[&'static [u8]]) -> ByteStream<'static> {
        use futures::StreamExt;
        futures::stream::iter(parts.iter().map(|p| Ok(Bytes::from_static(p))).collect::<Vec<_>>()).boxed()
    }

    #[tokio::test]
    async fn a_sized_body_passes_exactly_its_declared_bytes_and_fails_otherwise() {
        let whole = read_all(FileBody::sized(chunks(&[b"hello ", b"world"]), 11)).await;
        assert_eq!(whole.expect("as declared"), b"hello world");
        let longer = read_all(FileBody::sized(chunks(&[b"hello ", b"world"]), 8)).await;
        assert!(longer.expect_err("longer").to_string().contains("longer than its declared 8 bytes"));
        let shorter = read_all(FileBody::sized(chunks(&[b"hello "]), 11)).await;
        assert!(shorter.expect_err("shorter").to_string().contains("ended at 6 of its declared 11 bytes"));
        let unknown = read_all(chunks(&[b"any ", b"length"]).into()).await;
        assert_eq!(unknown.expect("no length to hold it to"), b"any length");
    }

    #[tokio::test]
    async fn the_tally_counts_and_hashes_across_chunks_as_if_whole() {
        let mut tally = Tally::new(true);
        tally.add(&Bytes::from_static(b"hello ")).await;
        assert_eq!(tally.add(&Bytes::from_static(b"world")).await, 11);
        let written = tally.finish().await.expect("hashed");
        assert_eq!(written.size, 11);
        assert_eq!(written.sha256, "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9");
        assert_eq!(written.md5, "5eb63bbbe01eeed093cb22bb8f5acdc3");
    }

    #[tokio::test]
    async fn a_body_past_the_in_line_bytes_hashes_on_threads_as_if_whole() {
        // Chunks of uneven sizes, the in-line limit crossed inside one of them.
        let whole: Vec<u8> = (0..(IN_LINE_BYTES as usize * 3 + 12_345)).map(|i| (i * 7 % 251) as u8).collect();
        let mut tally = Tally::new(true);
        let mut at = 0;
        for (i, size) in [1usize, 1 << 20, 3 << 20, 65_537, 1 << 22].into_iter().cycle().enumerate() {
            if at == whole.len() {
                break;
            }
            let end = (at + size + i).min(whole.len());
            tally.add(&Bytes::copy_from_slice(&whole[at..end])).await;
            at = end;
        }
        assert!(
            matches!(tally.digests, Some((Digesting::Behind { .. }, Digesting::Behind { .. }))),
            "past the limit the digests ran behind"
        );
        let written = tally.finish().await.expect("hashed");
        assert_eq!(written.size, whole.len() as u64);
        assert_eq!(written.sha256, hex(&Sha256::digest(&whole)));
        assert_eq!(written.md5, hex(&Md5::digest(&whole)));
    }

    #[tokio::test]
    async fn a_tally_without_checksums_counts_and_leaves_them_empty() {
        let mut tally = Tally::new(false);
        tally.add(&Bytes::from_static(b"hello ")).await;
        assert_eq!(tally.add(&Bytes::from_static(b"world")).await, 11);
        let written = tally.finish().await.expect("counted");
        assert_eq!(written, Written { size: 11, sha256: String::new(), md5: String::new() });
    }
}
