//! Trained versions (see `common::domain::training`): a version a training recorded on an
//! account's own model runs on the runners of the version it was trained from, with its
//! weights handed to the model in `replicate_weights` when that version's schema takes them.
//!
//! A create naming such a version (`owner/name`, `owner/name:<id>` or the bare id, and the
//! model's own create route) is checked against the trained version's schema (its base's less
//! the weights field) and stored at the base model and version, with the trained version it
//! named ([`common::domain::TrainedVersionRef`]), which is what clients see.

use std::sync::Arc;

use common::{
    domain::{AccountId, ModelRef, training},
    store::{ModelRecord, ModelVersionRecord},
};

use crate::{
    error::ApiError,
    state::AppState,
    state::model_catalog::{RegisteredModel, TrainedVersion},
};

/// The trained version `version` (the newest when `None`) of `model`, an account's own model
/// that `account` may see, as a model that runs it; `None` when `model` is no such model or
/// has no such version.
pub async fn trained_model(
    state: &AppState,
    account: &AccountId,
    model: &ModelRef,
    version: Option<&str>,
) -> Result<Option<Arc<RegisteredModel>>, ApiError> {
    let owned = state.store.owned_models().get(model).await?;
    if !owned.is_some_and(|o| o.visible_to(account)) {
        return Ok(None);
    }
    let versions = state.store.model_versions();
    let record = match version {
        Some(id) => versions.get(id).await?.filter(|v| &v.model == model),
        None => versions.list_for(model).await?.into_iter().next(),
    };
    match record {
        Some(record) => runs_as(state, &record).await,
        None => Ok(None),
    }
}

/// A trained version as a model that runs it: its base model at its base version, with its
/// own schema.
async fn runs_as(state: &AppState, record: &ModelVersionRecord) -> Result<Option<Arc<RegisteredModel>>, ApiError> {
    let Some(from) = &record.trained_from else { return Ok(None) };
    let base = state.store.model_versions().get(&from.version).await?;
    let takes_weights = match &base {
        Some(base) => training::takes_weights(&base.input_schema()?),
        None => false,
    };
    let input_schema = record.input_schema()?;
    let run_on = ModelRecord {
        model: from.model.clone(),
        capability: record.capability.clone(),
        input_schema_json: record.input_schema_json.clone(),
        version: from.version.clone(),
        registered_at: record.created_at,
        output_schema_json: record.output_schema_json.clone(),
    };
    Ok(Some(Arc::new(RegisteredModel {
        record: run_on,
        input_schema,
        trained: Some(TrainedVersion {
            model: record.model.clone(),
            version: record.id.clone(),
            weights: takes_weights.then(|| from.weights.clone()),
        }),
    })))
}
