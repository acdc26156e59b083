//! Registered models, as the api sees them: looked up in the `models` collection and cached
//! for [`MODEL_CACHE_TTL`], so a newly registered model is served within seconds and a model
//! look-up does not cost a database round trip on every create.

use std::{sync::Arc, time::Duration};

use common::{
    cache::TtlCache,
    domain::ModelRef,
    store::{ModelRecord, Models},
};
use serde_json::Value;

use crate::error::ApiError;

/// How long a model look-up is trusted.
pub const MODEL_CACHE_TTL: Duration = Duration::from_secs(5);

/// A registered model with its parsed input schema.
#[derive(Debug)]
pub struct RegisteredModel {
    /// The registration.
    pub record: ModelRecord,
    /// The input JSON Schema.
    pub input_schema: Value,
}

/// The catalog of registered models.
pub struct ModelCatalog {
    models: Models,
    cache: TtlCache<ModelRef, Option<Arc<RegisteredModel>>>,
}

impl ModelCatalog {
    /// A catalog over the `models` collection.
    pub fn new(models: Models) -> Self {
        Self { models, cache: TtlCache::new(MODEL_CACHE_TTL, 10_000) }
    }

    /// The model, if some runner registered it.
    pub async fn get(&self, model: &ModelRef) -> Result<Option<Arc<RegisteredModel>>, ApiError> {
        if let Some(cached) = self.cache.get(model) {
            return Ok(cached);
        }
        let found = match self.models.get(model).await? {
            Some(record) => {
                let input_schema = record.input_schema()?;
                Some(Arc::new(RegisteredModel { record, input_schema }))
            }
            None => None,
        };
        self.cache.insert(model.clone(), found.clone());
        Ok(found)
    }
}
