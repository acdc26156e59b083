//! Models served by Cog HTTP servers (coglet). What driving them takes, as measured against
//! coglet 0.23.1 (docs/outputs.md and docs/configuration.md say it for operators):
//!
//! - **Start**: a model is a server someone else runs (`owner/name=http://host:port`): wait
//!   for `GET /health-check` to say `READY` (or `BUSY`), then read the input schema from
//!   `GET /openapi.json` (`components.schemas.Input`, with the document's `components` kept
//!   beside it so `$ref`s resolve) and register it like any model. Or it is a Cog project the
//!   runner starts itself (`owner/name=dir:/path`, [`project`], [`instances`]): its schema is
//!   read from the project, it is registered under the project's digest, and its server is
//!   booted when a job needs it, stopped when idle and started again after a crash.
//! - **Run**, one of two ways ([`Transport`]):
//!   - a *streaming* model (`x-cog-streaming` in its schema): `POST /predictions` with
//!     `Prefer: respond-async` and a webhook to this runner's callback server ([`callbacks`]),
//!     which forwards each snapshot to the waiting run. Webhooks carry partial output and
//!     logs while it runs, and keep them on failure (the sync answer drops them).
//!   - any other model: a sync `POST /predictions` without a webhook, the connection held
//!     for the run; the answer carries output and logs. coglet 0.23.1 spends 10–14 ms on every
//!     prediction that has a webhook before it even answers the `POST` (measured here: a sync
//!     echo 2.5 ms without one, 16 ms with one, even to a closed port), more than the whole
//!     run of a fast model. `RUNNER_COG_SYNC=false` sends every model the webhook way, for
//!     long non-streaming models whose live logs matter more than those milliseconds.
//!
//!   Cog has no queue: a `409` means every slot is busy and is retried with a short backoff
//!   (back-pressure, not failure); a `503` means setup has not finished and is retried too.
//! - **Progress**: every webhook is a full snapshot; logs and output are replaced, and the
//!   executor stores them at most every 500 ms. A terminal snapshot ends the run; stale
//!   non-terminal snapshots that arrive after it are ignored.
//! - **Death**: a Cog server that dies sends no terminal webhook, so while waiting the run
//!   polls `/health-check` every 2 s and fails with `MODEL_SERVER_UNAVAILABLE` when the server
//!   refuses the connection, reports `UNHEALTHY` (a crashed worker never recovers), or leaves
//!   its checks unanswered for [`HEALTH_SILENCE_LIMIT`]. A check that times out alone is no
//!   death: coglet answers it through its worker, which does not answer while it uploads an
//!   output file (about 4 s of silence for 1 GiB here).
//! - **Cancel**: when the executor drops the run (cancel, deadline, shutdown), a
//!   `POST /predictions/{id}/cancel` is sent, and sent again while the server still knows
//!   the prediction (coglet loses a cancel that arrives right as a prediction starts).
//! - **Output**: the model's JSON value as it is ([`output`]): an iterator's items stay an
//!   array, an object its fields; its schema (`components.schemas.Output`) is registered
//!   with the version, so clients can tell an iterator from a list. Files in it, `data:`
//!   URIs at any depth, become stored files when the prediction ends; a server started with
//!   `--upload-url` streams each file to this runner instead ([`uploads`]), and the output
//!   names the stored file.
//! - **Trainers** ([`Mode::Train`], `RUNNER_COG_TRAIN`): a Cog server started with
//!   `--x-mode train` serves the same routes under `/trainings`, checks its input against
//!   `components.schemas.TrainingInput`, and answers `{"weights": <file>}`. A trainer is always
//!   driven by webhooks: a training is long, and its logs are worth seeing as it runs.
//!
//! Also here:
//! - [`instance`]: the model servers the runner starts itself.
//! - [`targets`]: how Cog models are declared to a runner.

pub mod callbacks;
pub mod instance;
pub mod instances;
pub mod output;
pub mod project;
pub mod targets;
pub mod uploads;

pub use targets::{CogSource, CogTarget, check_instances, parse_targets, parse_targets_with};

use std::{path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context;
use futures::{FutureExt, future::BoxFuture};
use reqwest::{Client, StatusCode};
use serde_json::{Map, Value, json};
use url::Url;

use self::{callbacks::Callbacks, instance::Launch, instances::Instances, project::CogProject};
use super::{Model, ModelDescriptor, ModelError, ModelOutput, Progress};

/// How often the runner says it still waits for a server someone else runs to be ready.
const READY_NOTICE: Duration = Duration::from_secs(30);
/// How often a running prediction's server is checked.
const HEALTH_INTERVAL: Duration = Duration::from_secs(2);
/// How long one health check may take.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a running prediction's server may leave every health check unanswered (timed
/// out, not refused) before the run fails: a hung server, told from a busy one.
const HEALTH_SILENCE_LIMIT: Duration = Duration::from_secs(30);
/// The longest a sync call is held open; the executor's prediction deadline (which drops the
/// run, closing the connection, which cancels it on the server) normally ends it first.
const SYNC_CALL_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// How a model's predictions are started and followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Async `POST` with a webhook: live logs and output, 10–14 ms more per prediction.
    Webhooks,
    /// Sync `POST`, the result in the answer.
    Sync,
}

impl Transport {
    /// Webhooks for a streaming model or when sync calls are off, else sync.
    fn for_schema(doc: &Value, sync_allowed: bool) -> Self {
        if sync_allowed && !streams(doc) { Self::Sync } else { Self::Webhooks }
    }
}

/// Whether a model's output comes in parts: its OpenAPI document marks `POST /predictions`
/// with `x-cog-streaming` (what coglet reads), or its output is an iterator.
fn streams(doc: &Value) -> bool {
    let marked = doc.pointer("/paths/~1predictions/post/x-cog-streaming").and_then(Value::as_bool);
    let iterator = doc.pointer("/components/schemas/Output/x-cog-array-type").and_then(Value::as_str);
    marked == Some(true) || iterator == Some("iterator")
}

/// What a Cog server does: predict, or train (`--x-mode train`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `POST /predictions`, input `Input`.
    Predict,
    /// `POST /trainings`, input `TrainingInput`.
    Train,
}

impl Mode {
    /// The route its jobs are posted to (and canceled under).
    fn path(self) -> &'static str {
        match self {
            Self::Predict => "predictions",
            Self::Train => "trainings",
        }
    }

    /// Its key in `cog.yaml`.
    fn yaml_key(self) -> &'static str {
        match self {
            Self::Predict => "predict",
            Self::Train => "train",
        }
    }

    /// The schema of its input in the server's OpenAPI document.
    fn input_pointer(self) -> &'static str {
        match self {
            Self::Predict => "/components/schemas/Input",
            Self::Train => "/components/schemas/TrainingInput",
        }
    }

    /// The schema of its output in the server's OpenAPI document.
    fn output_pointer(self) -> &'static str {
        match self {
            Self::Predict => "/components/schemas/Output",
            Self::Train => "/components/schemas/TrainingOutput",
        }
    }
}

/// What a runner's Cog models need from it.
pub struct CogContext {
    /// The client for every Cog server.
    pub http: Client,
    /// Its receiver of Cog webhooks and uploads.
    pub callbacks: Arc<Callbacks>,
    /// Whether non-streaming models are called synchronously.
    pub sync_allowed: bool,
    /// The Python with coglet, for the projects it starts (`RUNNER_COG_PYTHON`).
    pub python: PathBuf,
    /// Its metrics.
    pub metrics: crate::metrics::RunnerMetrics,
    /// Fired when the runner stops (its servers stop with it).
    pub shutdown: tokio_util::sync::CancellationToken,
}

/// The server of a Cog model: an address, or the instances the runner runs.
enum Server {
    External(Url),
    Supervised(Arc<Instances>),
}

/// A model served by a Cog server.
pub struct CogModel {
    descriptor: ModelDescriptor,
    server: Server,
    /// A project's digest: the version it is registered under.
    version: Option<String>,
    /// A project's `concurrency.max` times its `max_instances`: the runner's slots for it.
    slots: Option<usize>,
    http: Client,
    callbacks: Arc<Callbacks>,
    transport: Transport,
    mode: Mode,
}

impl CogModel {
    /// A model of `target`: a server someone else runs is waited for until it is ready and
    /// asked for its schema; a project is read (its schema, its digest) and its instance made,
    /// booted only when a job needs it.
    pub async fn connect(target: &CogTarget, context: &CogContext) -> anyhow::Result<Self> {
        Self::connect_as(target, context, context.sync_allowed, Mode::Predict).await
    }

    /// The instances the runner supervises for it, if it is a project (not a server someone
    /// else runs).
    pub fn instances(&self) -> Option<Arc<Instances>> {
        match &self.server {
            Server::Supervised(instances) => Some(instances.clone()),
            Server::External(_) => None,
        }
    }

    /// A trainer (a server in train mode) of `target`, as [`Self::connect`]; its descriptor's
    /// input schema is its `TrainingInput`.
    pub async fn connect_trainer(target: &CogTarget, context: &CogContext) -> anyhow::Result<Self> {
        Self::connect_as(target, context, false, Mode::Train).await
    }

    async fn connect_as(
        target: &CogTarget,
        context: &CogContext,
        sync_allowed: bool,
        mode: Mode,
    ) -> anyhow::Result<Self> {
        let http = &context.http;
        let (doc, server, version, slots) = match &target.source {
            CogSource::Server(base) => {
                let doc = served_openapi(http, base, &context.shutdown).await?;
                (doc, Server::External(base.clone()), None, None)
            }
            CogSource::Project { dir, settings } => {
                let project = CogProject::load(dir)?;
                let wanted = match mode {
                    Mode::Predict => project.predict.is_some(),
                    Mode::Train => project.train.is_some(),
                };
                anyhow::ensure!(wanted, "{}/cog.yaml names no `{}`", project.dir.display(), mode.yaml_key());
                let doc = project.openapi()?;
                let version = project.version.clone();
                let upload_url = Some(format!("{}/upload/", context.callbacks.public_url()));
                let launch = Launch {
                    model: target.model.clone(),
                    python: context.python.clone(),
                    project,
                    mode,
                    upload_url,
                    settings: settings.clone(),
                };
                let instances = Instances::new(launch, context.metrics.clone(), context.shutdown.clone());
                let slots = instances.slots();
                (doc, Server::Supervised(instances), Some(version), Some(slots))
            }
        };
        let mut input_schema = doc
            .pointer(mode.input_pointer())
            .cloned()
            .with_context(|| format!("the schema has no {}", mode.input_pointer()))?;
        if let (Some(schema), Some(components)) = (input_schema.as_object_mut(), doc.get("components")) {
            schema.insert("components".into(), components.clone());
        }
        let output_schema = doc.pointer(mode.output_pointer()).cloned();
        let transport = Transport::for_schema(&doc, sync_allowed);
        tracing::info!(model = %target.model, ?transport, ?mode, project = version.is_some(), "Cog model ready to serve");
        Ok(Self {
            descriptor: ModelDescriptor {
                model: target.model.clone(),
                capability: target.capability.clone(),
                input_schema,
                output_schema,
            },
            server,
            version,
            slots,
            http: http.clone(),
            callbacks: context.callbacks.clone(),
            transport,
            mode,
        })
    }

    /// The transport chosen for this model.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// `POST /predictions` (a trainer: `/trainings`) of prediction `id` (in the body, so a cancel can name it): async
    /// with `webhook`, else sync. Returns the successful answer (the accepted prediction, or
    /// the sync result), retrying while the server is busy or still setting up.
    async fn start(
        &self,
        base: &Url,
        id: &str,
        input: &Map<String, Value>,
        webhook: Option<&str>,
    ) -> Result<Value, ModelError> {
        let url = base.join(self.mode.path()).map_err(|e| unavailable(base, e))?;
        let body = match webhook {
            Some(webhook) => {
                json!({"id": id, "input": input, "webhook": webhook, "webhook_events_filter": ["start", "output", "logs", "completed"]})
            }
            None => json!({"id": id, "input": input}),
        };
        let mut backoff = Duration::from_millis(1);
        loop {
            let mut trace = reqwest::header::HeaderMap::new();
            common::trace_context::inject_http(&mut trace);
            let request = self.http.post(url.clone()).headers(trace).json(&body);
            let request = match webhook {
                Some(_) => request.header("prefer", "respond-async"),
                None => request.timeout(SYNC_CALL_TIMEOUT),
            };
            let response = request.send().await.map_err(|e| unavailable(base, e))?;
            match response.status() {
                s if s.is_success() => return response.json().await.map_err(|e| unavailable(base, e)),
                StatusCode::CONFLICT | StatusCode::SERVICE_UNAVAILABLE => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(200));
                }
                StatusCode::UNPROCESSABLE_ENTITY => {
                    let detail = response.text().await.unwrap_or_default();
                    return Err(ModelError {
                        code: "MODEL_INPUT_INVALID".into(),
                        message: format!("the model refused its input: {detail}"),
                    });
                }
                s => return Err(unavailable(base, format!("answered {s} to the prediction"))),
            }
        }
    }

    /// Ends only when the server is gone: see the module's **Death**.
    async fn watch_health(&self, base: &Url) -> ModelError {
        let mut silent_since: Option<tokio::time::Instant> = None;
        loop {
            tokio::time::sleep(HEALTH_INTERVAL).await;
            let asked = tokio::time::Instant::now();
            match health(&self.http, base).await {
                Ok(status) if matches!(status.as_str(), "READY" | "BUSY" | "STARTING") => silent_since = None,
                Ok(status) => return unavailable(base, format!("reports {status}")),
                Err(e) if e.is_connect() => return unavailable(base, e),
                Err(e) => {
                    let since = *silent_since.get_or_insert(asked);
                    if since.elapsed() >= HEALTH_SILENCE_LIMIT {
                        let silent = since.elapsed().as_secs();
                        return unavailable(base, format!("left its health checks unanswered for {silent} s: {e}"));
                    }
                    tracing::info!(server = %base, error = %e, "the Cog server left a health check unanswered (busy?); still waiting");
                }
            }
        }
    }
}

/// Waits for a server someone else runs to be ready, as long as its setup takes (Cog sets no
/// limit: weights may take many minutes; in a pod the runner starts beside it), saying every
/// [`READY_NOTICE`] that it still waits; then reads its OpenAPI document. A failed setup, or
/// the runner's shutdown, ends the wait with an error.
async fn served_openapi(
    http: &Client,
    base: &Url,
    shutdown: &tokio_util::sync::CancellationToken,
) -> anyhow::Result<Value> {
    let started = tokio::time::Instant::now();
    let mut notice = started + READY_NOTICE;
    loop {
        match health(http, base).await.as_deref() {
            Ok("READY" | "BUSY") => break,
            Ok("SETUP_FAILED") => anyhow::bail!("Cog server {base} failed its setup"),
            other => {
                if tokio::time::Instant::now() >= notice {
                    let waited = started.elapsed().as_secs();
                    tracing::info!(server = %base, state = ?other, waited, "still waiting for the Cog server to be ready");
                    notice += READY_NOTICE;
                }
                tokio::select! {
                    () = shutdown.cancelled() => anyhow::bail!("stopped while waiting for Cog server {base}"),
                    () = tokio::time::sleep(Duration::from_millis(250)) => {}
                }
            }
        }
    }
    let openapi = http.get(base.join("openapi.json")?).timeout(HEALTH_TIMEOUT * 5);
    Ok(openapi.send().await?.error_for_status()?.json().await?)
}

fn unavailable(base: &Url, e: impl std::fmt::Display) -> ModelError {
    ModelError { code: "MODEL_SERVER_UNAVAILABLE".into(), message: format!("the Cog server at {base} failed: {e}") }
}

async fn health(http: &Client, base: &Url) -> Result<String, reqwest::Error> {
    let url = base.join("health-check").expect("a relative path joins");
    let v: Value = http.get(url).timeout(HEALTH_TIMEOUT).send().await?.json().await?;
    Ok(v["status"].as_str().unwrap_or("UNKNOWN").to_owned())
}

/// When a dropped run's cancel is sent, counted from the drop. coglet 0.23.1 answers `200` to
/// a cancel that reaches it within about a millisecond of the prediction's start, and then
/// runs the prediction to its end (measured here: 16 of 24 sync calls dropped 0–0.5 ms after
/// their request kept the server busy; a second cancel 100 ms later stopped every one). So the
/// cancel is sent again while the server still knows the prediction.
const CANCEL_SCHEDULE: [Duration; 3] = [Duration::ZERO, Duration::from_millis(100), Duration::from_secs(1)];

/// Cancels the Cog prediction if the run is dropped before it ended.
struct CancelOnDrop {
    http: Client,
    url: Option<Url>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(url) = self.url.take() {
            tokio::spawn(cancel_until_gone(self.http.clone(), url));
        }
    }
}

/// Sends the cancel on [`CANCEL_SCHEDULE`] until the server answers that it no longer knows
/// the prediction (`404`) after the first attempt (a first `404` may mean the request has not
/// been read yet), or cannot be reached.
async fn cancel_until_gone(http: Client, url: Url) {
    let start = tokio::time::Instant::now();
    for (attempt, after) in CANCEL_SCHEDULE.into_iter().enumerate() {
        tokio::time::sleep_until(start + after).await;
        match http.post(url.clone()).timeout(Duration::from_secs(5)).send().await {
            Ok(answer) if answer.status() == StatusCode::NOT_FOUND && attempt > 0 => return,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "cancel not delivered to the Cog server");
                return;
            }
        }
    }
}

impl Model for CogModel {
    fn file_access(&self) -> crate::models::file_inputs::FileAccess {
        crate::models::file_inputs::FileAccess::Url
    }

    fn descriptor(&self) -> &ModelDescriptor {
        &self.descriptor
    }

    fn run<'a>(
        &'a self,
        input: Map<String, Value>,
        progress: &'a Progress,
    ) -> BoxFuture<'a, Result<ModelOutput, ModelError>> {
        async move {
            let (base, ready) = match &self.server {
                Server::External(base) => (base.clone(), None),
                Server::Supervised(instances) => {
                    let ready = instances.ready().await?;
                    (ready.url.clone(), Some(ready))
                }
            };
            let ran = match self.transport {
                Transport::Webhooks => self.run_with_webhooks(&base, input, progress).await,
                Transport::Sync => self.run_sync(&base, input, progress).await,
            };
            match (ran, ready) {
                // A server the runner runs that went away mid-run crashed.
                (Err(e), Some(ready)) if e.code == "MODEL_SERVER_UNAVAILABLE" => {
                    Err(ready.instance.crashed(&e.message))
                }
                // A failure from a server whose worker died is a crash, not the model's error.
                (Err(e), Some(ready)) if e.code == "MODEL_ERROR" && ready.instance.broke(&base, &e.message).await => {
                    Err(ready.instance.crashed(&e.message))
                }
                (ran, _) => ran,
            }
        }
        .boxed()
    }

    fn prepare(&self) -> Option<BoxFuture<'_, Result<(), ModelError>>> {
        match &self.server {
            Server::Supervised(instances) if !instances.has_room() => {
                Some(instances.ready().map(|r| r.map(drop)).boxed())
            }
            _ => None,
        }
    }

    fn boot_log(&self) -> Option<String> {
        match &self.server {
            Server::Supervised(instances) => Some(instances.boot_log()),
            Server::External(_) => None,
        }
    }

    fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    fn slots(&self) -> Option<usize> {
        self.slots
    }
}

impl CogModel {
    fn returns_array(&self) -> bool {
        output::returns_array(self.descriptor.output_schema.as_ref())
    }

    fn cancel_guard(&self, base: &Url, id: &str) -> CancelOnDrop {
        CancelOnDrop { http: self.http.clone(), url: base.join(&format!("{}/{id}/cancel", self.mode.path())).ok() }
    }

    async fn run_with_webhooks(
        &self,
        base: &Url,
        input: Map<String, Value>,
        progress: &Progress,
    ) -> Result<ModelOutput, ModelError> {
        let (webhook, mut snapshots, _registration) = self.callbacks.register();
        let id = webhook.rsplit('/').next().unwrap_or_default().to_owned();
        let _uploads = self.callbacks.uploads.register(&id, progress.owner());
        // Armed before the request: a run dropped while its request is on the way (a cancel
        // right after the job was taken) may still have started the prediction there, and a
        // request that failed may have too (cancels of a prediction the server never had are
        // answered 404 and cost nothing).
        let mut guard = self.cancel_guard(base, &id);
        self.start(base, &id, &input, Some(&webhook)).await?;
        let died = self.watch_health(base);
        tokio::pin!(died);
        loop {
            let snapshot = tokio::select! {
                s = snapshots.recv() => s.ok_or_else(|| unavailable(base, "the callback channel closed"))?,
                e = &mut died => return Err(e),
            };
            if let Some(ended) = settle(&snapshot, progress, self.returns_array()) {
                guard.url = None;
                return ended;
            }
        }
    }

    /// One held request; the health watch still runs beside it, so a server that hangs
    /// rather than closing the connection fails the run too.
    async fn run_sync(
        &self,
        base: &Url,
        input: Map<String, Value>,
        progress: &Progress,
    ) -> Result<ModelOutput, ModelError> {
        let id = format!("ps{}", common::domain::PredictionId::generate());
        let _uploads = self.callbacks.uploads.register(&id, progress.owner());
        let mut guard = self.cancel_guard(base, &id);
        let answer = tokio::select! {
            answer = self.start(base, &id, &input, None) => answer?,
            e = self.watch_health(base) => return Err(e),
        };
        guard.url = None;
        settle(&answer, progress, self.returns_array())
            .unwrap_or_else(|| Err(unavailable(base, "answered a sync prediction without a terminal status")))
    }
}

/// Applies a snapshot's logs and output to the progress; a terminal snapshot gives the run's
/// result. `returns_array`: the model's output schema is an array (see [`output::partial`]).
fn settle(snapshot: &Value, progress: &Progress, returns_array: bool) -> Option<Result<ModelOutput, ModelError>> {
    if let Some(logs) = snapshot.get("logs").and_then(Value::as_str) {
        progress.set_logs(logs);
    }
    let status = snapshot.get("status").and_then(Value::as_str)?;
    if let Some(output) = snapshot.get("output").filter(|o| !o.is_null())
        && status != "succeeded"
    {
        progress.set_output(output::partial(output, returns_array));
    }
    // What the model recorded of its run (`record_metric`), without Cog's own timing, which
    // the service keeps itself.
    if let Some(Value::Object(metrics)) = snapshot.get("metrics") {
        let recorded: serde_json::Map<String, Value> =
            metrics.iter().filter(|(k, _)| k.as_str() != "predict_time").map(|(k, v)| (k.clone(), v.clone())).collect();
        if !recorded.is_empty() {
            progress.set_model_metrics(recorded);
        }
    }
    match status {
        "succeeded" => Some(Ok(output::convert(snapshot.get("output").cloned().unwrap_or(Value::Null)))),
        "failed" => {
            let message = snapshot.get("error").and_then(Value::as_str).unwrap_or("the model failed");
            Some(Err(ModelError::model(message)))
        }
        "canceled" => Some(Err(ModelError {
            code: "MODEL_CANCELED".into(),
            message: "the Cog server canceled the prediction".into(),
        })),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_models_get_webhooks_and_others_a_sync_call() {
        let streaming = json!({"paths": {"/predictions": {"post": {"x-cog-streaming": true}}}});
        let iterator =
            json!({"components": {"schemas": {"Output": {"type": "array", "x-cog-array-type": "iterator"}}}});
        let plain = json!({"components": {"schemas": {"Output": {"type": "string"}}}});
        assert_eq!(Transport::for_schema(&streaming, true), Transport::Webhooks);
        assert_eq!(Transport::for_schema(&iterator, true), Transport::Webhooks);
        assert_eq!(Transport::for_schema(&plain, true), Transport::Sync);
        assert_eq!(Transport::for_schema(&plain, false), Transport::Webhooks, "RUNNER_COG_SYNC=false");
    }
}
