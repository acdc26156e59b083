//! The runner's receiver of a Cog server's output files: `PUT /upload/{name}` on the callback
//! server ([`super::callbacks`]). A Cog server started with `--upload-url
//! {RUNNER_COG_CALLBACK_URL}/upload/` PUTs each file its prediction returns there (headers
//! `Content-Type` and `X-Prediction-Id`, the Cog prediction id this runner chose) instead of
//! inlining it as a `data:` URI, and puts the answer's `Location` in the output.
//!
//! The body streams into the file store as it arrives (GridFS chunks or S3 multipart parts):
//! no file passes whole through memory, whatever its size, up to `RUNNER_MAX_OUTPUT_FILE_BYTES`
//! (5 GiB by default; past it 413, and coglet fails the prediction). The stored file belongs to
//! the run's account and, for a prediction, goes with the prediction's data, like every file
//! output; a training's weights are kept while their version exists. `Location` is the file's
//! canonical URL, which the output then holds and each surface renders as its link.
//!
//! Only a run this runner is doing may upload: a run registers its Cog id for its duration
//! ([`Uploads::register`]); any other id is 404, which fails that Cog prediction. A model
//! started beside step 1 of its job may upload before the runner knows whose job it is: the
//! upload waits for that (at most [`OWNER_WAIT`]).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use axum::{
    body::Body,
    extract::{Path, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use common::{
    domain::{AccountId, ApiSurface, PredictionId, training::weights_pending_until},
    files::{FileBody, FileStoreError, Files, FilesError, NewFile},
    links::Links,
};
use futures::{StreamExt, TryStreamExt};
use tokio::sync::watch;

use crate::metrics::RunnerMetrics;

/// The default bound on one uploaded file: S3's largest single object is far larger, and
/// real models' outputs (videos, weights) pass a gigabyte.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 5 * 1024 * 1024 * 1024;

/// How long an upload waits for its run's owner to be known.
pub const OWNER_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Whose files a run's uploads are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOwner {
    /// The account that owns the job.
    pub account_id: AccountId,
    /// The prediction whose data its files go with; `None` for a training (its weights are
    /// kept while the version it records exists).
    pub prediction_id: Option<PredictionId>,
}

/// Where uploads go, and the runs that may upload.
pub struct Uploads {
    files: Files,
    links: Links,
    max_bytes: u64,
    metrics: RunnerMetrics,
    runs: Mutex<HashMap<String, watch::Receiver<Option<RunOwner>>>>,
}

/// Ends a run's right to upload when dropped.
pub struct UploadRegistration {
    uploads: Arc<Uploads>,
    cog_id: String,
}

impl Drop for UploadRegistration {
    fn drop(&mut self) {
        self.uploads.runs.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.cog_id);
    }
}

impl Uploads {
    /// Uploads into `files`, answered with `links`' canonical file URLs, each at most
    /// `max_bytes`, timed into `metrics`.
    pub fn new(files: Files, links: Links, max_bytes: u64, metrics: RunnerMetrics) -> Arc<Self> {
        Arc::new(Self { files, links, max_bytes, metrics, runs: Mutex::new(HashMap::new()) })
    }

    /// Lets the Cog prediction `cog_id` upload files of `owner` (once known) until the
    /// registration drops.
    pub fn register(self: &Arc<Self>, cog_id: &str, owner: watch::Receiver<Option<RunOwner>>) -> UploadRegistration {
        self.runs.lock().unwrap_or_else(|p| p.into_inner()).insert(cog_id.to_owned(), owner);
        UploadRegistration { uploads: self.clone(), cog_id: cog_id.to_owned() }
    }

    fn owner_of(&self, cog_id: &str) -> Option<watch::Receiver<Option<RunOwner>>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner()).get(cog_id).cloned()
    }
}

fn refused(status: StatusCode, message: impl Into<String>) -> Response {
    (status, message.into()).into_response()
}

/// `PUT /upload/{name}`: streams the body into the file store; 201 with `Location`.
pub async fn receive(
    State(uploads): State<Arc<Uploads>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = std::time::Instant::now();
    let Some(cog_id) = headers.get("x-prediction-id").and_then(|v| v.to_str().ok()) else {
        return refused(StatusCode::BAD_REQUEST, "an upload names its prediction in X-Prediction-Id");
    };
    let Some(mut owner) = uploads.owner_of(cog_id) else {
        return refused(StatusCode::NOT_FOUND, "no run of this runner has that prediction id");
    };
    let owner = match tokio::time::timeout(OWNER_WAIT, owner.wait_for(Option::is_some)).await {
        Ok(Ok(known)) => known.clone().expect("waited for"),
        _ => return refused(StatusCode::SERVICE_UNAVAILABLE, "the run's job was not taken in time"),
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .unwrap_or("application/octet-stream")
        .to_owned();
    let new = NewFile {
        account_id: owner.account_id,
        name: name.rsplit('/').next().unwrap_or(&name).to_owned(),
        content_type,
        metadata: String::new(),
        // A training's files expire unless a version it records names them as its weights.
        expires_at: owner.prediction_id.is_none().then(|| weights_pending_until(bson::DateTime::now())),
        prediction_id: owner.prediction_id,
    };
    let stream = body.into_data_stream().map_err(std::io::Error::other).boxed();
    // coglet declares each file's length: the store may then write it in one request.
    let length = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let body = match length {
        Some(length) => FileBody::sized(stream, length),
        None => FileBody::from(stream),
    };
    match uploads.files.create(new, body, uploads.max_bytes).await {
        Ok(record) => {
            let seconds = started.elapsed().as_secs_f64();
            uploads.metrics.uploaded(u64::try_from(record.size).unwrap_or(0), seconds);
            tracing::info!(file = %record.id, size = record.size, seconds, "output file uploaded");
            let location = uploads.links.file(&record.id, ApiSurface::Canonical);
            (StatusCode::CREATED, [(header::LOCATION, location)]).into_response()
        }
        Err(FilesError::Bytes(FileStoreError::TooLarge { max_bytes })) => refused(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("an output file may be at most {max_bytes} bytes (RUNNER_MAX_OUTPUT_FILE_BYTES)"),
        ),
        Err(FilesError::Bytes(FileStoreError::Body(e))) => {
            tracing::warn!(error = %e, "an output file's body was refused");
            refused(StatusCode::BAD_REQUEST, format!("the file's body was refused: {e}"))
        }
        Err(e) => {
            tracing::warn!(error = %e, "an output file was not stored");
            refused(StatusCode::SERVICE_UNAVAILABLE, format!("the file was not stored: {e}"))
        }
    }
}
