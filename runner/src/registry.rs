//! The served models: chosen by the configured selectors and registered in MongoDB (owner,
//! name, capability, input schema, version), which is how the api learns a model exists, and
//! its version in the history of versions (`model_versions`). A version is the operator's
//! (`RUNNER_MODEL_VERSIONS`) or the digest of what is registered; which versions are live is
//! the [`crate::presence`] record's business.

use std::{collections::HashMap, sync::Arc};

use common::{
    domain::ModelRef,
    store::{Store, StoreError, runners::Served},
};

use crate::{config::ModelSelector, models::Model};

/// The models of `available` that `selectors` select.
pub fn select(selectors: &[ModelSelector], available: Vec<Arc<dyn Model>>) -> Vec<Arc<dyn Model>> {
    available.into_iter().filter(|m| selectors.iter().any(|s| s.matches(&m.descriptor().model))).collect()
}

/// Registers every served model (idempotent; re-registration refreshes the record), each
/// under its version in `versions` or its derived one; returns what is served, by version.
pub async fn register(
    store: &Store,
    models: &[Arc<dyn Model>],
    versions: &HashMap<ModelRef, String>,
) -> Result<Vec<Served>, StoreError> {
    register_as(store, models, versions, true).await
}

/// As [`register`]; with `latest` false the versions are only recorded in the models' history
/// (a runner of an older version kept for the predictions pinned to it), and each model's
/// current version stays what it is.
pub async fn register_as(
    store: &Store,
    models: &[Arc<dyn Model>],
    versions: &HashMap<ModelRef, String>,
    latest: bool,
) -> Result<Vec<Served>, StoreError> {
    let mut served = Vec::new();
    for model in models {
        let d = model.descriptor();
        let record = d.record(versions.get(&d.model).map(String::as_str).or(model.version()));
        store.model_versions().record(&record).await?;
        if latest {
            store.models().register(&record).await?;
        }
        tracing::info!(model = %d.model, capability = %d.capability, version = %record.version, "model registered");
        served.push(Served { model: d.model.clone(), version: record.version });
    }
    Ok(served)
}

/// Records each trainer's input schema on the version it trains, which makes that version
/// trainable: the version this runner serves of its model, or, for a trainer alone (a runner
/// of trainings only, such as a Kubernetes trainer pod), the version `versions` names for it
/// (`RUNNER_MODEL_VERSIONS`). Returns the versions of those lone trainers, which the runner
/// takes trainings of. A trainer of neither is a configuration error (a training's version is
/// the version it trains, and its result runs there).
pub async fn register_trainers(
    store: &Store,
    trainers: &[Arc<dyn Model>],
    served: &[Served],
    versions: &HashMap<ModelRef, String>,
) -> anyhow::Result<Vec<Served>> {
    let mut alone = Vec::new();
    for trainer in trainers {
        let d = trainer.descriptor();
        let version = match served.iter().find(|s| s.model == d.model) {
            Some(served) => served.version.clone(),
            None => {
                let Some(named) = versions.get(&d.model) else {
                    anyhow::bail!(
                        "RUNNER_COG_TRAIN names {}, which this runner does not serve: serve its predictor too (RUNNER_COG, RUNNER_MODELS), or name the version it trains (RUNNER_MODEL_VERSIONS)",
                        d.model
                    );
                };
                alone.push(Served { model: d.model.clone(), version: named.clone() });
                named.clone()
            }
        };
        store.model_versions().set_trainable(&version, &d.input_schema).await?;
        tracing::info!(model = %d.model, %version, "trainer registered");
    }
    Ok(alone)
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
