//! The lists that the routes and the console both show, one read each: the account's
//! deployments, API keys and files, a page at a time (`offset`, at most `limit`), newest
//! first, with how many there are in all; a model's versions; a prediction's webhook delivery
//! attempts; the operator's collections of models and the pools' prices; the models a caller
//! may see, registered and owned.

use std::collections::BTreeMap;

use common::{
    domain::{AccountId, ModelRef, Pool, PredictionId, Price},
    store::{FileRecord, ModelRecord, ModelVersionRecord, OwnedModel, WebhookAttempt, deployments::DeploymentRecord},
};

use crate::{
    error::ApiError,
    state::AppState,
    store::{ApiCollections, ApiKeyRecord, collections::ModelCollection},
};

/// A page of `account`'s deployments, and how many it has.
pub async fn deployments(
    state: &AppState,
    account: &AccountId,
    offset: u64,
    limit: u32,
) -> Result<(Vec<DeploymentRecord>, u64), ApiError> {
    Ok(state.store.deployments().list(account, offset, i64::from(limit)).await?)
}

/// A page of `account`'s API keys, and how many it has.
pub async fn api_keys(
    state: &AppState,
    account: &AccountId,
    offset: u64,
    limit: u32,
) -> Result<(Vec<ApiKeyRecord>, u64), ApiError> {
    Ok(state.store.api_keys().list_for_account(account, offset, i64::from(limit)).await?)
}

/// A page of `account`'s files (uploads and file outputs), and how many it has.
pub async fn files(
    state: &AppState,
    account: &AccountId,
    offset: u64,
    limit: u32,
) -> Result<(Vec<FileRecord>, u64), ApiError> {
    Ok(state.files.list(account, offset, limit).await?)
}

/// `model`'s versions, newest first.
pub async fn versions(state: &AppState, model: &ModelRef) -> Result<Vec<ModelVersionRecord>, ApiError> {
    Ok(state.store.model_versions().list_for(model).await?)
}

/// The webhook delivery attempts of `prediction`, in the order they were made.
pub async fn delivery_attempts(state: &AppState, prediction: &PredictionId) -> Result<Vec<WebhookAttempt>, ApiError> {
    Ok(state.store.webhook_attempts().for_prediction(prediction).await?)
}

/// The price per second of every hardware pool that has one.
pub async fn prices(state: &AppState) -> Result<BTreeMap<Pool, Price>, ApiError> {
    Ok(state.store.prices().all().await?)
}

/// A page of the operator's collections of models, by slug, and how many there are.
pub async fn collections(state: &AppState, offset: u64, limit: u32) -> Result<(Vec<ModelCollection>, u64), ApiError> {
    Ok(state.store.collections().page(offset, i64::from(limit)).await?)
}

/// The collection `slug`, if there is one.
pub async fn collection(state: &AppState, slug: &str) -> Result<Option<ModelCollection>, ApiError> {
    Ok(state.store.collections().get(slug).await?)
}

/// A page of the registered models, by address, and how many there are.
pub async fn registered_models(state: &AppState, offset: u64, limit: i64) -> Result<(Vec<ModelRecord>, u64), ApiError> {
    Ok(state.store.models().list(offset, limit).await?)
}

/// A page of the accounts' own models that `account` may see (public ones and its own), by
/// address, and how many there are.
pub async fn owned_models(
    state: &AppState,
    account: &AccountId,
    offset: u64,
    limit: i64,
) -> Result<(Vec<OwnedModel>, u64), ApiError> {
    Ok(state.store.owned_models().page_visible_to(account, offset, limit).await?)
}
