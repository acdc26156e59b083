//! An account's own models (`POST`, `PATCH` and `DELETE /v1/models…`, and a trained version's
//! `DELETE`), and what a model's view reads: its latest version and the caller's runs of it.
//!
//! A model goes with its trained versions and their weights; a version with its weights. Each
//! step of a delete may be done again, so a delete that fails part way is finished by the
//! next: the weights are first released (they expire), then the versions removed, then the
//! weights deleted at once where that works, and the model last.

use common::{
    domain::{AccountId, ModelRef},
    store::{ModelVersionRecord, OwnedModel},
};

use crate::{
    error::ApiError,
    ops::owned::VisibleModel,
    problem::FieldError,
    state::{AppState, model_catalog::RegisteredModel},
    validate::create_model::{ModelChange, NewModel},
};

/// Makes `new` a model of `account`: its owner must be the account's name, and no model
/// (registered or owned) may have its address.
pub async fn create(state: &AppState, account_id: &AccountId, new: NewModel) -> Result<OwnedModel, ApiError> {
    let account = state.store.accounts().get(account_id).await?.ok_or_else(ApiError::unauthorized)?;
    if new.owner != account.name {
        let why = format!("A model's owner must be your account's name, {}, not {:?}.", account.name, new.owner);
        return Err(ApiError::forbidden_because(why));
    }
    let model = ModelRef::new(&new.owner, &new.name).map_err(|e| {
        ApiError::invalid_fields(vec![FieldError::invalid("owner", format!("Not a model owner: {e}."))])
    })?;
    let exists = || ApiError::conflict(format!("A model {model} exists already."));
    if state.models.get(&model).await?.is_some() {
        return Err(exists());
    }
    let owned = OwnedModel {
        model: model.clone(),
        account_id: account_id.clone(),
        visibility: new.visibility,
        hardware: new.hardware.to_string(),
        description: new.description,
        links: new.links,
        created_at: bson::DateTime::now(),
        deleting_since: None,
    };
    if !state.store.owned_models().insert(&owned).await? {
        return Err(exists());
    }
    Ok(owned)
}

/// Applies `change` to `account`'s model `owner/name` (none: reads it); 404 for another
/// account's, a missing one and one being deleted alike.
pub async fn update(
    state: &AppState,
    account: &AccountId,
    owner: &str,
    name: &str,
    change: &ModelChange,
) -> Result<OwnedModel, ApiError> {
    let missing = || ApiError::not_found(format!("Model {owner}/{name} not found."));
    let model = ModelRef::new(owner, name).map_err(|_| missing())?;
    let owned_models = state.store.owned_models();
    let changed = if change.0.is_empty() {
        owned_models.get(&model).await?.filter(|m| &m.account_id == account && m.deleting_since.is_none())
    } else {
        owned_models.update(account, &model, &change.0).await?
    };
    changed.ok_or_else(missing)
}

/// Model `owner/name` if `account` owns it; otherwise (another account's, none, a name that is
/// no model's) the error `missing` makes, the same for each so a caller learns nothing of others.
async fn callers_model(
    state: &AppState,
    account: &AccountId,
    owner: &str,
    name: &str,
    missing: impl Fn() -> ApiError,
) -> Result<ModelRef, ApiError> {
    let model = ModelRef::new(owner, name).map_err(|_| missing())?;
    match state.store.owned_models().get(&model).await? {
        Some(owned) if &owned.account_id == account => Ok(model),
        _ => Err(missing()),
    }
}

/// Deletes `account`'s model `owner/name` with its trained versions and their weights; 409
/// while a deployment runs it or a training into it is under way.
pub async fn delete(state: &AppState, account: &AccountId, owner: &str, name: &str) -> Result<(), ApiError> {
    let missing = || ApiError::not_found(format!("Model {owner}/{name} not found."));
    let model = callers_model(state, account, owner, name, missing).await?;
    if state.store.deployments().uses_model(&model).await? {
        return Err(ApiError::conflict(format!("A deployment runs {model}: delete or change it first.")));
    }
    // Marked first, then no training into it may be under way: one created meanwhile is
    // refused it, one ending meanwhile removes the version it records (see
    // `common::store::owned_models`).
    let owned_models = state.store.owned_models();
    if !owned_models.mark_deleting(account, &model).await? {
        return Err(missing());
    }
    let training = state.store.predictions().trainings_into(&model).await?;
    if let Some(training) = training {
        owned_models.unmark_deleting(account, &model).await?;
        return Err(ApiError::conflict(format!(
            "Training {training} into {model} is under way: cancel it or wait for it to end, then delete the model."
        )));
    }
    // Its trained versions go with it, and their weights (kept only while a version exists),
    // so a model made again at the address starts with none. The model itself goes last.
    let versions = state.store.model_versions();
    let trained = versions.list_for(&model).await?;
    for version in &trained {
        release_weights(state, version).await?;
    }
    versions.remove_all_of(&model).await?;
    for version in &trained {
        drop_weights(state, version).await;
    }
    if !owned_models.delete(account, &model).await? {
        return Err(missing());
    }
    Ok(())
}

/// Deletes version `id` of `account`'s model `owner/name` (a trained one) with its weights;
/// the model's `latest_version` moves to the newest left. 409 while a deployment runs it.
pub async fn delete_version(
    state: &AppState,
    account: &AccountId,
    owner: &str,
    name: &str,
    id: &str,
) -> Result<(), ApiError> {
    let missing = || ApiError::not_found(format!("Version {id} of {owner}/{name} not found."));
    let model = callers_model(state, account, owner, name, missing).await?;
    if state.store.deployments().uses_version(&model, id).await? {
        return Err(ApiError::conflict(format!(
            "A deployment runs version {id} of {model}: change or delete the deployment first."
        )));
    }
    let versions = state.store.model_versions();
    let Some(version) = versions.get(id).await?.filter(|v| v.model == model) else {
        return Err(missing());
    };
    release_weights(state, &version).await?;
    versions.remove(&model, id).await?;
    drop_weights(state, &version).await;
    Ok(())
}

/// Version `id` of the model `visible` (seen by the caller), or `None` when the model has no
/// such version: a registered model's current one is known even before its record is read.
pub async fn version_of(
    state: &AppState,
    visible: &VisibleModel,
    id: &str,
) -> Result<Option<ModelVersionRecord>, ApiError> {
    let stored = state.store.model_versions().get(id).await?;
    Ok(match (visible, stored) {
        (VisibleModel::Registered(model), Some(v)) if v.model == model.record.model => Some(v),
        (VisibleModel::Registered(model), _) if id == model.record.version => {
            Some(ModelVersionRecord::of(&model.record))
        }
        (VisibleModel::Owned(owned), Some(v)) if v.model == owned.model => Some(v),
        _ => None,
    })
}

/// The version a registered model runs now: its record, or the one its registration implies.
pub async fn current_version(state: &AppState, model: &RegisteredModel) -> Result<ModelVersionRecord, ApiError> {
    Ok(match state.store.model_versions().get(&model.record.version).await? {
        Some(version) => version,
        None => ModelVersionRecord::of(&model.record),
    })
}

/// How many predictions of `model` the caller's `account` has made (a model's `run_count`:
/// other accounts' activity is not revealed).
pub async fn run_count(state: &AppState, account: &AccountId, model: &ModelRef) -> Result<u64, ApiError> {
    Ok(state.store.predictions().count_of_model(account, model).await?)
}

/// Lets the weights of `version` go before it is removed: they expire shortly
/// ([`common::domain::training::WEIGHTS_RELEASED`]), so the file expiry of retention removes
/// them once no version names them, whatever fails after this. Should the version stay (the
/// delete failed and was not tried again), the expiry finds it naming them and keeps them.
async fn release_weights(state: &AppState, version: &ModelVersionRecord) -> Result<(), ApiError> {
    if let Some(from) = &version.trained_from {
        let until = common::domain::training::weights_released_until(bson::DateTime::now());
        state.files.records().postpone(&from.weights, until).await?;
    }
    Ok(())
}

/// Deletes the weights of `version`, a removed trained version, at once; a failure is logged
/// (their expiry, set by [`release_weights`], removes them later).
async fn drop_weights(state: &AppState, version: &ModelVersionRecord) {
    if let Some(from) = &version.trained_from
        && let Err(e) = state.files.delete(&from.weights).await
    {
        tracing::warn!(file = %from.weights, error = %e, "weights of a deleted version not removed yet; they expire");
    }
}
