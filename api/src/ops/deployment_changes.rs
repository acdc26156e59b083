//! Deployments as the account changes them, for the API's routes and the console's pages
//! alike: create (release 1), change (release `number + 1`, written only if the release it
//! replaces is still current), delete, and the look-up of the caller's own (another
//! account's is 404, never 403).

use bson::DateTime;
use common::{
    domain::{AccountId, ModelRef},
    store::{
        Account,
        deployments::{DeploymentRecord, Release, ReleaseConfiguration},
        is_duplicate_key,
    },
};

use crate::{
    error::ApiError,
    state::AppState,
    validate::deployment::{DeploymentChange, NewDeployment},
};

async fn account(state: &AppState, id: &AccountId) -> Result<Account, ApiError> {
    state.store.accounts().get(id).await?.ok_or_else(|| ApiError::not_found("The key's account does not exist."))
}

/// `account`'s deployment `owner/name` (404 when `owner` is not the account's name).
pub async fn owned(
    state: &AppState,
    account: &AccountId,
    owner: &str,
    name: &str,
) -> Result<DeploymentRecord, ApiError> {
    let missing = || ApiError::not_found(format!("Deployment {owner}/{name} not found."));
    let found = of_account(state, account, name).await?;
    found.filter(|d| d.owner == owner).ok_or_else(missing)
}

/// `account`'s deployment `name`, if it has one.
pub async fn of_account(
    state: &AppState,
    account: &AccountId,
    name: &str,
) -> Result<Option<DeploymentRecord>, ApiError> {
    Ok(state.store.deployments().get(account, name).await?)
}

/// Checks that `version` is a version `model` has had: a well-formed body naming a model or a
/// version that does not exist is 404, as a prediction's model or a training's destination is.
async fn check_version(state: &AppState, model: &ModelRef, version: &str) -> Result<(), ApiError> {
    if state.models.get(model).await?.is_none() {
        return Err(ApiError::not_found(format!("Model {model} not found: no runner has registered it.")));
    }
    if state.models.version(model, version).await?.is_none() {
        return Err(ApiError::not_found(format!("Version {version} of {model} not found.")));
    }
    Ok(())
}

/// Creates `new` in `account_id` at release 1 (409 when the name is taken).
pub async fn create(
    state: &AppState,
    account_id: &AccountId,
    new: NewDeployment,
) -> Result<DeploymentRecord, ApiError> {
    check_version(state, &new.model, &new.version).await?;
    check_priority(state, account_id, new.priority).await?;
    let account = account(state, account_id).await?;
    let now = DateTime::now();
    let record = DeploymentRecord {
        id: DeploymentRecord::id_of(&account.id, &new.name),
        account_id: account.id.clone(),
        owner: account.name.clone(),
        name: new.name,
        created_at: now,
        current_release: Release {
            number: 1,
            model: new.model,
            version: new.version,
            created_at: now,
            created_by: account.name,
            configuration: ReleaseConfiguration {
                hardware: new.hardware,
                min_instances: new.min_instances,
                max_instances: new.max_instances,
                priority: new.priority,
            },
        },
    };
    match state.store.deployments().insert(&record).await {
        Ok(()) => Ok(record),
        Err(e) if is_duplicate_key(&e) => {
            Err(ApiError::conflict(format!("The account already has a deployment named {}.", record.name)))
        }
        Err(e) => Err(e.into()),
    }
}

/// Applies `change` to `current` as its next release (409 when another change came first).
pub async fn change(
    state: &AppState,
    current: DeploymentRecord,
    change: DeploymentChange,
) -> Result<DeploymentRecord, ApiError> {
    let release = &current.current_release;
    if let Some(version) = &change.version {
        check_version(state, &release.model, version).await?;
    }
    check_priority(state, &current.account_id, change.priority).await?;
    let by = account(state, &current.account_id).await?.name;
    let configuration = &release.configuration;
    let next = Release {
        number: release.number + 1,
        model: release.model.clone(),
        version: change.version.unwrap_or_else(|| release.version.clone()),
        created_at: DateTime::now(),
        created_by: by,
        configuration: ReleaseConfiguration {
            hardware: change.hardware.unwrap_or_else(|| configuration.hardware.clone()),
            min_instances: change.min_instances.unwrap_or(configuration.min_instances),
            max_instances: change.max_instances.unwrap_or(configuration.max_instances),
            priority: change.priority.or(configuration.priority),
        },
    };
    if !state.store.deployments().release(&current.account_id, &current.name, release.number, &next).await? {
        return Err(ApiError::conflict(format!(
            "Deployment {} changed meanwhile; read it again and retry.",
            current.full_name()
        )));
    }
    Ok(DeploymentRecord { current_release: next, ..current })
}

/// 400 at `priority` when a deployment's default priority is above its account's limit.
async fn check_priority(
    state: &AppState,
    account: &AccountId,
    priority: Option<common::domain::Priority>,
) -> Result<(), ApiError> {
    let Some(priority) = priority else { return Ok(()) };
    let max = state.account_limits.standing(account).await?.limits.max_priority;
    if priority.above(max) {
        return Err(ApiError::invalid_fields(vec![crate::problem::FieldError::invalid(
            "priority",
            format!(
                "This account may ask for at most {max} priority; the operator sets it with api admin set-priority."
            ),
        )]));
    }
    Ok(())
}

/// Deletes `deployment`; its predictions keep their `deployment`.
pub async fn delete(state: &AppState, deployment: &DeploymentRecord) -> Result<(), ApiError> {
    state.store.deployments().delete(&deployment.account_id, &deployment.name).await?;
    Ok(())
}
