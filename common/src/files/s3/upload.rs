//! Writes to the store: a body of up to [`PART_SIZE`] is one `PutObject`; a longer one is a
//! multipart upload whose parts are sent while the next one is read ([`PARTS_IN_FLIGHT`] at
//! once, so an upload holds at most two parts in memory, whatever its size). A part is the
//! chunks of the body as they came, never copied into a buffer of its own ([`Gathered`]). The
//! upload id is noted in `unfinished_uploads` first, so an upload cut off by a killed process
//! can be aborted by the sweep; one that fails here is aborted at once.
//!
//! A body whose length was declared (up to `S3_SINGLE_PUT_MAX_BYTES`) is instead one
//! `PutObject` streamed as it comes ([`S3Store::put_whole`]): no part is held, and the store
//! has no parts to join. S3Proxy joins a multipart upload's parts by copying them into one file
//! when it completes, a core busy for 4 to 6 s per GiB here; S3 itself joins them without a
//! copy, and its advice is multipart for large objects, hence the setting's small default.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use rusty_s3::{S3Action, actions::CreateMultipartUpload};
use tokio::task::JoinHandle;

use super::{PART_SIZE, PART_TIMEOUT, S3Store, SIGN_FOR, checked, excerpt, object_key, other, unavailable};
use crate::{
    domain::FileId,
    files::store::{ByteStream, FileBody, FileStoreError, Tally, Written},
};

/// Parts of one upload sent at once. A second one in flight took a 1 GiB write to S3Proxy
/// from 6.3 to 4.7 s until its last part was sent, but an upload through the api no faster
/// (0.93 of a raw write against 0.96 with one) for 12 MiB more of the api's memory per upload
/// (34.0 against 21.6 MiB, `bench files --store s3`; target 32): one it is. Large files whose
/// length is declared skip parts on S3Proxy altogether ([`S3Store::put_whole`]).
pub const PARTS_IN_FLIGHT: usize = 1;

/// The slowest a body written in one `PutObject` may arrive: its request may take
/// [`PART_TIMEOUT`] and a second per this many bytes.
const WHOLE_PUT_MIN_RATE: u64 = 1024 * 1024;
/// Chunks of a body written in one `PutObject` waiting for the request to send them.
const QUEUED_CHUNKS: usize = 16;

impl S3Store {
    /// Stores `body`, of declared `length` (held to it by `FileBody::sized`), as the object of
    /// `id` in one `PutObject`, its chunks passed on as they come ([`Gathered`]'s pieces). Past
    /// `max_bytes`, or when the body fails, the store keeps nothing ([`Self::finish_refused`]).
    pub(super) async fn put_whole(
        &self,
        id: &FileId,
        body: FileBody<'_>,
        length: u64,
        max_bytes: u64,
    ) -> Result<Written, FileStoreError> {
        let url = self.bucket.put_object(Some(&self.credentials), &object_key(id)).sign(SIGN_FOR);
        let (chunks, mut queue) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(QUEUED_CHUNKS);
        let request = self
            .http
            .put(url)
            .timeout(PART_TIMEOUT + std::time::Duration::from_secs(length / WHOLE_PUT_MIN_RATE))
            .header(http::header::CONTENT_LENGTH, length)
            .body(reqwest::Body::wrap_stream(futures::stream::poll_fn(move |cx| queue.poll_recv(cx))));
        let sending = tokio::spawn(async move {
            checked(request.send().await.map_err(unavailable)?, "storing an object").await.map(drop)
        });
        let (mut tally, mut sent) = (Tally::new(body.checksummed), 0u64);
        let mut body = body.stream;
        // Small chunks (an HTTP body's come by the few KiB) are sent together, as a part's are
        // kept: each write costs the store a read of its own.
        let mut pieces = Gathered::default();
        let fed = async {
            let mut ended = false;
            while !ended {
                match body.next().await {
                    Some(chunk) => {
                        let chunk = chunk.map_err(FileStoreError::Body)?;
                        if tally.add(&chunk).await > max_bytes {
                            return Err(FileStoreError::TooLarge { max_bytes });
                        }
                        pieces.push(chunk);
                    }
                    None => {
                        pieces.seal();
                        ended = true;
                    }
                }
                for piece in pieces.chunks.drain(..) {
                    sent += piece.len() as u64;
                    if chunks.send(Ok(piece)).await.is_err() {
                        return Ok(()); // The request ended early: its answer says why.
                    }
                }
            }
            Ok(())
        };
        if let Err(e) = fed.await {
            self.finish_refused(id, chunks, sending, length - sent).await;
            return Err(e);
        }
        drop(chunks);
        sending.await.map_err(|e| FileStoreError::Storage(Box::new(e)))??;
        tally.finish().await
    }

    /// Ends a `PutObject` whose body failed after `missing` more bytes were due, without
    /// keeping its object. Cut off mid-body, the request would leave S3Proxy a temporary file
    /// that S3 never shows but that fails every listing of the bucket until S3Proxy restarts;
    /// so the body is made up to its declared length with zeros, and the object so stored is
    /// deleted. (A process killed mid-write still leaves one: S3Proxy's start removes it.)
    async fn finish_refused(
        &self,
        id: &FileId,
        chunks: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
        sending: JoinHandle<Result<(), FileStoreError>>,
        mut missing: u64,
    ) {
        let zeros = Bytes::from(vec![0u8; PART_SIZE]);
        while missing > 0 {
            let next = zeros.slice(..missing.min(zeros.len() as u64) as usize);
            missing -= next.len() as u64;
            if chunks.send(Ok(next)).await.is_err() {
                break; // The request has ended already.
            }
        }
        drop(chunks);
        if let Ok(Ok(())) = sending.await
            && let Err(e) = crate::files::FileStore::delete(self, id).await
        {
            let key = object_key(id);
            tracing::warn!(key, error = %e, "a refused file's object could not be deleted and stays in the bucket");
        }
    }

    /// Stores `body` (at most `max_bytes`) as the object of `id`; a multipart upload that
    /// fails is aborted, its parts in flight dropped.
    pub(super) async fn upload(
        &self,
        id: &FileId,
        body: FileBody<'_>,
        max_bytes: u64,
    ) -> Result<Written, FileStoreError> {
        let key = object_key(id);
        let mut upload = None;
        let tally = Tally::new(body.checksummed);
        let written = self.write(id, &key, &mut { body.stream }, tally, max_bytes, &mut upload).await;
        if written.is_err()
            && let Some(mut upload) = upload
        {
            for part in upload.in_flight.drain(..) {
                part.abort();
            }
            self.abort(&key, &upload.upload_id).await;
        }
        written
    }

    async fn create_multipart(&self, id: &FileId, key: &str) -> Result<Multipart, FileStoreError> {
        let url = self.bucket.create_multipart_upload(Some(&self.credentials), key).sign(SIGN_FOR);
        let response = checked(self.send(self.http.post(url)).await?, "starting a multipart upload").await?;
        let text = response.text().await.map_err(unavailable)?;
        let upload_id = CreateMultipartUpload::parse_response(&text).map_err(other)?.upload_id().to_owned();
        if let Err(e) = self.unfinished.multipart_started(id, &upload_id).await {
            self.abort(key, &upload_id).await;
            return Err(FileStoreError::Storage(Box::new(e)));
        }
        Ok(Multipart { upload_id, etags: Vec::new(), in_flight: VecDeque::new() })
    }

    /// Sends `part` as the next part of `upload`, once fewer than [`PARTS_IN_FLIGHT`] are on
    /// their way.
    async fn send_part(&self, key: &str, upload: &mut Multipart, part: Gathered) -> Result<(), FileStoreError> {
        while upload.in_flight.len() >= PARTS_IN_FLIGHT {
            upload.settle_one().await?;
        }
        let number = u16::try_from(upload.etags.len() + upload.in_flight.len() + 1)
            .map_err(|_| FileStoreError::Storage("a file of more than 65,535 parts".into()))?;
        let url = self.bucket.upload_part(Some(&self.credentials), key, number, &upload.upload_id).sign(SIGN_FOR);
        let request = part.put(self.http.put(url).timeout(PART_TIMEOUT));
        upload.in_flight.push_back(tokio::spawn(async move {
            let response = checked(request.send().await.map_err(unavailable)?, "uploading a part").await?;
            let etag = response.headers().get(http::header::ETAG).and_then(|v| v.to_str().ok());
            etag.map(str::to_owned).ok_or_else(|| FileStoreError::Storage("a part was stored without an ETag".into()))
        }));
        Ok(())
    }

    async fn complete(&self, key: &str, mut upload: Multipart) -> Result<(), FileStoreError> {
        while !upload.in_flight.is_empty() {
            upload.settle_one().await?;
        }
        let complete = self.bucket.complete_multipart_upload(
            Some(&self.credentials),
            key,
            &upload.upload_id,
            upload.etags.iter().map(String::as_str),
        );
        let url = complete.sign(SIGN_FOR);
        let body = complete.body();
        let response = self.send(self.http.post(url).body(body)).await?;
        let response = checked(response, "completing a multipart upload").await?;
        // S3 may answer 200 with an error in the body when completing fails late.
        let text = response.text().await.map_err(unavailable)?;
        if text.contains("<Error>") {
            return Err(FileStoreError::Unavailable(format!("completing a multipart upload: {}", excerpt(&text))));
        }
        Ok(())
    }

    /// Aborts multipart upload `upload_id` of `key` on a failed write; one the store refuses
    /// to abort stays noted in `unfinished_uploads`, for the sweep.
    pub(super) async fn abort(&self, key: &str, upload_id: &str) {
        if let Err(e) = self.try_abort(key, upload_id).await {
            tracing::warn!(key, error = %e, "a multipart upload was not aborted; the sweep tries again");
        }
    }

    /// Aborts multipart upload `upload_id` of `key`; an upload already gone is fine.
    pub(super) async fn try_abort(&self, key: &str, upload_id: &str) -> Result<(), FileStoreError> {
        let url = self.bucket.abort_multipart_upload(Some(&self.credentials), key, upload_id).sign(SIGN_FOR);
        let response = self.send(self.http.delete(url)).await?;
        if response.status().as_u16() == 404 {
            return Ok(());
        }
        checked(response, "aborting a multipart upload").await.map(drop)
    }

    async fn write(
        &self,
        id: &FileId,
        key: &str,
        body: &mut ByteStream<'_>,
        mut tally: Tally,
        max_bytes: u64,
        upload: &mut Option<Multipart>,
    ) -> Result<Written, FileStoreError> {
        let mut part = Gathered::default();
        while let Some(chunk) = body.next().await {
            let mut chunk = chunk.map_err(FileStoreError::Body)?;
            if tally.add(&chunk).await > max_bytes {
                return Err(FileStoreError::TooLarge { max_bytes });
            }
            // The chunk that crosses a part's end is cut there (the halves share its memory).
            while !chunk.is_empty() {
                part.push(chunk.split_to((PART_SIZE - part.len).min(chunk.len())));
                if part.len == PART_SIZE {
                    if upload.is_none() {
                        *upload = Some(self.create_multipart(id, key).await?);
                    }
                    if let Some(upload) = upload.as_mut() {
                        self.send_part(key, upload, std::mem::take(&mut part)).await?;
                    }
                }
            }
        }
        let written = tally.finish().await?;
        match upload.take() {
            None => {
                let url = self.bucket.put_object(Some(&self.credentials), key).sign(SIGN_FOR);
                let request = part.put(self.http.put(url).timeout(PART_TIMEOUT));
                checked(request.send().await.map_err(unavailable)?, "storing an object").await?;
            }
            Some(mut multipart) => {
                if part.len > 0 {
                    self.send_part(key, &mut multipart, part).await?;
                }
                let upload_id = multipart.upload_id.clone();
                if let Err(e) = self.complete(key, multipart).await {
                    self.abort(key, &upload_id).await;
                    return Err(e);
                }
            }
        }
        Ok(written)
    }
}

/// The bytes of one part (or of a whole small object), as the chunks of the body that carried
/// them: a chunk of at least [`KEPT_WHOLE`] is kept as it came (holding it costs its own memory,
/// and sending it copies nothing); smaller ones are copied together into pieces of up to
/// [`COPIED_PIECE`], so a body that trickles in by the byte cannot cost a handle per byte. (A
/// part copied whole into one buffer cost that buffer too, and the first grew by doubling to
/// 8 MiB.)
#[derive(Default)]
struct Gathered {
    chunks: Vec<Bytes>,
    /// Small chunks copied together, not yet in `chunks`.
    copied: BytesMut,
    len: usize,
}

/// See [`Gathered`].
const KEPT_WHOLE: usize = 64 * 1024;
/// See [`Gathered`].
const COPIED_PIECE: usize = 256 * 1024;

impl Gathered {
    fn push(&mut self, chunk: Bytes) {
        self.len += chunk.len();
        if chunk.len() >= KEPT_WHOLE {
            self.seal();
            self.chunks.push(chunk);
            return;
        }
        if self.copied.capacity() - self.copied.len() < chunk.len() {
            self.seal();
            self.copied = BytesMut::with_capacity(COPIED_PIECE);
        }
        self.copied.extend_from_slice(&chunk);
    }

    /// Moves the copied chunks into `chunks`.
    fn seal(&mut self) {
        if !self.copied.is_empty() {
            self.chunks.push(std::mem::take(&mut self.copied).freeze());
        }
    }

    /// `request` with these bytes as its body, and their length (S3 takes no chunked body).
    fn put(mut self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        self.seal();
        let length = self.len;
        let chunks = self.chunks.into_iter().map(Ok::<_, std::io::Error>);
        request
            .header(http::header::CONTENT_LENGTH, length)
            .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
    }
}

/// A multipart upload under way.
struct Multipart {
    upload_id: String,
    /// The ETags of the parts stored, in order.
    etags: Vec<String>,
    /// The parts being sent, oldest first, each answering its ETag.
    in_flight: VecDeque<JoinHandle<Result<String, FileStoreError>>>,
}

impl Multipart {
    /// Waits for the oldest part in flight, if any, and keeps its ETag.
    async fn settle_one(&mut self) -> Result<(), FileStoreError> {
        let Some(part) = self.in_flight.pop_front() else { return Ok(()) };
        self.etags.push(part.await.map_err(|e| FileStoreError::Storage(Box::new(e)))??);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of(part: &mut Gathered) -> Vec<u8> {
        part.seal();
        part.chunks.iter().flat_map(|c| c.iter().copied()).collect()
    }

    #[test]
    fn a_part_keeps_large_chunks_as_they_came_and_copies_small_ones_together() {
        let large = Bytes::from(vec![7u8; KEPT_WHOLE]);
        let mut part = Gathered::default();
        part.push(Bytes::from_static(b"ab"));
        part.push(Bytes::from_static(b"cd"));
        part.push(large.clone());
        part.push(Bytes::from_static(b"ef"));
        assert_eq!(part.len, 6 + KEPT_WHOLE);
        let mut expected = b"abcd".to_vec();
        expected.extend_from_slice(&large);
        expected.extend_from_slice(b"ef");
        assert_eq!(bytes_of(&mut part), expected, "the bytes in their order");
        assert_eq!(part.chunks.len(), 3, "abcd, the large chunk, ef");
        assert_eq!(part.chunks[1].as_ptr(), large.as_ptr(), "the large chunk is not copied");
    }

    #[test]
    fn a_body_that_trickles_in_by_the_byte_costs_a_handle_per_piece_not_per_byte() {
        let mut part = Gathered::default();
        for _ in 0..PART_SIZE {
            part.push(Bytes::from_static(b"x"));
        }
        part.seal();
        assert_eq!(part.len, PART_SIZE);
        assert_eq!(part.chunks.len(), PART_SIZE / COPIED_PIECE);
    }
}
