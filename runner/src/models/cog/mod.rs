//! Models served by Cog HTTP servers (coglet). Facts about driving them, measured on this
//! machine, are in `shared/notes/cog-http.md`; this module follows them:
//!
//! - **Start**: wait for `GET /health-check` to say `READY` (or `BUSY`), then read the input
//!   schema from `GET /openapi.json` (`components.schemas.Input`, with the document's
//!   `components` kept beside it so `$ref`s resolve) and register it like any model.
//! - **Run**: `PUT /predictions/{id}` with `Prefer: respond-async` and a webhook to this
//!   runner's callback server ([`callbacks`]), which forwards each snapshot to the waiting run.
//!   Cog has no queue: a `409` means every slot is busy and is retried with a short backoff
//!   (back-pressure, not failure); a `503` means setup has not finished and is retried too.
//!   Async with webhooks keeps logs and partial output on failure (the sync answer drops
//!   them) and does not tie the prediction to one HTTP connection.
//! - **Progress**: every webhook is a full snapshot; logs and output are replaced, and the
//!   executor stores them at most every 500 ms. A terminal snapshot ends the run; stale
//!   non-terminal snapshots that arrive after it are ignored.
//! - **Death**: a Cog server that dies sends no terminal webhook, so while waiting the run
//!   polls `/health-check` every 2 s and fails with `MODEL_SERVER_UNAVAILABLE` when the server
//!   stops answering or reports `UNHEALTHY` (a crashed worker never recovers).
//! - **Cancel**: when the executor drops the run (cancel, deadline, shutdown), a
//!   `POST /predictions/{id}/cancel` is sent.
//! - **Files**: `data:` URI outputs become files in GridFS ([`output`]).

pub mod callbacks;
pub mod output;

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use common::domain::ModelRef;
use futures::{FutureExt, future::BoxFuture};
use reqwest::{Client, StatusCode};
use serde_json::{Map, Value, json};
use url::Url;

use self::callbacks::Callbacks;
use super::{Model, ModelDescriptor, ModelError, ModelOutput, Progress};

/// How long a Cog server may take to become ready at start.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// How often a running prediction's server is checked.
const HEALTH_INTERVAL: Duration = Duration::from_secs(2);

/// One configured Cog model: `owner/name=[capability@]http://host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CogTarget {
    /// The address it is served under.
    pub model: ModelRef,
    /// Its declared kind (default `text-generation`).
    pub capability: String,
    /// The Cog server's base URL.
    pub url: Url,
}

/// Parses `acme/echo=http://127.0.0.1:5000,acme/up=image-to-image@http://...`.
pub fn parse_targets(text: &str) -> Result<Vec<CogTarget>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| {
            let (model, rest) = item.split_once('=').ok_or_else(|| format!("{item:?} is not owner/name=URL"))?;
            let model: ModelRef = model.trim().parse().map_err(|e| format!("{model:?}: {e}"))?;
            let (capability, url) = match rest.split_once('@') {
                Some((c, u)) if !c.contains("://") => (c.trim().to_owned(), u.trim()),
                _ => ("text-generation".to_owned(), rest.trim()),
            };
            let url = Url::parse(url).map_err(|e| format!("{url:?}: {e}"))?;
            Ok(CogTarget { model, capability, url })
        })
        .collect()
}

/// A model served by a Cog server.
pub struct CogModel {
    descriptor: ModelDescriptor,
    base: Url,
    http: Client,
    callbacks: Arc<Callbacks>,
}

impl CogModel {
    /// Waits for the server to be ready and reads its input schema.
    pub async fn connect(target: &CogTarget, http: Client, callbacks: Arc<Callbacks>) -> anyhow::Result<Self> {
        let base = target.url.clone();
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        loop {
            match health(&http, &base).await.as_deref() {
                Ok("READY" | "BUSY") => break,
                Ok("SETUP_FAILED") => anyhow::bail!("Cog server {base} failed its setup"),
                other => {
                    anyhow::ensure!(tokio::time::Instant::now() < deadline, "Cog server {base} not ready: {other:?}");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        }
        let doc: Value = http.get(base.join("openapi.json")?).send().await?.error_for_status()?.json().await?;
        let mut input_schema = doc.pointer("/components/schemas/Input").cloned().context("the schema has no Input")?;
        if let (Some(schema), Some(components)) = (input_schema.as_object_mut(), doc.get("components")) {
            schema.insert("components".into(), components.clone());
        }
        tracing::info!(model = %target.model, server = %base, "Cog model ready");
        Ok(Self {
            descriptor: ModelDescriptor {
                model: target.model.clone(),
                capability: target.capability.clone(),
                input_schema,
            },
            base,
            http,
            callbacks,
        })
    }

    async fn start(&self, id: &str, input: &Map<String, Value>, webhook: &str) -> Result<(), ModelError> {
        let url = self.base.join(&format!("predictions/{id}")).map_err(|e| unavailable(&self.base, e))?;
        let body = json!({"id": id, "input": input, "webhook": webhook, "webhook_events_filter": ["start", "output", "logs", "completed"]});
        let mut backoff = Duration::from_millis(1);
        loop {
            let mut trace = reqwest::header::HeaderMap::new();
            common::trace_context::inject_http(&mut trace);
            let response = self
                .http
                .put(url.clone())
                .headers(trace)
                .header("prefer", "respond-async")
                .json(&body)
                .send()
                .await
                .map_err(|e| unavailable(&self.base, e))?;
            match response.status() {
                s if s.is_success() => return Ok(()),
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
                s => return Err(unavailable(&self.base, format!("answered {s} to the prediction"))),
            }
        }
    }

    async fn watch_health(&self) -> ModelError {
        loop {
            tokio::time::sleep(HEALTH_INTERVAL).await;
            match health(&self.http, &self.base).await {
                Ok(status) if matches!(status.as_str(), "READY" | "BUSY" | "STARTING") => {}
                Ok(status) => return unavailable(&self.base, format!("reports {status}")),
                Err(e) => return unavailable(&self.base, e),
            }
        }
    }
}

fn unavailable(base: &Url, e: impl std::fmt::Display) -> ModelError {
    ModelError { code: "MODEL_SERVER_UNAVAILABLE".into(), message: format!("the Cog server at {base} failed: {e}") }
}

async fn health(http: &Client, base: &Url) -> Result<String, reqwest::Error> {
    let url = base.join("health-check").expect("a relative path joins");
    let v: Value = http.get(url).timeout(Duration::from_secs(2)).send().await?.json().await?;
    Ok(v["status"].as_str().unwrap_or("UNKNOWN").to_owned())
}

/// Cancels the Cog prediction if the run is dropped before it ended.
struct CancelOnDrop {
    http: Client,
    url: Option<Url>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(url) = self.url.take() {
            let http = self.http.clone();
            tokio::spawn(async move {
                if let Err(e) = http.post(url).timeout(Duration::from_secs(5)).send().await {
                    tracing::warn!(error = %e, "cancel not delivered to the Cog server");
                }
            });
        }
    }
}

impl Model for CogModel {
    fn descriptor(&self) -> &ModelDescriptor {
        &self.descriptor
    }

    fn run<'a>(
        &'a self,
        input: Map<String, Value>,
        progress: &'a Progress,
    ) -> BoxFuture<'a, Result<ModelOutput, ModelError>> {
        async move {
            let (webhook, mut snapshots, _registration) = self.callbacks.register();
            let id = webhook.rsplit('/').next().unwrap_or_default().to_owned();
            self.start(&id, &input, &webhook).await?;
            let mut guard =
                CancelOnDrop { http: self.http.clone(), url: self.base.join(&format!("predictions/{id}/cancel")).ok() };
            let died = self.watch_health();
            tokio::pin!(died);
            loop {
                let snapshot = tokio::select! {
                    s = snapshots.recv() => s.ok_or_else(|| unavailable(&self.base, "the callback channel closed"))?,
                    e = &mut died => return Err(e),
                };
                if let Some(logs) = snapshot.get("logs").and_then(Value::as_str) {
                    progress.set_logs(logs);
                }
                if let Some(text) = snapshot.get("output").and_then(output::progress_text) {
                    progress.set_output(&text);
                }
                match snapshot.get("status").and_then(Value::as_str) {
                    Some("succeeded") => {
                        guard.url = None;
                        return output::convert(snapshot.get("output").cloned().unwrap_or(Value::Null));
                    }
                    Some("failed") => {
                        guard.url = None;
                        let message = snapshot.get("error").and_then(Value::as_str).unwrap_or("the model failed");
                        return Err(ModelError::model(message));
                    }
                    Some("canceled") => {
                        guard.url = None;
                        return Err(ModelError {
                            code: "MODEL_CANCELED".into(),
                            message: "the Cog server canceled the prediction".into(),
                        });
                    }
                    _ => {}
                }
            }
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_with_an_optional_capability() {
        let t = parse_targets("acme/echo=http://127.0.0.1:5000, acme/up=image-to-image@http://h:1/").expect("valid");
        assert_eq!(t[0].model.to_string(), "acme/echo");
        assert_eq!(t[0].capability, "text-generation");
        assert_eq!(t[1].capability, "image-to-image");
        assert_eq!(t[1].url.as_str(), "http://h:1/");
        assert!(parse_targets("acme/echo").is_err());
        assert!(parse_targets("Acme/echo=http://h").is_err());
    }
}
