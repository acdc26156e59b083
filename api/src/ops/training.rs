//! Starting a training, shared by the API's create route and the console's training form: a
//! training is a job of its own kind in the one pipeline of predictions (see
//! `common::domain::training`), so once validated it is stored and published as a prediction
//! is ([`submit::store_and_publish`]).
//!
//! | asked | answer |
//! |---|---|
//! | a model or version nobody registered | `404` |
//! | a version no runner serves a trainer of (`RUNNER_COG_TRAIN`) | `400` at `version` |
//! | a body or input that fails (input checked against the trainer's `TrainingInput`) | `400`, every failing field |
//! | a destination that is not a model of the caller's account | `404` |

use common::domain::{ApiSurface, JobKind, ModelRef, Prediction};

use crate::{
    error::ApiError,
    http::auth::Caller,
    ops::submit,
    problem::FieldError,
    state::AppState,
    state::model_catalog::RegisteredModel,
    validate::create_training::{self, CreateTrainingBody},
};

/// The `starting` training `body` asks for on version `version` of `model`, or why not.
pub async fn validated(
    state: &AppState,
    caller: &Caller,
    model: &ModelRef,
    version: &str,
    body: CreateTrainingBody,
    surface: ApiSurface,
) -> Result<Prediction, ApiError> {
    if state.models.get(model).await?.is_none() {
        return Err(ApiError::not_found(format!("Model {model} not found.")));
    }
    let base = state.models.version(model, version).await?;
    let base = base.ok_or_else(|| ApiError::not_found(format!("Version {version} of {model} not found.")))?;
    let recorded = state.store.model_versions().get(version).await?;
    let Some(schema) = recorded.as_ref().and_then(|v| v.training_input_schema()).transpose()? else {
        return Err(ApiError::invalid_fields(vec![FieldError::invalid(
            "version",
            format!(
                "Version {version} of {model} cannot be trained: no runner serves a trainer of it (RUNNER_COG_TRAIN)."
            ),
        )]));
    };
    let destination = create_training::destination(body.destination);
    if let Ok(destination) = &destination {
        destination_of(state, caller, destination).await?;
    }
    let trainer = RegisteredModel { record: base.record.clone(), input_schema: schema, trained: None };
    let more = destination.as_ref().err().cloned().into_iter().collect();
    let mut training =
        submit::validated(state, caller, &trainer, body.create, surface, Default::default(), more).await?;
    training.kind = JobKind::Training;
    training.destination = destination.ok();
    Ok(training)
}

/// Checks that `destination` is a model of the caller's account (404 otherwise: another
/// account's is not revealed).
async fn destination_of(state: &AppState, caller: &Caller, destination: &ModelRef) -> Result<(), ApiError> {
    match state.store.owned_models().get(destination).await? {
        // A model being deleted takes no new training (see `common::store::owned_models`).
        Some(owned) if owned.account_id == caller.key.account_id && owned.deleting_since.is_none() => Ok(()),
        _ => Err(ApiError::not_found(format!(
            "Model {destination} not found: a training's destination is a model of your account (POST /models makes one)."
        ))),
    }
}
