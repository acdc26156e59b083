//! The `models` collection (written by runners at start): each model a runner serves, with its
//! capability and input JSON Schema. The api answers 404 for a model nobody registered.
//!
//! The schema is kept as JSON text: JSON Schemas contain keys such as `$ref` that MongoDB
//! reserves in stored documents.

use bson::{DateTime, doc};
use futures::TryStreamExt;
use mongodb::{Collection, Database};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::StoreError;
use crate::domain::{ModelRef, api_key::hex};

/// A registered model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRecord {
    /// `<owner>/<name>`.
    #[serde(rename = "_id")]
    pub model: ModelRef,
    /// The declared kind, e.g. `text-generation`.
    pub capability: String,
    /// The input JSON Schema, as JSON text.
    pub input_schema_json: String,
    /// A digest of capability and schema: changes whenever either does.
    pub version: String,
    /// When a runner last registered it.
    pub registered_at: DateTime,
    /// The output JSON Schema the model declares (a Cog model's `components.schemas.Output`,
    /// with `x-cog-array-type` and `x-cog-array-display`), as JSON text; absent when it
    /// declares none. Not part of the derived version: registrations from before it was kept
    /// keep their version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema_json: Option<String>,
}

impl ModelRecord {
    /// A registration of `model`; the version is derived from what is registered.
    pub fn new(model: ModelRef, capability: &str, input_schema: &Value) -> Self {
        let input_schema_json = input_schema.to_string();
        let mut digest = Sha256::new();
        digest.update(model.to_string().as_bytes());
        digest.update(b"\n");
        digest.update(capability.as_bytes());
        digest.update(b"\n");
        digest.update(input_schema_json.as_bytes());
        Self {
            model,
            capability: capability.to_owned(),
            input_schema_json,
            version: hex(&digest.finalize()),
            registered_at: DateTime::now(),
            output_schema_json: None,
        }
    }

    /// The same registration with the output schema the model declares.
    pub fn with_output_schema(mut self, schema: Option<&Value>) -> Self {
        self.output_schema_json = schema.map(Value::to_string);
        self
    }

    /// The same registration under a version id an operator chose (an image digest, say),
    /// instead of the derived one.
    pub fn with_version(mut self, version: &str) -> Self {
        version.clone_into(&mut self.version);
        self
    }

    /// The input schema, parsed.
    pub fn input_schema(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(&self.input_schema_json)
    }
}

/// Typed access to the `models` collection.
#[derive(Clone, Debug)]
pub struct Models {
    coll: Collection<ModelRecord>,
}

impl Models {
    pub(super) fn new(db: &Database) -> Self {
        Self { coll: db.collection("models") }
    }

    /// Registers (or re-registers) a model.
    pub async fn register(&self, record: &ModelRecord) -> Result<(), StoreError> {
        self.coll.replace_one(doc! { "_id": record.model.to_string() }, record).upsert(true).await.map(|_| ())
    }

    /// One page of the registered models by address, and how many there are in all.
    pub async fn list(&self, offset: u64, limit: i64) -> Result<(Vec<ModelRecord>, u64), StoreError> {
        super::page(&self.coll, doc! {}, doc! { "_id": 1 }, offset, limit).await
    }

    /// Every registered model's address and current version, and nothing else of it: the keys
    /// a sorted list orders before it reads the page's models whole.
    pub async fn addresses(&self) -> Result<Vec<(ModelRef, String)>, StoreError> {
        #[derive(Deserialize)]
        struct Key {
            #[serde(rename = "_id")]
            model: ModelRef,
            version: String,
        }
        let keys = self.coll.clone_with_type::<Key>();
        let found: Vec<Key> = keys
            .find(doc! {})
            .projection(doc! { "_id": 1, "version": 1 })
            .max_time(super::read_limit())
            .await?
            .try_collect()
            .await?;
        Ok(found.into_iter().map(|k| (k.model, k.version)).collect())
    }

    /// A registered model.
    pub async fn get(&self, model: &ModelRef) -> Result<Option<ModelRecord>, StoreError> {
        self.coll.find_one(doc! { "_id": model.to_string() }).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_version_changes_with_the_schema_and_is_stable_otherwise() {
        let m: ModelRef = "demo/echo".parse().expect("valid");
        let a = ModelRecord::new(m.clone(), "text-generation", &json!({"type": "object"}));
        let b = ModelRecord::new(m.clone(), "text-generation", &json!({"type": "object"}));
        let c = ModelRecord::new(m, "text-generation", &json!({"type": "object", "required": ["x"]}));
        assert_eq!(a.version, b.version);
        assert_ne!(a.version, c.version);
        assert_eq!(a.version.len(), 64);
        assert_eq!(a.input_schema().ok(), Some(json!({"type": "object"})));
    }
}
