//! Step 3 of a training (see [`super`] and [`common::domain::training`]): its trainer answered
//! `{"weights": <file>}`; the weights are stored as a file of the training's account (no
//! expiry: they are kept while the version exists), the new version of the destination model
//! is recorded (trained from the training's version, with that version's input schema less
//! the weights field), and the training's output becomes `{version, weights}`.
//!
//! A redelivered job that stores the result again records no second version (the version's
//! id is derived from the training): its output names the weights the version kept, and the
//! weights it stored again are removed.
//!
//! Weights are never left without their version: they are stored expiring
//! ([`training::WEIGHTS_PENDING`]) and kept for good only once the version naming them is
//! recorded. A recording whose outcome is unknown (its answer lost) is settled by reading the
//! version back: weights it names are kept, others removed; if even the reading fails, the
//! weights are left to expire. The whole step is retried until it is stored (see
//! `super::Executor::run`), and each retry settles the same way.

use anyhow::Context;
use bson::DateTime;
use common::{
    domain::FileId,
    domain::{
        ApiSurface, Prediction,
        training::{self, trained_version_id},
    },
    files::NewFile,
    links::Links,
    store::{ModelVersionRecord, model_versions::TrainedFrom},
};
use futures::StreamExt;
use serde_json::Value;

use super::Executor;
use crate::models::{ModelError, ModelOutput, file_inputs::data_uri_bytes};

fn invalid(message: impl Into<String>) -> ModelError {
    ModelError { code: "TRAINING_OUTPUT_INVALID".into(), message: message.into() }
}

/// The weights a trainer's output holds.
#[derive(Debug, PartialEq)]
enum Weights {
    /// In the answer: their media type and bytes.
    Inline(String, Vec<u8>),
    /// Uploaded by the trainer while it ran (`--upload-url`): a stored file.
    Stored(FileId),
}

/// The weights a trainer's output holds; `links` names the stored files.
fn weights_of(output: ModelOutput, links: &Links) -> Result<Weights, ModelError> {
    match output {
        ModelOutput::File { content_type, bytes, .. } => Ok(Weights::Inline(content_type, bytes)),
        ModelOutput::Json(Value::Object(fields)) => match fields.get("weights") {
            Some(Value::String(uri)) if uri.starts_with("data:") => data_uri_bytes(uri)
                .map(|(content_type, bytes)| Weights::Inline(content_type, bytes))
                .ok_or_else(|| invalid("the trainer's weights are a malformed data: URI")),
            Some(Value::String(url)) => links.stored_file(url).map(Weights::Stored).ok_or_else(|| {
                invalid(format!(
                    "the trainer's weights are neither in the answer nor a file uploaded to this runner: {}",
                    url.split('?').next().unwrap_or_default()
                ))
            }),
            _ => Err(invalid("the trainer's output has no weights")),
        },
        _ => Err(invalid("the trainer's output is not {\"weights\": <file>}")),
    }
}

impl Executor {
    /// The stored output of training `p` from its trainer's `output`: the weights stored and
    /// the new version recorded (an `Err` of a trainer's output that is unusable fails the
    /// training; an `Err` of the outer result is a storage failure, retried).
    pub(super) async fn training_result(
        &self,
        p: &Prediction,
        output: ModelOutput,
    ) -> anyhow::Result<Result<Value, ModelError>> {
        let Some(destination) = p.destination.clone() else {
            return Ok(Err(invalid("the training has no destination")));
        };
        let weights = match weights_of(output, &self.links) {
            Ok(weights) => weights,
            Err(e) => return Ok(Err(e)),
        };
        let versions = self.store.model_versions();
        let base = versions.get(&p.version).await.context("reading the trained version")?;
        let Some(base) = base else {
            return Ok(Err(invalid(format!("version {} of {} is no longer recorded", p.version, p.model))));
        };
        // Weights stored by this try (not the trainer's upload, which a retry cannot make again).
        let stored_here = matches!(weights, Weights::Inline(..));
        let weights = match weights {
            Weights::Inline(content_type, bytes) => {
                let new = NewFile {
                    account_id: p.account_id.clone(),
                    name: format!("{}-weights", p.id),
                    content_type,
                    metadata: String::new(),
                    // Kept for good once their version is recorded.
                    expires_at: Some(training::weights_pending_until(DateTime::now())),
                    // Not an output of the training: the retention of its data must not remove it.
                    prediction_id: None,
                };
                let body = futures::stream::once(async move { Ok(bytes::Bytes::from(bytes)) }).boxed();
                self.files.create(new, body, u64::MAX).await.context("storing the weights")?
            }
            // Streamed to the store while the trainer ran, as a file of the account kept
            // apart from the training's data (see `models::cog::uploads`).
            Weights::Stored(id) => match self.files.get(&id).await.context("reading the uploaded weights")? {
                Some(file) if file.account_id == p.account_id => file,
                _ => return Ok(Err(invalid("the trainer's uploaded weights are not stored"))),
            },
        };
        let schema = training::without_weights_field(&base.input_schema()?);
        let version = ModelVersionRecord {
            id: trained_version_id(&p.id),
            model: destination.clone(),
            capability: base.capability.clone(),
            input_schema_json: schema.to_string(),
            created_at: DateTime::now(),
            training_input_schema_json: None,
            output_schema_json: base.output_schema_json.clone(),
            trained_from: Some(TrainedFrom {
                model: p.model.clone(),
                version: p.version.clone(),
                training: p.id.clone(),
                weights: weights.id.clone(),
            }),
        };
        let stored = match versions.record_version(&version).await {
            Ok(stored) => stored,
            // Unknown whether it applied (an answer lost, or a majority acknowledgment that
            // timed out): what the primary holds says, not a majority read that may lag.
            Err(e) => match versions.get_settled(&version.id).await {
                Ok(Some(stored)) => Some(stored),
                Ok(None) => {
                    if stored_here {
                        // The retry stores them again.
                        self.remove_weights(&weights.id, "the version was not recorded").await;
                    }
                    return Err(anyhow::Error::new(e).context("recording the trained version"));
                }
                Err(_) => return Err(anyhow::Error::new(e).context("recording the trained version (outcome unknown)")),
            },
        };
        // A version recorded by an earlier delivery keeps its weights: these are not needed.
        let kept = stored.and_then(|v| v.trained_from).map(|t| t.weights).unwrap_or_else(|| weights.id.clone());
        if kept != weights.id {
            self.remove_weights(&weights.id, "a redelivery stored them again").await;
        }
        // Checked once the version is recorded: a delete of the destination marks it before
        // it looks for trainings under way, so one it did not see is seen here, and its
        // version does not outlive the model (see `common::store::owned_models`).
        let owned = self.store.owned_models();
        if !owned.stands_for(&destination, &p.account_id, p.created_at).await.context("reading the destination")? {
            versions.remove(&destination, &version.id).await.context("removing the version of a deleted model")?;
            self.remove_weights(&kept, "their destination was deleted").await;
            tracing::warn!(version = %version.id, %destination, "the destination was deleted during the training; its version removed");
            return Ok(Err(ModelError {
                code: "DESTINATION_DELETED".into(),
                message: format!(
                    "The model {destination} was deleted while the training ran; no version was recorded."
                ),
            }));
        }
        self.files.records().keep(&kept).await.context("keeping the weights of the recorded version")?;
        let weights_id = kept;
        tracing::info!(version = %version.id, %destination, "trained version recorded");
        let url = self.links.file(&weights_id, ApiSurface::Canonical);
        Ok(Ok(Value::String(training::training_output(&destination, &version.id, &url))))
    }
}

impl Executor {
    /// Removes weights no version names (`why`); if that fails, their expiry removes them.
    async fn remove_weights(&self, id: &FileId, why: &str) {
        if let Err(e) = self.files.delete(id).await {
            tracing::warn!(file = %id, error = %e, why, "weights no version names were not removed; they expire");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn weights_come_as_a_data_uri_a_file_or_an_uploaded_file_and_nothing_else() {
        let links = Links::for_tests("http://h");
        let inline = weights_of(ModelOutput::Json(json!({"weights": "data:text/plain;base64,aGk="})), &links);
        assert_eq!(inline, Ok(Weights::Inline("text/plain".into(), b"hi".to_vec())));
        let file = ModelOutput::File { content_type: "a/b".into(), extension: "bin".into(), bytes: vec![1] };
        assert!(weights_of(file, &links).is_ok());
        let id = FileId::generate();
        let uploaded = json!({"weights": links.file(&id, common::domain::ApiSurface::Canonical)});
        assert_eq!(weights_of(ModelOutput::Json(uploaded), &links), Ok(Weights::Stored(id)));
        for bad in [json!({"weights": "http://elsewhere/w.bin"}), json!({"other": 1}), json!("text")] {
            let e = weights_of(ModelOutput::Json(bad.clone()), &links).expect_err("refused");
            assert_eq!(e.code, "TRAINING_OUTPUT_INVALID", "{bad}");
        }
    }
}
