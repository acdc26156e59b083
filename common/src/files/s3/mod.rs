//! [`FileStore`] on any S3-compatible object store (AWS S3, GCS's S3 API, R2, MinIO, S3Proxy):
//! a file's bytes are the object `files/<file id>` of the bucket.
//!
//! Requests are built and signed by `rusty-s3` (no I/O of its own: every request is a URL
//! signed for a short while, sent with this module's `reqwest` client), so every call here
//! has its own timeout and the bytes stream through unchanged:
//! - a write ([`upload`]) is one `PutObject` up to [`PART_SIZE`], a multipart upload beyond,
//!   its parts streamed as they came, one in flight while the next is read; a body whose
//!   length was declared, up to `S3_SINGLE_PUT_MAX_BYTES`, is one `PutObject` streamed whole;
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

mod upload;

use std::{fmt, ops::Range, time::Duration};

use futures::{StreamExt, TryStreamExt, future::BoxFuture};
use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};
use url::Url;

use super::store::{ByteStream, FileBody, FileStore, FileStoreError, Written};
use crate::{
    domain::FileId,
    store::{UnfinishedUpload, UnfinishedUploads},
};

/// The size of each part of a multipart upload (S3 wants at least 5 MiB but for the last).
pub const PART_SIZE: usize = 5 * 1024 * 1024;
/// The largest object S3 takes in one `PutObject`.
pub const SINGLE_PUT_LIMIT: u64 = 5 * 1024 * 1024 * 1024;
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
    /// `S3_SINGLE_PUT_MAX_BYTES`: a body of declared length up to this is written in one
    /// `PutObject`, streamed; a longer or undeclared one as a multipart upload.
    pub single_put_max_bytes: u64,
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
            .field("single_put_max_bytes", &self.single_put_max_bytes)
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
    single_put_max_bytes: u64,
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
        Ok(Self { bucket, credentials, http, unfinished, single_put_max_bytes: settings.single_put_max_bytes })
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
}

impl FileStore for S3Store {
    fn put<'a>(
        &'a self,
        id: &'a FileId,
        _name: &'a str,
        body: FileBody<'a>,
        max_bytes: u64,
    ) -> BoxFuture<'a, Result<Written, FileStoreError>> {
        Box::pin(async move {
            match body.length {
                Some(length) if length <= self.single_put_max_bytes && length > PART_SIZE as u64 => {
                    self.put_whole(id, body, length, max_bytes).await
                }
                _ => self.upload(id, body, max_bytes).await,
            }
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
                self.try_abort(&object_key(&upload.id), upload_id).await?;
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
