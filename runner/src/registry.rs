//! The served models: chosen by the configured selectors and registered in MongoDB (owner,
//! name, capability, input schema, version), which is how the api learns a model exists, and
//! its version in the history of versions (`model_versions`).

use std::sync::Arc;

use common::store::{ModelRecord, Store, StoreError};

use crate::{config::ModelSelector, models::Model};

/// The models of `available` that `selectors` select.
pub fn select(selectors: &[ModelSelector], available: Vec<Arc<dyn Model>>) -> Vec<Arc<dyn Model>> {
    available.into_iter().filter(|m| selectors.iter().any(|s| s.matches(&m.descriptor().model))).collect()
}

/// Registers every served model (idempotent; re-registration refreshes the record).
pub async fn register(store: &Store, models: &[Arc<dyn Model>]) -> Result<(), StoreError> {
    for model in models {
        let d = model.descriptor();
        let record = ModelRecord::new(d.model.clone(), &d.capability, &d.input_schema);
        store.model_versions().record(&record).await?;
        store.models().register(&record).await?;
        tracing::info!(model = %d.model, capability = %d.capability, "model registered");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{config::parse_selectors, models::builtin};

    #[test]
    fn only_selected_models_are_served() {
        let served = select(&parse_selectors("demo/sleep").expect("valid"), builtin::all());
        let names: Vec<String> = served.iter().map(|m| m.descriptor().model.to_string()).collect();
        assert_eq!(names, vec!["demo/sleep"]);
        assert_eq!(select(&parse_selectors("*").expect("valid"), builtin::all()).len(), builtin::all().len());
        assert!(select(&parse_selectors("acme/*").expect("valid"), builtin::all()).is_empty());
    }
}
