//! [`FileStore`] on any S3-compatible object store (AWS S3, GCS's S3 API, R2, MinIO, S3Proxy):
//! a file's bytes are the object `files/<file id>` of the bucket.
//!
//! Requests are built and signed by `rusty-s3` (no I/O of its own: every request is a URL
//! signed for a short while, sent with this module's `reqwest` client), so every call here
//! has its own timeout and the bytes stream through unchanged:
//! - a write of up to [`PART_SIZE`] is one `PutObject`; a longer one is a multipart upload
//!   whose parts are sent while the next one is read (one part in flight, so an upload holds at
//!   most two parts in memory, whatever its size). A part is the chunks of the body as they
//!   came, never copied into a buffer of its own ([`Gathered`]). Its upload id is noted in
//!   `unfinished_uploads` first, so an upload cut off by a killed process can be aborted by
//!   the sweep; one that fails here is aborted at once;
//! - a read is a `GetObject` with a `Range`, streamed;
//! - a download may skip the api: [`FileStore::presigned_get`] signs a `GetObject` URL that
//!   answers with the file's type and name (`response-content-type`,
//!   `response-content-disposition`).
//!
//! Checksums: no `x-amz-checksum-*` header and no `aws-chunked` body is sent (some S3
//! implementations refuse them); bodies are signed as `UNSIGNED-PAYLOAD` over TLS, and the
//! service keeps its own SHA-256 and MD5 of every file.
//!
//! A store that cannot be reached, or answers 5xx or 503 `SlowDown`, is
//! [`FileStoreError::Unavailable`]: the api answers 503 with `Retry-After`, never 500.

use std::{fmt, ops::Range, time::Duration};

use bytes::{Bytes, BytesMut};
use futures::{StreamExt, TryStreamExt, future::BoxFuture};
use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle, actions::CreateMultipartUpload};
use tokio::task::JoinHandle;
use url::Url;

use super::store::{ByteStream, FileStore, FileStoreError, Tally, Written};
use crate::{
    domain::FileId,
    store::{UnfinishedUpload, UnfinishedUploads},
};

/// The size of each part of a multipart upload (S3 wants at least 5 MiB but for the last).
pub const PART_SIZE: usize = 5 * 1024 * 1024;
/// How long a URL this module signs for its own request lives.
const SIGN_FOR: Duration = Duration::from_secs(300);
/// The longest S3 accepts for a presigned URL.
const MAX_PRESIGN: Duration = Duration::from_secs(7 * 24 * 3600);
/// The longest a call without a body to stream (create, complete, abort, delete) may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest sending one part (or a whole small file) may take.
const PART_TIMEOUT: Duration = Duration::from_secs(300);
/// The longest connecting to the store may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a read of a response may wait for its next bytes.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// Where the object store is and who the service is to it (`S3_*`, `AWS_*`).
#[derive(Clone)]
pub struct S3Settings {
    /// `S3_BUCKET`: the bucket.
    pub bucket: String,
    /// `S3_ENDPOINT`: the store's address, for a store other than AWS S3.
    pub endpoint: Option<Url>,
    /// `S3_REGION` (or `AWS_REGION`): the region requests are signed for.
    pub region: String,
    /// `S3_FORCE_PATH_STYLE`: `<endpoint>/<bucket>/<key>` rather than `<bucket>.<host>/<key>`.
    pub force_path_style: bool,
    /// `AWS_ACCESS_KEY_ID`.
    pub access_key_id: String,
    /// `AWS_SECRET_ACCESS_KEY`.
    pub secret_access_key: String,
    /// `AWS_SESSION_TOKEN`, for temporary credentials.
    pub session_token: Option<String>,
}

impl fmt::Debug for S3Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Settings")
            .field("bucket", &self.bucket)
            .field("endpoint", &self.endpoint.as_ref().map(Url::as_str))
            .field("region", &self.region)
            .field("force_path_style", &self.force_path_style)
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// Files' bytes in an S3-compatible bucket.
#[derive(Clone)]
pub struct S3Store {
    bucket: Bucket,
    credentials: Credentials,
    http: reqwest::Client,
    unfinished: UnfinishedUploads,
}

impl fmt::Debug for S3Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Store").field("bucket", &self.bucket.base_url().as_str()).finish_non_exhaustive()
    }
}

/// The object that holds file `id`'s bytes.
pub fn object_key(id: &FileId) -> String {
    format!("files/{id}")
}

impl S3Store {
    /// The bucket of `settings`; multipart upload ids are noted in `unfinished`.
    pub fn new(settings: &S3Settings, unfinished: UnfinishedUploads) -> Result<Self, FileStoreError> {
        let endpoint = match &settings.endpoint {
            Some(endpoint) => endpoint.clone(),
            None => Url::parse(&format!("https://s3.{}.amazonaws.com", settings.region)).map_err(other)?,
        };
        let style = if settings.force_path_style { UrlStyle::Path } else { UrlStyle::VirtualHost };
        let bucket = Bucket::new(endpoint, style, settings.bucket.clone(), settings.region.clone()).map_err(other)?;
        let credentials = match &settings.session_token {
            Some(token) => {
                Credentials::new_with_token(&settings.access_key_id, &settings.secret_access_key, token.clone())
            }
            None => Credentials::new(&settings.access_key_id, &settings.secret_access_key),
        };
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .build()
            .map_err(other)?;
        Ok(Self { bucket, credentials, http, unfinished })
    }

    /// Checks that the bucket answers, and creates it if it does not exist (a store started
    /// for this service alone, as `deploy/local/up` does).
    pub async fn ensure_bucket(&self) -> Result<(), FileStoreError> {
        let url = self.bucket.head_bucket(Some(&self.credentials)).sign(SIGN_FOR);
        let response = self.send(self.http.head(url)).await?;
        match response.status().as_u16() {
            200..=299 => Ok(()),
            404 => {
                let create = self.bucket.create_bucket(&self.credentials);
                let body = create.body();
                let response = self.send(self.http.put(create.sign(SIGN_FOR)).body(body)).await?;
                // 409: another process (the api beside a runner) created it meanwhile.
                if response.status().as_u16() == 409 {
                    return Ok(());
                }
                checked(response, "creating the bucket").await.map(drop)
            }
            _ => checked(response, "checking the bucket").await.map(drop),
        }
    }

    /// The keys of every object in the bucket under `files/` (for operators and tests).
    pub async fn list_keys(&self) -> Result<Vec<String>, FileStoreError> {
        let mut keys = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut list = self.bucket.list_objects_v2(Some(&self.credentials));
            list.with_prefix("files/");
            if let Some(token) = &token {
                list.with_continuation_token(token.clone());
            }
            let response = checked(self.send(self.http.get(list.sign(SIGN_FOR))).await?, "listing objects").await?;
            let text = response.text().await.map_err(unavailable)?;
            let page = rusty_s3::actions::ListObjectsV2::parse_response(&text).map_err(other)?;
            keys.extend(page.contents.into_iter().map(|c| c.key));
            match page.next_continuation_token {
                Some(next) => token = Some(next),
                None => return Ok(keys),
            }
        }
    }

    /// How many parts multipart upload `upload_id` of file `id` still keeps: none once it is
    /// completed or aborted (S3 answers `NoSuchUpload`; some stores an empty list).
    pub async fn multipart_parts_kept(&self, id: &FileId, upload_id: &str) -> Result<usize, FileStoreError> {
        let key = object_key(id);
        let url = self.bucket.list_parts(Some(&self.credentials), &key, upload_id).sign(SIGN_FOR);
        let response = self.send(self.http.get(url)).await?;
        if response.status().as_u16() == 404 {
            return Ok(0);
        }
        let text = checked(response, "listing the parts of an upload").await?.text().await.map_err(unavailable)?;
        // Counted in the XML itself: stores differ in the other fields they send (S3Proxy
        // leaves out MaxParts for an aborted upload, which the typed parser requires).
        Ok(text.matches("<Part>").count())
    }

    /// Sends `request` within [`CALL_TIMEOUT`], unless it has a timeout of its own.
    async fn send(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response, FileStoreError> {
        request.timeout(CALL_TIMEOUT).send().await.map_err(unavailable)
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
        Ok(Multipart { upload_id, etags: Vec::new(), in_flight: None })
    }

    /// Sends `part` as the next part of `upload`, once the part before it has arrived.
    async fn send_part(&self, key: &str, upload: &mut Multipart, part: Gathered) -> Result<(), FileStoreError> {
        upload.settle().await?;
        let number = u16::try_from(upload.etags.len() + 1)
            .map_err(|_| FileStoreError::Storage("a file of more than 65,535 parts".into()))?;
        let url = self.bucket.upload_part(Some(&self.credentials), key, number, &upload.upload_id).sign(SIGN_FOR);
        let request = part.put(self.http.put(url).timeout(PART_TIMEOUT));
        upload.in_flight = Some(tokio::spawn(async move {
            let response = checked(request.send().await.map_err(unavailable)?, "uploading a part").await?;
            let etag = response.headers().get(http::header::ETAG).and_then(|v| v.to_str().ok());
            etag.map(str::to_owned).ok_or_else(|| FileStoreError::Storage("a part was stored without an ETag".into()))
        }));
        Ok(())
    }

    async fn complete(&self, key: &str, mut upload: Multipart) -> Result<(), FileStoreError> {
        upload.settle().await?;
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

    /// Aborts multipart upload `upload_id` of `key`; an upload already gone is fine.
    async fn abort(&self, key: &str, upload_id: &str) {
        let url = self.bucket.abort_multipart_upload(Some(&self.credentials), key, upload_id).sign(SIGN_FOR);
        match self.send(self.http.delete(url)).await {
            Ok(response) if response.status().is_success() || response.status().as_u16() == 404 => {}
            Ok(response) => tracing::warn!(key, status = %response.status(), "a multipart upload was not aborted"),
            Err(e) => tracing::warn!(key, error = %e, "a multipart upload was not aborted"),
        }
    }

    async fn write(
        &self,
        id: &FileId,
        key: &str,
        body: &mut ByteStream<'_>,
        max_bytes: u64,
        upload: &mut Option<Multipart>,
    ) -> Result<Written, FileStoreError> {
        let mut tally = Tally::default();
        let mut part = Gathered::default();
        while let Some(chunk) = body.next().await {
            let mut chunk = chunk.map_err(FileStoreError::Body)?;
            if tally.add(&chunk) > max_bytes {
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
        Ok(tally.finish())
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
    /// The part being sent, answering its ETag.
    in_flight: Option<JoinHandle<Result<String, FileStoreError>>>,
}

impl Multipart {
    /// Waits for the part in flight, if any, and keeps its ETag.
    async fn settle(&mut self) -> Result<(), FileStoreError> {
        let Some(part) = self.in_flight.take() else { return Ok(()) };
        self.etags.push(part.await.map_err(|e| FileStoreError::Storage(Box::new(e)))??);
        Ok(())
    }
}

impl FileStore for S3Store {
    fn put<'a>(
        &'a self,
        id: &'a FileId,
        _name: &'a str,
        mut body: ByteStream<'a>,
        max_bytes: u64,
    ) -> BoxFuture<'a, Result<Written, FileStoreError>> {
        Box::pin(async move {
            let key = object_key(id);
            let mut upload = None;
            let written = self.write(id, &key, &mut body, max_bytes, &mut upload).await;
            if written.is_err()
                && let Some(mut upload) = upload
            {
                if let Some(part) = upload.in_flight.take() {
                    part.abort();
                }
                self.abort(&key, &upload.upload_id).await;
            }
            written
        })
    }

    fn read<'a>(
        &'a self,
        id: &'a FileId,
        range: Range<u64>,
    ) -> BoxFuture<'a, Result<ByteStream<'static>, FileStoreError>> {
        Box::pin(async move {
            if range.start >= range.end {
                return Ok(futures::stream::empty().boxed());
            }
            let url = self.bucket.get_object(Some(&self.credentials), &object_key(id)).sign(SIGN_FOR);
            let request =
                self.http.get(url).header(http::header::RANGE, format!("bytes={}-{}", range.start, range.end - 1));
            let response = request.send().await.map_err(unavailable)?;
            if response.status().as_u16() == 404 {
                return Err(FileStoreError::NotFound);
            }
            let response = checked(response, "reading an object").await?;
            Ok(response.bytes_stream().map_err(std::io::Error::other).boxed())
        })
    }

    fn delete<'a>(&'a self, id: &'a FileId) -> BoxFuture<'a, Result<(), FileStoreError>> {
        Box::pin(async move {
            let url = self.bucket.delete_object(Some(&self.credentials), &object_key(id)).sign(SIGN_FOR);
            let response = self.send(self.http.delete(url)).await?;
            if response.status().as_u16() == 404 {
                return Ok(());
            }
            checked(response, "deleting an object").await.map(drop)
        })
    }

    fn discard_unfinished<'a>(&'a self, upload: &'a UnfinishedUpload) -> BoxFuture<'a, Result<(), FileStoreError>> {
        Box::pin(async move {
            if let Some(upload_id) = &upload.multipart_upload_id {
                self.abort(&object_key(&upload.id), upload_id).await;
            }
            self.delete(&upload.id).await
        })
    }

    fn presigned_get(&self, id: &FileId, name: &str, content_type: &str, valid_for: Duration) -> Option<Url> {
        let key = object_key(id);
        let mut get = self.bucket.get_object(Some(&self.credentials), &key);
        get.query_mut().insert("response-content-type", content_type.to_owned());
        get.query_mut()
            .insert("response-content-disposition", format!("inline; filename=\"{}\"", name.replace('"', "")));
        Some(get.sign(valid_for.clamp(Duration::from_secs(1), MAX_PRESIGN)))
    }
}

/// `response` if it succeeded; otherwise why not, as [`FileStoreError::Unavailable`] for a
/// 5xx (the store is down or overloaded) and [`FileStoreError::Storage`] for anything else.
async fn checked(response: reqwest::Response, doing: &str) -> Result<reqwest::Response, FileStoreError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let body = response.text().await.unwrap_or_default();
    let message = format!("{doing}: {status}: {}", excerpt(&body));
    if status.is_server_error() {
        Err(FileStoreError::Unavailable(message))
    } else {
        Err(FileStoreError::Storage(message.into()))
    }
}

/// The first part of an error body, for a log line.
fn excerpt(body: &str) -> &str {
    let end = body.char_indices().nth(300).map_or(body.len(), |(i, _)| i);
    &body[..end]
}

fn unavailable(e: reqwest::Error) -> FileStoreError {
    FileStoreError::Unavailable(e.to_string())
}

fn other(e: impl std::error::Error + Send + Sync + 'static) -> FileStoreError {
    FileStoreError::Storage(Box::new(e))
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
