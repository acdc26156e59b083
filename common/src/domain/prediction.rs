//! The prediction: [`Prediction`] is the record as stored in MongoDB (written by the api at
//! creation and by the runner afterwards). The object clients see is its view
//! (`views::PredictionView`).

use bson::DateTime as BsonDateTime;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    AccountId, ApiSurface, FileId, JobKind, ModelRef, PredictionId, PredictionStatus, TrainedVersionRef, WebhookEvent,
    WebhookUrl,
    money::{Micros, Price},
};

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

/// Timings in seconds: `predict_time` = completed - started, `total_time` = completed - created;
/// and the job's cost: `predict_time` × the price of its pool when it started (see
/// [`super::money`]), kept with its final state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Seconds the model ran (0 for a prediction that never started).
    pub predict_time: f64,
    /// Seconds from creation to completion.
    pub total_time: f64,
    /// What the run cost, in micro-dollars (0 before prices were kept, and at price 0).
    #[serde(default, rename = "cost_micros")]
    pub cost: Micros,
}

impl Metrics {
    /// The metrics of a prediction that ended at `completed_at`, having started at
    /// `started_at` (if it did) on a pool priced `price`.
    pub fn at_completion(
        created_at: BsonDateTime,
        started_at: Option<BsonDateTime>,
        completed_at: BsonDateTime,
        price: Price,
    ) -> Self {
        let millis = |from: BsonDateTime| (completed_at.timestamp_millis() - from.timestamp_millis()).max(0);
        let ran = started_at.map_or(0, millis);
        Self {
            predict_time: ran as f64 / 1000.0,
            total_time: millis(created_at) as f64 / 1000.0,
            cost: price.cost_of_millis(ran),
        }
    }
}

/// The pool a job started on and that pool's price then, recorded by the runner that started
/// it: its cost is reckoned from them when it ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartedOn {
    /// The runner's hardware pool.
    pub pool: super::Pool,
    /// The pool's price per second when the job started.
    #[serde(rename = "price_nanos")]
    pub price: Price,
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
    /// Output so far: the model's JSON value, each file in it as its stored URL (see
    /// [`super::output`]); a string (text, a file URL or compact JSON text) when stored before
    /// outputs were values.
    pub output: Option<Value>,
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
    /// Whether the client set the deadline (`Cancel-After`): reaching it then cancels the
    /// job rather than failing it ([`super::deadline`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deadline_asked: bool,
    /// Its secret inputs (`x-cog-secret`), each sealed under the master key, by field: `input`
    /// and `model_input` show them masked ([`super::secret_inputs`]).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub sealed_inputs: std::collections::BTreeMap<String, String>,
    /// The numbers its model recorded of its run (Cog's `record_metric`), shown beside the
    /// timings on `/replicate/v1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_metrics: Option<serde_json::Map<String, serde_json::Value>>,
    /// The stream sequence of the job message whose runner is running it: only a redelivery
    /// of that message may take the prediction over.
    #[serde(default)]
    pub job_seq: Option<i64>,
    /// The runner running it (its presence id), while `processing`: a redelivery of its job
    /// takes it over only once that runner is known to have stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
    /// When the runners' reconciler gave it a new job because its first one was gone with its
    /// runner (it does so once: see the runner's `reconcile` module).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeued_at: Option<BsonDateTime>,
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
    /// The pool it started on and that pool's price then (absent until it starts, and on
    /// predictions stored before prices were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_on: Option<StartedOn>,
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
    /// Its values too large for its document, kept in the file store instead (see
    /// [`crate::files::payloads`]); the fields they stand for are `null` as stored.
    #[serde(default, skip_serializing_if = "Spilled::is_empty")]
    pub spilled: Spilled,
}

/// Which of a prediction's values live in the file store rather than in its document, each as
/// a file of JSON (see [`crate::files::payloads`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spilled {
    /// `{"input": ..., "model_input": ...}`: the input as submitted and as the model gets it
    /// (`model_input` left out when it is the input itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<FileId>,
    /// The output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<FileId>,
}

impl Spilled {
    /// Whether nothing is spilled.
    pub fn is_empty(&self) -> bool {
        self.input.is_none() && self.output.is_none()
    }
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
            deadline_asked: false,
            sealed_inputs: Default::default(),
            model_metrics: None,
            job_seq: None,
            held_by: None,
            requeued_at: None,
            surface,
            input_files: Vec::new(),
            deployment: None,
            hardware: None,
            started_on: None,
            api_key_id: None,
            priority: super::Priority::Normal,
            usage: None,
            queue_ticket: None,
            kind: JobKind::Prediction,
            destination: None,
            trained_version: None,
            spilled: Spilled::default(),
        }
    }

    /// Where its job may run: its version, on its pool's runners (any pool when it has
    /// none); a training, on its version's trainers.
    pub fn route(&self) -> super::Route {
        super::Route::of_job(self.kind, self.version.clone(), self.hardware.clone())
    }

    /// Its metrics if it ends at `completed_at`: the time since it started (if it did) at the
    /// price of the pool it started on.
    pub fn metrics_at(&self, completed_at: BsonDateTime) -> Metrics {
        let price = self.started_on.as_ref().map_or(Price::FREE, |s| s.price);
        Metrics::at_completion(self.created_at, self.started_at, completed_at, price)
    }

    /// Whether this is a training.
    pub fn is_training(&self) -> bool {
        self.kind == JobKind::Training
    }

    /// Sets the deadline `limit` after creation.
    pub fn with_deadline(mut self, limit: std::time::Duration) -> Self {
        self.set_deadline(limit);
        self
    }

    /// Sets the deadline `limit` after creation.
    pub fn set_deadline(&mut self, limit: std::time::Duration) {
        let millis = i64::try_from(limit.as_millis()).unwrap_or(i64::MAX);
        self.deadline_at = Some(BsonDateTime::from_millis(self.created_at.timestamp_millis().saturating_add(millis)));
        self.deadline_asked = false;
    }

    /// Sets the deadline: the service's `limit` after creation, or the sooner one the client
    /// `asked` for (`Cancel-After`), which then is the client's ([`super::deadline`]).
    pub fn set_deadline_asked(&mut self, asked: Option<std::time::Duration>, limit: std::time::Duration) {
        match asked {
            Some(asked) if asked < limit => {
                self.set_deadline(asked);
                self.deadline_asked = true;
            }
            _ => self.set_deadline(limit),
        }
    }

    /// How it ends if its deadline passes now: by who set the deadline and whether it has
    /// started.
    pub fn deadline_end(&self) -> super::deadline::DeadlineEnd {
        super::deadline::DeadlineEnd::of(self.deadline_asked, self.started_at.is_some())
    }

    /// Whether it was canceled by its client's deadline before it started (`aborted` on
    /// `/replicate/v1`).
    pub fn is_aborted(&self) -> bool {
        self.status == PredictionStatus::Canceled
            && self.error.as_ref().is_some_and(|e| e.code == super::deadline::DeadlineEnd::Aborted.code())
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
pub(crate) mod tests {
    use super::*;
    use crate::domain::DeadlineEnd;
    use serde_json::json;

    /// A new `demo/echo` prediction.
    pub(crate) fn sample() -> Prediction {
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

    #[test]
    fn cancel_after_can_shorten_but_not_extend_the_services_limit() {
        let limit = std::time::Duration::from_secs(1800);
        let deadline_of = |asked: Option<u64>| {
            let mut p = sample();
            p.set_deadline_asked(asked.map(std::time::Duration::from_secs), limit);
            let ms = p.deadline_at.expect("a deadline").timestamp_millis() - p.created_at.timestamp_millis();
            (ms / 1000, p.deadline_asked, p.deadline_end())
        };
        assert_eq!(deadline_of(Some(60)), (60, true, DeadlineEnd::Aborted), "the client's, not started");
        assert_eq!(deadline_of(Some(7200)), (1800, false, DeadlineEnd::TimedOut), "the service's limit stays");
        assert_eq!(deadline_of(None), (1800, false, DeadlineEnd::TimedOut));
        let mut running = sample();
        running.set_deadline_asked(Some(std::time::Duration::from_secs(5)), limit);
        running.started_at = Some(BsonDateTime::now());
        assert_eq!(running.deadline_end(), DeadlineEnd::Canceled);
    }

    #[test]
    fn metrics_are_seconds_between_the_timestamps() {
        let created = BsonDateTime::from_millis(1_000);
        let m = Metrics::at_completion(
            created,
            Some(BsonDateTime::from_millis(1_500)),
            BsonDateTime::from_millis(3_750),
            Price(225_000),
        );
        assert_eq!(m.predict_time, 2.25);
        let never_started = Metrics::at_completion(created, None, BsonDateTime::from_millis(2_000), Price(225_000));
        assert_eq!(never_started.predict_time, 0.0);
        assert_eq!(m.total_time, 2.75);
        assert_eq!(m.cost, Micros(506), "2,250 ms at $0.000225/s is 506.25 micro-dollars");
        assert_eq!(never_started.cost, Micros::ZERO, "a job that never started costs nothing");
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
