//! [`FileStore`] on MongoDB GridFS: the bucket `files` (collections `files.files` and
//! `files.chunks`, 255 KiB chunks), a file's GridFS `_id` being its [`FileId`].
//!
//! A write streams through GridFS's upload stream, which stores each chunk as it fills and the
//! `files.files` document only when it is closed: bytes of an upload cut short (a limit, a
//! client gone, a killed api) are never a readable file. An upload stream dropped before it is
//! closed removes its chunks; one whose process was killed leaves them, and the sweep of
//! unfinished uploads removes them ([`FileStore::discard_unfinished`]). A read asks `files.chunks` for just the chunks a byte range
//! covers, in order, and trims the first and last, so a `Range` request reads no more than it
//! needs and nothing is held whole.

use std::ops::Range;

use bson::{Bson, Document, doc, spec::BinarySubtype};
use futures::{AsyncWriteExt, StreamExt, TryStreamExt, future::BoxFuture};
use mongodb::{
    Collection, Database,
    error::{ErrorKind, GridFsErrorKind},
    gridfs::GridFsBucket,
    options::GridFsBucketOptions,
};

use super::store::{ByteStream, FileBody, FileStore, FileStoreError, Tally, Written};
use crate::{domain::FileId, store::UnfinishedUpload};

/// The GridFS bucket's name.
const BUCKET: &str = "files";
/// Chunks asked for per round trip when reading (about 2 MiB of 255 KiB chunks): what a
/// download holds in memory at most, whatever the file's size (a reply is held raw and
/// decoded, so about twice this). Without it a reply may carry as
/// many chunks as the server allows in one message (measured with the stand-in, which does not
/// cap a batch at 16 MiB as MongoDB does: a 100 MiB file's second batch exceeded the driver's
/// 48 MB message limit).
///
/// Each round trip is a query of its own (`n` from the next chunk, at most this many), not a
/// `getMore` of one cursor: a client that reads slower than about 3.5 KB/s would leave a
/// cursor idle past MongoDB's 10 minutes, and the server would have closed it (error 43).
const READ_BATCH: u32 = 8;

/// Files' bytes in GridFS.
#[derive(Clone, Debug)]
pub struct GridFsStore {
    bucket: GridFsBucket,
    chunks: Collection<Document>,
    files: Collection<Document>,
}

impl GridFsStore {
    /// The bucket in `db`.
    pub fn new(db: &Database) -> Self {
        Self {
            bucket: db.gridfs_bucket(GridFsBucketOptions::builder().bucket_name(BUCKET.to_owned()).build()),
            chunks: db.collection(&format!("{BUCKET}.chunks")),
            files: db.collection(&format!("{BUCKET}.files")),
        }
    }

    /// The `files.files` document of `id`: its GridFS metadata (files written before uploads
    /// had records of their own keep theirs there).
    pub async fn metadata(&self, id: &FileId) -> Result<Option<(u64, Document, Option<String>)>, FileStoreError> {
        let found = self.bucket.find_one(doc! { "_id": id.as_str() }).await.map_err(storage)?;
        Ok(found.map(|f| (f.length, f.metadata.unwrap_or_default(), f.filename)))
    }
}

impl GridFsStore {
    /// The files an output of `prediction` was stored as before outputs had records (their
    /// owner is in GridFS's metadata).
    pub async fn legacy_outputs_of(
        &self,
        prediction: &crate::domain::PredictionId,
    ) -> Result<Vec<FileId>, FileStoreError> {
        let files: Vec<_> = self
            .bucket
            .find(doc! { "metadata.prediction_id": prediction.as_str() })
            .await
            .map_err(storage)?
            .try_collect()
            .await
            .map_err(storage)?;
        Ok(files.into_iter().filter_map(|f| f.id.as_str().and_then(|id| FileId::parse(id).ok())).collect())
    }
}

fn storage(e: mongodb::error::Error) -> FileStoreError {
    FileStoreError::Storage(Box::new(e))
}

fn io(e: std::io::Error) -> FileStoreError {
    FileStoreError::Storage(Box::new(e))
}

impl FileStore for GridFsStore {
    fn put<'a>(
        &'a self,
        id: &'a FileId,
        name: &'a str,
        body: FileBody<'a>,
        max_bytes: u64,
    ) -> BoxFuture<'a, Result<Written, FileStoreError>> {
        Box::pin(async move {
            let (mut body, checksummed) = (body.stream, body.checksummed);
            let mut upload =
                self.bucket.open_upload_stream(name).id(Bson::String(id.to_string())).await.map_err(storage)?;
            let mut tally = Tally::new(checksummed);
            while let Some(chunk) = body.next().await {
                let chunk = match chunk {
                    Ok(chunk) => chunk,
                    Err(e) => {
                        upload.abort().await.ok();
                        return Err(FileStoreError::Body(e));
                    }
                };
                if tally.add(&chunk).await > max_bytes {
                    upload.abort().await.ok();
                    return Err(FileStoreError::TooLarge { max_bytes });
                }
                upload.write_all(&chunk).await.map_err(io)?;
            }
            let written = match tally.finish().await {
                Ok(written) => written,
                Err(e) => {
                    upload.abort().await.ok();
                    return Err(e);
                }
            };
            upload.close().await.map_err(io)?;
            Ok(written)
        })
    }

    fn read<'a>(
        &'a self,
        id: &'a FileId,
        range: Range<u64>,
    ) -> BoxFuture<'a, Result<ByteStream<'static>, FileStoreError>> {
        Box::pin(async move {
            let file = self.bucket.find_one(doc! { "_id": id.as_str() }).await.map_err(storage)?;
            let file = file.ok_or(FileStoreError::NotFound)?;
            let chunk_size = u64::from(file.chunk_size_bytes.max(1));
            let end = range.end.min(file.length);
            if range.start >= end {
                return Ok(futures::stream::empty().boxed());
            }
            let (first, last) = (range.start / chunk_size, (end - 1) / chunk_size);
            let (chunks, id, start) = (self.chunks.clone(), id.to_string(), range.start);
            let pages = futures::stream::try_unfold(first, move |next| {
                let (chunks, id) = (chunks.clone(), id.clone());
                async move {
                    if next > last {
                        return Ok(None);
                    }
                    let page = chunk_page(&chunks, &id, next, last).await?;
                    let Some(n) = page.last().and_then(chunk_number) else {
                        return Err(std::io::Error::other(format!("GridFS chunk {next} of file {id} is missing")));
                    };
                    Ok(Some((futures::stream::iter(page.into_iter().map(Ok)), n as u64 + 1)))
                }
            });
            let stream =
                pages.try_flatten().and_then(move |chunk| async move { trimmed(&chunk, chunk_size, start, end) });
            Ok(stream.boxed())
        })
    }

    fn delete<'a>(&'a self, id: &'a FileId) -> BoxFuture<'a, Result<(), FileStoreError>> {
        Box::pin(async move {
            match self.bucket.delete(Bson::String(id.to_string())).await {
                Ok(()) => Ok(()),
                Err(e) if matches!(e.kind.as_ref(), ErrorKind::GridFs(GridFsErrorKind::FileNotFound { .. })) => Ok(()),
                Err(e) => Err(storage(e)),
            }
        })
    }

    fn discard_unfinished<'a>(&'a self, upload: &'a UnfinishedUpload) -> BoxFuture<'a, Result<(), FileStoreError>> {
        Box::pin(async move {
            // Chunks first: a files document without them would read as a broken file.
            self.chunks.delete_many(doc! { "files_id": upload.id.as_str() }).await.map_err(storage)?;
            self.files.delete_one(doc! { "_id": upload.id.as_str() }).await.map_err(storage)?;
            Ok(())
        })
    }
}

/// Chunks `next..=last` of file `id`, at most [`READ_BATCH`] of them, in one query whose cursor
/// the server closes with its reply.
async fn chunk_page(chunks: &Collection<Document>, id: &str, next: u64, last: u64) -> std::io::Result<Vec<Document>> {
    let filter = doc! { "files_id": id, "n": { "$gte": next as i64, "$lte": last as i64 } };
    let limit = i64::from(READ_BATCH);
    let cursor = chunks
        .find(filter)
        .sort(doc! { "n": 1 })
        .limit(limit)
        .batch_size(READ_BATCH)
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    cursor.try_collect().await.map_err(|e| std::io::Error::other(e.to_string()))
}

/// A chunk's number `n`, whatever its integer width.
fn chunk_number(chunk: &Document) -> Option<i64> {
    chunk.get("n").and_then(|n| n.as_i64().or_else(|| n.as_i32().map(i64::from)))
}

/// The part of chunk document `chunk` (of `chunk_size`-byte chunks) that falls in `start..end`.
fn trimmed(chunk: &Document, chunk_size: u64, start: u64, end: u64) -> Result<bytes::Bytes, std::io::Error> {
    let n = chunk_number(chunk);
    let data = match chunk.get("data") {
        Some(Bson::Binary(b)) if b.subtype == BinarySubtype::Generic => Some(&b.bytes),
        _ => None,
    };
    let (Some(n), Some(data)) = (n, data) else {
        return Err(std::io::Error::other("a GridFS chunk without n or data"));
    };
    let offset = n as u64 * chunk_size;
    let from = start.saturating_sub(offset).min(data.len() as u64) as usize;
    let to = (end.saturating_sub(offset)).min(data.len() as u64) as usize;
    Ok(bytes::Bytes::copy_from_slice(&data[from..to.max(from)]))
}

#[cfg(test)]
mod tests {
    use bson::Binary;

    use super::*;

    fn chunk(n: i32, data: &[u8]) -> Document {
        doc! { "n": n, "data": Binary { subtype: BinarySubtype::Generic, bytes: data.to_vec() } }
    }

    #[test]
    fn a_chunk_is_trimmed_to_the_range_it_shares() {
        let c = chunk(1, b"abcd"); // bytes 4..8 of 4-byte chunks
        assert_eq!(&trimmed(&c, 4, 0, 100).expect("whole")[..], b"abcd");
        assert_eq!(&trimmed(&c, 4, 5, 7).expect("middle")[..], b"bc");
        assert_eq!(&trimmed(&c, 4, 6, 100).expect("tail")[..], b"cd");
        assert_eq!(&trimmed(&c, 4, 0, 5).expect("head")[..], b"a");
        assert!(trimmed(&doc! { "n": 0 }, 4, 0, 4).is_err());
    }
}
