//! The prediction: [`Prediction`] is the record as stored in MongoDB (written by the api at
//! creation and by the runner afterwards), [`PredictionView`] the object clients see, rendered
//! the same way by the api (`GET`) and the runner (the snapshot in status events, which the
//! notifier delivers as the webhook payload).
//!
//! A view is rendered for one [`ApiSurface`]: the canonical one shows `error` as
//! `{code, message}`, the Replicate-compatible one as the message string; each links inside its
//! own root (see [`crate::links`]). Status events carry the view of the surface that created
//! the prediction, so its webhooks have the shape its creator reads.

use bson::DateTime as BsonDateTime;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    AccountId, ApiSurface, FileId, JobKind, ModelRef, PredictionId, PredictionStatus, TrainedVersionRef, WebhookEvent,
    WebhookUrl,
};
use crate::links::{Links, PredictionUrls};

/// The origin recorded for predictions made through the HTTP API.
pub const SOURCE_API: &str = "api";

/// Why a prediction failed: a machine-readable code and a message for people.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictionError {
    /// Machine-readable, e.g. `MODEL_ERROR`, `PREDICTION_TIMEOUT`.
    pub code: String,
    /// What went wrong.
    pub message: String,
}

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

impl ErrorView {
    /// What went wrong, for people.
    pub fn message(&self) -> &str {
        match self {
            Self::Detailed(e) => &e.message,
            Self::Message(m) => m,
        }
    }
}

/// Timings in seconds: `predict_time` = completed - started, `total_time` = completed - created.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Seconds the model ran (0 for a prediction that never started).
    pub predict_time: f64,
    /// Seconds from creation to completion.
    pub total_time: f64,
}

impl Metrics {
    /// The metrics of a prediction that ended at `completed_at`.
    pub fn at_completion(
        created_at: BsonDateTime,
        started_at: Option<BsonDateTime>,
        completed_at: BsonDateTime,
    ) -> Self {
        let secs =
            |from: BsonDateTime| (completed_at.timestamp_millis() - from.timestamp_millis()).max(0) as f64 / 1000.0;
        Self { predict_time: started_at.map_or(0.0, secs), total_time: secs(created_at) }
    }
}

/// A prediction as stored (collection `predictions`, `_id` = the prediction id).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// The prediction id.
    #[serde(rename = "_id")]
    pub id: PredictionId,
    /// The account that owns it.
    pub account_id: AccountId,
    /// The model it runs on.
    pub model: ModelRef,
    /// The registered model version (a digest of its registration).
    pub version: String,
    /// The model's declared kind, e.g. `text-generation`.
    pub capability: String,
    /// Where it came from (`api`).
    pub source: String,
    /// The input exactly as submitted.
    pub input: Value,
    /// The input the model receives: known parameters only, with defaults applied.
    pub model_input: Value,
    /// The current status.
    pub status: PredictionStatus,
    /// Log text so far.
    pub logs: String,
    /// Output so far (text, a file URL, or compact JSON).
    pub output: Option<String>,
    /// Why it failed, once failed.
    pub error: Option<PredictionError>,
    /// Timings, once terminal.
    pub metrics: Option<Metrics>,
    /// When it was created.
    pub created_at: BsonDateTime,
    /// When a runner began processing it.
    pub started_at: Option<BsonDateTime>,
    /// When it reached a terminal status.
    pub completed_at: Option<BsonDateTime>,
    /// Where its webhooks go.
    pub webhook: Option<WebhookUrl>,
    /// Which events are delivered (absent = all).
    pub webhook_events_filter: Option<Vec<WebhookEvent>>,
    /// Whether retention removed its data.
    pub data_removed: bool,
    /// Grows by one with every change; the `webhook-sequence` of deliveries.
    pub seq: i64,
    /// When the prediction fails with `PREDICTION_TIMEOUT` if it has not ended.
    #[serde(default)]
    pub deadline_at: Option<BsonDateTime>,
    /// The stream sequence of the job message whose runner is running it: only a redelivery
    /// of that message may take the prediction over.
    #[serde(default)]
    pub job_seq: Option<i64>,
    /// The API surface that created it: the shape of its webhooks.
    #[serde(default)]
    pub surface: ApiSurface,
    /// Files of this service its input names: kept at least until it ends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_files: Vec<FileId>,
    /// The deployment it was created through (`owner/name`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
    /// The hardware pool whose runners may run it (a deployment's); any pool when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<super::Pool>,
    /// Its ticket in its queue lane (see [`crate::store::queue_lanes`]): where it stands among
    /// the lane's waiting predictions. Absent on predictions stored before lanes had tickets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_ticket: Option<i64>,
    /// The API key that created it (its id), for usage by key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_id: Option<super::ApiKeyId>,
    /// How urgent it is (`normal` for predictions stored before priorities).
    #[serde(default)]
    pub priority: super::Priority,
    /// Where its usage stands, once it has ended (see [`crate::usage`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageMark>,
    /// A prediction, or a training (see [`super::training`]); stored only for a training.
    #[serde(default, skip_serializing_if = "JobKind::is_prediction")]
    pub kind: JobKind,
    /// A training's destination model, whose new version it records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<ModelRef>,
    /// The trained version a prediction was asked of (`model` and `version` are then the
    /// version it was trained from, which runs it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trained_version: Option<TrainedVersionRef>,
}

/// Where an ended prediction's usage stands: written `pending` with its final state, then
/// claimed by one writer under its next number, then counted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageMark {
    /// Not counted in the usage totals yet.
    pub pending: bool,
    /// The writer (a process's ledger) that counts it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writer: Option<String>,
    /// Its number among the writer's additions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<i64>,
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
    /// The output (text, file URL or compact JSON), `null` until known; a training's is
    /// `{version, weights}`.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub output: Option<Value>,
    /// Whether retention removed its data.
    pub data_removed: bool,
    /// Once failed: `{code, message}` (canonical), the message (Replicate-compatible).
    pub error: Option<ErrorView>,
    /// Always `api` today.
    pub source: String,
    /// The status.
    pub status: PredictionStatus,
    /// Timings in seconds, `null` until terminal.
    pub metrics: Option<Metrics>,
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
    pub priority: super::Priority,
    /// A training's destination model (`owner/name`); absent on a prediction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub destination: Option<String>,
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
    /// A new `starting` prediction.
    pub fn new_starting(new: NewPrediction) -> Self {
        let NewPrediction {
            account_id,
            model,
            version,
            capability,
            input,
            model_input,
            webhook,
            webhook_events_filter,
            surface,
        } = new;
        let created_at = BsonDateTime::now();
        Self {
            id: PredictionId::generate(),
            account_id,
            model,
            version,
            capability,
            source: SOURCE_API.to_owned(),
            input,
            model_input,
            status: PredictionStatus::Starting,
            logs: String::new(),
            output: None,
            error: None,
            metrics: None,
            created_at,
            started_at: None,
            completed_at: None,
            webhook,
            webhook_events_filter,
            data_removed: false,
            seq: 0,
            deadline_at: None,
            job_seq: None,
            surface,
            input_files: Vec::new(),
            deployment: None,
            hardware: None,
            api_key_id: None,
            priority: super::Priority::Normal,
            usage: None,
            queue_ticket: None,
            kind: JobKind::Prediction,
            destination: None,
            trained_version: None,
        }
    }

    /// Where its job may run: its version, on its pool's runners (any pool when it has
    /// none); a training, on its version's trainers.
    pub fn route(&self) -> super::Route {
        let pool = match self.kind {
            JobKind::Prediction => self.hardware.clone(),
            JobKind::Training => Some(super::Pool::trainers()),
        };
        super::Route { version: self.version.clone(), pool }
    }

    /// Whether this is a training.
    pub fn is_training(&self) -> bool {
        self.kind == JobKind::Training
    }

    /// Sets the deadline `limit` after creation.
    pub fn with_deadline(mut self, limit: std::time::Duration) -> Self {
        let millis = i64::try_from(limit.as_millis()).unwrap_or(i64::MAX);
        self.deadline_at = Some(BsonDateTime::from_millis(self.created_at.timestamp_millis().saturating_add(millis)));
        self
    }

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
            output: self.output.as_deref().map(|o| self.output_view(o, links, surface)),
            data_removed: self.data_removed,
            error,
            source: self.source.clone(),
            status: self.status,
            metrics: self.metrics,
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

    /// A stored output as `surface` shows it: a string (a file as the surface's link to it);
    /// a training's `{version, weights}` as an object, its weights as a link.
    fn output_view(&self, output: &str, links: &Links, surface: ApiSurface) -> Value {
        if self.is_training()
            && let Ok(Value::Object(mut fields)) = serde_json::from_str::<Value>(output)
        {
            if let Some(Value::String(weights)) = fields.get_mut("weights") {
                *weights = links.output(weights, surface);
            }
            return Value::Object(fields);
        }
        Value::String(links.output(output, surface))
    }
}

/// What a new prediction is made of ([`Prediction::new_starting`] fills in the rest).
#[derive(Debug, Clone)]
pub struct NewPrediction {
    /// The account that owns it.
    pub account_id: AccountId,
    /// The model it runs on.
    pub model: ModelRef,
    /// The registered model version.
    pub version: String,
    /// The model's declared kind.
    pub capability: String,
    /// The input exactly as submitted.
    pub input: Value,
    /// The input the model receives.
    pub model_input: Value,
    /// Where its webhooks go.
    pub webhook: Option<WebhookUrl>,
    /// Which events are delivered (absent = all).
    pub webhook_events_filter: Option<Vec<WebhookEvent>>,
    /// The surface that creates it.
    pub surface: ApiSurface,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Prediction {
        Prediction::new_starting(NewPrediction {
            account_id: AccountId::generate(),
            model: "demo/echo".parse().expect("valid"),
            version: "v1".into(),
            capability: "text-generation".into(),
            input: json!({"prompt": "hi", "extra": 1}),
            model_input: json!({"prompt": "hi", "repeat": 1}),
            webhook: None,
            webhook_events_filter: None,
            surface: ApiSurface::Canonical,
        })
    }

    fn links() -> Links {
        Links::new(
            "http://h",
            crate::crypto::MasterKey::from_base64(&crate::crypto::MasterKey::generate_base64()).expect("key"),
        )
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

    #[test]
    fn metrics_are_seconds_between_the_timestamps() {
        let created = BsonDateTime::from_millis(1_000);
        let m =
            Metrics::at_completion(created, Some(BsonDateTime::from_millis(1_500)), BsonDateTime::from_millis(3_750));
        assert_eq!(m.predict_time, 2.25);
        let never_started = Metrics::at_completion(created, None, BsonDateTime::from_millis(2_000));
        assert_eq!(never_started.predict_time, 0.0);
        assert_eq!(m.total_time, 2.75);
    }

    #[test]
    fn the_record_round_trips_through_bson() {
        let p = sample();
        let doc = bson::to_document(&p).expect("to bson");
        assert_eq!(doc.get_str("_id").ok(), Some(p.id.as_str()));
        let back: Prediction = bson::from_document(doc).expect("from bson");
        assert_eq!(back, p);
    }
}
