//! A prediction as clients see it: [`PredictionView`] (`GET /v1/predictions/{id}`, lists,
//! webhook payloads and the status events that carry them), built from the stored
//! [`Prediction`] by [`Prediction::view`], rendered the same way by the api (`GET`) and the
//! runner (the snapshot in status events, which the notifier delivers as the webhook payload).
//!
//! A view is rendered for one [`ApiSurface`]: the canonical one shows `error` as
//! `{code, message}`, the Replicate-compatible one as the message string; each links inside its
//! own root (see [`crate::links`]). Status events carry the view of the surface that created
//! the prediction, so its webhooks have the shape its creator reads.

use bson::DateTime as BsonDateTime;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{
    domain::{
        ApiSurface, JobKind, Metrics, ModelRef, Prediction, PredictionError, PredictionStatus, Priority,
        training::TrainingOutput,
    },
    links::{Links, PredictionUrls},
};

/// `error` as a view shows it: `{code, message}` on the canonical surface, the message alone
/// on the Replicate-compatible one.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ErrorView {
    /// The canonical shape.
    Detailed(PredictionError),
    /// Replicate's shape: the message.
    Message(String),
}

impl PredictionView {
    /// A succeeded training's output, `{version, weights}` (`None` for a prediction, or a
    /// training that has not succeeded).
    pub fn training_output(&self) -> Option<TrainingOutput> {
        self.output.clone().and_then(|o| serde_json::from_value(o).ok())
    }
}

impl ErrorView {
    /// What went wrong, for people.
    pub fn message(&self) -> &str {
        match self {
            Self::Detailed(e) => &e.message,
            Self::Message(m) => m,
        }
    }
}

/// A prediction as clients see it (`GET /v1/predictions/{id}` and webhook payloads).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictionView {
    /// The prediction id.
    pub id: String,
    /// `<owner>/<model>`.
    pub model: String,
    /// The model version that ran it.
    pub version: String,
    /// The model's declared kind.
    pub capability: String,
    /// The input as submitted.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub input: Value,
    /// Log text.
    pub logs: String,
    /// The output, `null` until known. On `/v1` a string: text, a file's URL, or compact JSON
    /// text with files as URLs; on `/replicate/v1` the model's JSON value (an iterator's items
    /// as an array, an object's fields), files as URLs. A training's is `{version, weights}`.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Value>))]
    pub output: Option<Value>,
    /// Whether retention removed its data.
    pub data_removed: bool,
    /// Once failed: `{code, message}` (canonical), the message (Replicate-compatible).
    pub error: Option<ErrorView>,
    /// Always `api` today.
    pub source: String,
    /// The status: one of the interface's five; on `/replicate/v1` also `aborted` (canceled
    /// by its client's deadline before it started).
    pub status: StatusView,
    /// Timings in seconds, `null` until terminal; on `/replicate/v1` also the cost.
    pub metrics: Option<MetricsView>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Start of processing.
    pub started_at: Option<DateTime<Utc>>,
    /// Completion time.
    pub completed_at: Option<DateTime<Utc>>,
    /// Links to the prediction.
    pub urls: PredictionUrls,
    /// Where it stands in the queue while it waits (`starting`, read through the API);
    /// `null` otherwise.
    #[serde(default)]
    pub queue: Option<QueuePlace>,
    /// The deployment it was created through (`owner/name`), `null` if none.
    #[serde(default)]
    pub deployment: Option<String>,
    /// How urgent it is: `high`, `normal` or `low`.
    #[serde(default)]
    pub priority: Priority,
    /// A training's destination model (`owner/name`); absent on a prediction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub destination: Option<String>,
}

/// A job's status as a client sees it: the stored status, but `aborted` on `/replicate/v1`
/// for a job its client's deadline canceled before it started, as Replicate shows it
/// ([`crate::domain::deadline`]). `/v1` keeps the interface's five (`canceled`, its
/// `error.code` saying why).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StatusView {
    /// Created, waiting for a runner.
    Starting,
    /// A runner is running the model.
    Processing,
    /// Finished with an output.
    Succeeded,
    /// Finished with an error.
    Failed,
    /// Stopped on request, or at its client's deadline.
    Canceled,
    /// `/replicate/v1` only: its client's deadline passed before it started; it never ran.
    Aborted,
}

impl StatusView {
    /// `p`'s status as `surface` shows it.
    pub fn of(p: &Prediction, surface: ApiSurface) -> Self {
        match p.status {
            _ if surface == ApiSurface::Replicate && p.is_aborted() => Self::Aborted,
            status => status.into(),
        }
    }

    /// Whether the job has ended.
    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::Starting | Self::Processing)
    }
}

impl From<PredictionStatus> for StatusView {
    fn from(status: PredictionStatus) -> Self {
        match status {
            PredictionStatus::Starting => Self::Starting,
            PredictionStatus::Processing => Self::Processing,
            PredictionStatus::Succeeded => Self::Succeeded,
            PredictionStatus::Failed => Self::Failed,
            PredictionStatus::Canceled => Self::Canceled,
        }
    }
}

/// A job's metrics as clients see them: its timings in seconds, and on the
/// Replicate-compatible surface its cost (the canonical object keeps the interface's fields).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricsView {
    /// Seconds the model ran (0 for a job that never started).
    pub predict_time: f64,
    /// Seconds from creation to completion.
    pub total_time: f64,
    /// `/replicate/v1` only: what it cost, a decimal string of US dollars (`predict_time` × the
    /// price of its hardware pool when it started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<String>,
    /// `/replicate/v1` only: the numbers the model recorded of its run (Cog's
    /// `record_metric`, e.g. a token count), each under its own name.
    #[serde(flatten, default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub recorded: serde_json::Map<String, Value>,
}

impl MetricsView {
    /// `metrics` as `surface` shows them.
    pub fn of(metrics: Metrics, surface: ApiSurface) -> Self {
        let cost = (surface == ApiSurface::Replicate).then(|| metrics.cost.dollars());
        Self { predict_time: metrics.predict_time, total_time: metrics.total_time, cost, recorded: Default::default() }
    }

    /// With the numbers the model recorded (`/replicate/v1` only; the canonical object keeps
    /// the interface's fields). They never take the place of the service's own.
    pub fn with_recorded(mut self, recorded: Option<&serde_json::Map<String, Value>>, surface: ApiSurface) -> Self {
        if surface == ApiSurface::Replicate
            && let Some(recorded) = recorded
        {
            let own = ["predict_time", "total_time", "cost"];
            self.recorded = recorded
                .iter()
                .filter(|(k, _)| !own.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
        }
        self
    }
}

/// Where a waiting prediction stands in its model's queue.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueuePlace {
    /// 1 + the jobs that will start before it under the scheduler's rules: 1 means it starts
    /// on the next free slot of its model.
    pub position: u64,
    /// When it should start, from the model's recent run times and the slots serving it;
    /// `null` while neither is known (no run finished lately, or nothing running).
    pub estimated_start_at: Option<DateTime<Utc>>,
}

impl Prediction {
    /// The client view on `surface`, with links from `links`.
    pub fn view(&self, links: &Links, surface: ApiSurface) -> PredictionView {
        let error = self.error.clone().map(|e| match surface {
            ApiSurface::Canonical => ErrorView::Detailed(e),
            ApiSurface::Replicate => ErrorView::Message(e.message),
        });
        let (model, version) = match &self.trained_version {
            Some(trained) => (trained.model.to_string(), trained.version.clone()),
            None => (self.model.to_string(), self.version.clone()),
        };
        PredictionView {
            id: self.id.to_string(),
            model,
            version,
            capability: self.capability.clone(),
            input: self.input.clone(),
            logs: self.logs.clone(),
            output: self.output.as_ref().map(|o| self.output_view(o, links, surface)),
            data_removed: self.data_removed,
            error,
            source: self.source.clone(),
            status: StatusView::of(self, surface),
            metrics: self
                .metrics
                .map(|m| MetricsView::of(m, surface).with_recorded(self.model_metrics.as_ref(), surface)),
            created_at: self.created_at.to_chrono(),
            started_at: self.started_at.map(BsonDateTime::to_chrono),
            completed_at: self.completed_at.map(BsonDateTime::to_chrono),
            urls: match self.kind {
                JobKind::Prediction => links.prediction(&self.id, surface),
                JobKind::Training => links.training(&self.id, surface),
            },
            queue: None,
            deployment: self.deployment.clone(),
            priority: self.priority,
            destination: self.destination.as_ref().map(ModelRef::to_string),
        }
    }

    /// A stored output as `surface` shows it (see [`super::output`]); a training's
    /// `{version, weights}` is an object on both surfaces, its weights as a link.
    fn output_view(&self, output: &Value, links: &Links, surface: ApiSurface) -> Value {
        if self.is_training() {
            let fields = match output {
                Value::String(text) => serde_json::from_str::<Value>(text).ok(),
                other => Some(other.clone()),
            };
            if let Some(fields @ Value::Object(_)) = fields {
                return super::output::linked(&fields, links, surface, &self.account_id);
            }
        }
        super::output::render(output, links, surface, &self.account_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::prediction::tests::sample;
    use serde_json::json;

    fn links() -> Links {
        Links::for_tests("http://h")
    }

    #[test]
    fn a_new_prediction_renders_every_field_with_nulls_for_the_unknown() {
        let p = sample();
        let v = serde_json::to_value(p.view(&links(), ApiSurface::Canonical)).expect("serializes");
        for field in ["output", "error", "metrics", "started_at", "completed_at"] {
            assert_eq!(v[field], Value::Null, "{field}");
        }
        assert_eq!(v["status"], "starting");
        assert_eq!(v["source"], "api");
        assert_eq!(v["logs"], "");
        assert_eq!(v["input"], json!({"prompt": "hi", "extra": 1}), "input as submitted");
        assert_eq!(v["urls"]["get"], format!("http://h/v1/predictions/{}", p.id));
        assert_eq!(v["urls"]["cancel"], format!("http://h/v1/predictions/{}/cancel", p.id));
        assert_eq!(v["urls"]["web"], format!("http://h/predictions/{}", p.id));
        assert!(v.get("model_input").is_none(), "internal fields stay internal");
        assert!(v.get("account_id").is_none());
        assert!(v.get("surface").is_none());
    }

    #[test]
    fn the_error_is_an_object_on_v1_and_the_message_on_the_replicate_surface() {
        let mut p = sample();
        p.error = Some(PredictionError { code: "MODEL_ERROR".into(), message: "boom".into() });
        let l = links();
        let v1 = serde_json::to_value(p.view(&l, ApiSurface::Canonical)).expect("serializes");
        assert_eq!(v1["error"], json!({"code": "MODEL_ERROR", "message": "boom"}));
        let replicate = p.view(&l, ApiSurface::Replicate);
        assert_eq!(serde_json::to_value(&replicate).expect("serializes")["error"], json!("boom"));
        let text = serde_json::to_vec(&replicate).expect("serializes");
        let back: PredictionView = serde_json::from_slice(&text).expect("either shape decodes");
        assert_eq!(back.error.as_ref().map(ErrorView::message), Some("boom"));
    }
}
