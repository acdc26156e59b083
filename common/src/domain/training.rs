//! Trainings (fine-tunes): a training is a job of its own [`JobKind`] in the one pipeline of
//! predictions (same collection, subjects, lanes, scheduler, state machine and webhooks). It
//! runs on the trainer of the version it was created on and, when it succeeds, records a new
//! version of its `destination` model whose weights are a file of this service.
//!
//! A prediction of such a trained version runs on the runners of the version it was trained
//! from: it is stored with that base model and version (so its job, lane and queue place are
//! theirs) and with [`TrainedVersionRef`], the version its caller named, which is what clients
//! see. Its model receives the weights in [`WEIGHTS_FIELD`] (Replicate's convention for
//! fast-booting fine-tunes).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{ModelRef, PredictionId};

/// The input field a trained version's weights are handed to its model in, when the base
/// version's schema has a `format: uri` field of that name. Not shown in a trained version's
/// schema.
pub const WEIGHTS_FIELD: &str = "replicate_weights";

/// How long a training's weights are kept before their version is recorded: they are stored
/// expiring this far ahead, and kept for good (their expiry removed) once the version that
/// names them is. Weights whose version never comes (the training failed, was canceled, or
/// stored them again) are removed by the file expiry of retention, never left behind.
pub const WEIGHTS_PENDING: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// How long the weights of a version being deleted stay: they expire this far ahead before
/// the version is removed, and are deleted at once after it is; should the delete fail part
/// way, the expiry removes them once no version names them (and keeps them for good if one
/// still does).
pub const WEIGHTS_RELEASED: std::time::Duration = std::time::Duration::from_secs(600);

/// When weights stored now expire unless their version is recorded ([`WEIGHTS_PENDING`]).
pub fn weights_pending_until(now: bson::DateTime) -> bson::DateTime {
    later(now, WEIGHTS_PENDING)
}

/// When the weights of a version being deleted now expire ([`WEIGHTS_RELEASED`]).
pub fn weights_released_until(now: bson::DateTime) -> bson::DateTime {
    later(now, WEIGHTS_RELEASED)
}

fn later(now: bson::DateTime, by: std::time::Duration) -> bson::DateTime {
    bson::DateTime::from_millis(
        now.timestamp_millis().saturating_add(i64::try_from(by.as_millis()).unwrap_or(i64::MAX)),
    )
}

/// What a job runs: a prediction (on a model) or a training (on a model's trainer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    /// A prediction (every job stored before trainings).
    #[default]
    Prediction,
    /// A training.
    Training,
}

impl JobKind {
    /// Whether this is [`JobKind::Prediction`] (not stored, so predictions keep their shape).
    pub fn is_prediction(&self) -> bool {
        *self == Self::Prediction
    }
}

/// A trained version a prediction was asked of, while it runs on the version it was trained
/// from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrainedVersionRef {
    /// The destination model the version belongs to.
    pub model: ModelRef,
    /// The trained version's id.
    pub version: String,
    /// Its weights, which its model receives (a file of the destination's account, which may
    /// not be the prediction's: a public destination's versions run for every account).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<super::FileId>,
}

/// The id of the version training `id` records: derived from the training, so a result stored
/// twice (a redelivered job) records one version.
pub fn trained_version_id(id: &PredictionId) -> String {
    super::api_key::hex(&Sha256::digest(format!("trained:{id}").as_bytes()))
}

/// A trained version's input schema: its base's without [`WEIGHTS_FIELD`].
pub fn without_weights_field(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        properties.remove(WEIGHTS_FIELD);
    }
    if let Some(required) = schema.get_mut("required").and_then(Value::as_array_mut) {
        required.retain(|r| r.as_str() != Some(WEIGHTS_FIELD));
    }
    schema
}

/// Whether a version with input schema `schema` takes weights in [`WEIGHTS_FIELD`].
pub fn takes_weights(schema: &Value) -> bool {
    schema.pointer(&format!("/properties/{WEIGHTS_FIELD}/format")).and_then(Value::as_str) == Some("uri")
}

// A training's output as the runner stores it and clients see it.
/// What a succeeded training made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TrainingOutput {
    /// The new version of the destination: `owner/name:<version id>`.
    pub version: String,
    /// Its weights: a file of this service.
    pub weights: String,
}

/// A succeeded training's output as stored: `{version, weights}` (compact JSON).
pub fn training_output(destination: &ModelRef, version: &str, weights_url: &str) -> String {
    let output = TrainingOutput { version: format!("{destination}:{version}"), weights: weights_url.to_owned() };
    // Two strings always serialize.
    serde_json::to_string(&output).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_trained_version_hides_the_weights_field() {
        let base = json!({"type": "object", "required": ["prompt", "replicate_weights"], "properties": {
            "prompt": {"type": "string"},
            "replicate_weights": {"type": "string", "format": "uri"},
        }});
        assert!(takes_weights(&base));
        let trained = without_weights_field(&base);
        assert_eq!(trained["required"], json!(["prompt"]));
        assert!(trained["properties"].get("replicate_weights").is_none());
        assert!(!takes_weights(&trained));
    }

    #[test]
    fn a_training_records_one_version_however_often_it_is_stored() {
        let id = PredictionId::generate();
        assert_eq!(trained_version_id(&id), trained_version_id(&id));
        assert_ne!(trained_version_id(&id), trained_version_id(&PredictionId::generate()));
        assert_eq!(trained_version_id(&id).len(), 64);
        let m: ModelRef = "alice/tuned".parse().expect("model");
        let out: Value = serde_json::from_str(&training_output(&m, "abc", "http://h/v1/files/f")).expect("json");
        assert_eq!(out, json!({"version": "alice/tuned:abc", "weights": "http://h/v1/files/f"}));
    }

    #[test]
    fn a_prediction_is_the_default_kind() {
        assert!(JobKind::default().is_prediction());
        assert_eq!(serde_json::to_value(JobKind::Training).expect("json"), json!("training"));
    }
}
