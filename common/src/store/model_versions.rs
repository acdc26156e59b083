//! The `model_versions` collection (written by runners at registration): every version a model
//! has had, keyed by its digest, with the schema it had and when it was first registered.
//!
//! The `models` collection holds only a model's current version; this one keeps the history,
//! so `GET …/versions` lists them and a create naming a superseded version is told so rather
//! than told the version never existed. Only a model's current version runs.

use bson::{DateTime, doc};
use futures::TryStreamExt;
use mongodb::{Collection, Database};
use serde::{Deserialize, Serialize};

use super::{ModelRecord, StoreError};
use crate::domain::{FileId, ModelRef, PredictionId};

/// One version of a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelVersionRecord {
    /// The version id: the digest of the registration ([`ModelRecord::version`]).
    #[serde(rename = "_id")]
    pub id: String,
    /// The model it is a version of.
    pub model: ModelRef,
    /// The declared kind at that version.
    pub capability: String,
    /// The input JSON Schema at that version, as JSON text.
    pub input_schema_json: String,
    /// When a runner first registered it.
    pub created_at: DateTime,
    /// The input JSON Schema of its trainer (its `TrainingInput`), as JSON text, once a runner
    /// serving a trainer of it registered one (`RUNNER_COG_TRAIN`): only such a version can be
    /// trained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training_input_schema_json: Option<String>,
    /// For a version a training recorded: what it was trained from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trained_from: Option<TrainedFrom>,
    /// The output JSON Schema at that version, as JSON text (see
    /// [`ModelRecord::output_schema_json`]); refreshed by each registration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema_json: Option<String>,
}

/// What a trained version was trained from, and its weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainedFrom {
    /// The model it was trained from (whose runners run it).
    pub model: ModelRef,
    /// The version it was trained from.
    pub version: String,
    /// The training that recorded it.
    pub training: PredictionId,
    /// Its weights: a file of this service, kept while the version exists.
    pub weights: FileId,
}

impl ModelVersionRecord {
    /// The version a registration describes, first seen now.
    pub fn of(record: &ModelRecord) -> Self {
        Self {
            id: record.version.clone(),
            model: record.model.clone(),
            capability: record.capability.clone(),
            input_schema_json: record.input_schema_json.clone(),
            created_at: record.registered_at,
            training_input_schema_json: None,
            trained_from: None,
            output_schema_json: record.output_schema_json.clone(),
        }
    }

    /// Its output schema, parsed, if its model declares one.
    pub fn output_schema(&self) -> Option<Result<serde_json::Value, serde_json::Error>> {
        self.output_schema_json.as_deref().map(serde_json::from_str)
    }

    /// Its trainer's input schema, parsed, if it has a trainer.
    pub fn training_input_schema(&self) -> Option<Result<serde_json::Value, serde_json::Error>> {
        self.training_input_schema_json.as_deref().map(serde_json::from_str)
    }

    /// The input schema, parsed.
    pub fn input_schema(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_str(&self.input_schema_json)
    }
}

/// The filter and update that store `version` unless a version of its id exists.
fn insert_if_new(version: &ModelVersionRecord) -> Result<(bson::Document, bson::Document), StoreError> {
    Ok((doc! { "_id": &version.id }, doc! { "$setOnInsert": bson::to_document(version)? }))
}

/// Typed access to the `model_versions` collection.
#[derive(Clone, Debug)]
pub struct ModelVersions {
    coll: Collection<ModelVersionRecord>,
}

impl ModelVersions {
    pub(super) fn new(db: &Database) -> Self {
        Self { coll: db.collection("model_versions") }
    }

    /// The collection itself (indexes).
    pub fn collection(&self) -> &Collection<ModelVersionRecord> {
        &self.coll
    }

    /// Records the version of `record`; a version seen before keeps its first `created_at`.
    pub async fn record(&self, record: &ModelRecord) -> Result<(), StoreError> {
        // Nothing read back: a runner's start-up writes, it does not need the stored copy.
        let mut version = ModelVersionRecord::of(record);
        let output_schema_json = version.output_schema_json.take();
        let (filter, mut update) = insert_if_new(&version)?;
        // The output schema follows the registration (a version recorded before it was kept
        // gains it); everything else stays as first seen.
        update.insert("$set", doc! { "output_schema_json": output_schema_json });
        self.coll.update_one(filter, update).upsert(true).await.map(drop)
    }

    /// Records that version `id` has a trainer whose input schema is `schema` (a runner
    /// serving it with `RUNNER_COG_TRAIN`).
    pub async fn set_trainable(&self, id: &str, schema: &serde_json::Value) -> Result<(), StoreError> {
        let update = doc! { "$set": { "training_input_schema_json": schema.to_string() } };
        self.coll.update_one(doc! { "_id": id }, update).await.map(|_| ())
    }

    /// Records `version` (a trained one) unless a version of its id exists, which keeps what it
    /// was (recorded by an earlier delivery of its training, it keeps its weights); returns
    /// the version as stored.
    pub async fn record_version(&self, version: &ModelVersionRecord) -> Result<Option<ModelVersionRecord>, StoreError> {
        let (filter, update) = insert_if_new(version)?;
        self.coll
            .find_one_and_update(filter, update)
            .upsert(true)
            .return_document(mongodb::options::ReturnDocument::After)
            .await
    }

    /// Whether a trained version names file `file` as its weights.
    pub async fn names_weights(&self, file: &crate::domain::FileId) -> Result<bool, StoreError> {
        let ids = self.coll.clone_with_type::<bson::Document>();
        let found = ids.find_one(doc! { "trained_from.weights": file.as_str() }).projection(doc! { "_id": 1 }).await?;
        Ok(found.is_some())
    }

    /// A version by id.
    pub async fn get(&self, id: &str) -> Result<Option<ModelVersionRecord>, StoreError> {
        self.coll.find_one(doc! { "_id": id }).await
    }

    /// Version `id` as the primary has it now ([`super::settling_read`]): to settle a write
    /// whose outcome is unknown.
    pub async fn get_settled(&self, id: &str) -> Result<Option<ModelVersionRecord>, StoreError> {
        self.coll.find_one(doc! { "_id": id }).with_options(super::settling_read()).await
    }

    /// Removes every version of `model` (an account's own model being deleted).
    pub async fn remove_all_of(&self, model: &ModelRef) -> Result<(), StoreError> {
        self.coll.delete_many(doc! { "model": model.to_string() }).await.map(drop)
    }

    /// Removes version `id` of `model`; the version it removed, if any.
    pub async fn remove(&self, model: &ModelRef, id: &str) -> Result<Option<ModelVersionRecord>, StoreError> {
        self.coll.find_one_and_delete(doc! { "_id": id, "model": model.to_string() }).await
    }

    /// The id, model and creation time of every version of `models`, and nothing else.
    pub async fn created_of(&self, models: &[ModelRef]) -> Result<Vec<(String, ModelRef, DateTime)>, StoreError> {
        #[derive(Deserialize)]
        struct Key {
            #[serde(rename = "_id")]
            id: String,
            model: ModelRef,
            created_at: DateTime,
        }
        let names: Vec<String> = models.iter().map(ToString::to_string).collect();
        let keys = self.coll.clone_with_type::<Key>();
        let found: Vec<Key> = keys
            .find(doc! { "model": { "$in": names } })
            .projection(doc! { "_id": 1, "model": 1, "created_at": 1 })
            .max_time(super::read_limit())
            .await?
            .try_collect()
            .await?;
        Ok(found.into_iter().map(|k| (k.id, k.model, k.created_at)).collect())
    }

    /// Every version of `model`, newest first.
    pub async fn list_for(&self, model: &ModelRef) -> Result<Vec<ModelVersionRecord>, StoreError> {
        self.coll
            .find(doc! { "model": model.to_string() })
            .sort(doc! { "created_at": -1, "_id": 1 })
            .await?
            .try_collect()
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_version_is_the_registration_it_comes_from() {
        let record =
            ModelRecord::new("demo/echo".parse().expect("valid"), "text-generation", &json!({"type": "object"}));
        let version = ModelVersionRecord::of(&record);
        assert_eq!(version.id, record.version);
        assert_eq!(version.model, record.model);
        assert_eq!(version.created_at, record.registered_at);
        assert_eq!(version.input_schema().ok(), Some(json!({"type": "object"})));
    }
}
