//! Which registered model a create's `version` names (`POST /v1/predictions`, docs/replicate.md):
//! `owner/name` (the model's current version), `owner/name:id` or a bare version id.
//!
//! A prediction runs on the version it names, and only there (its job's subject carries the
//! version: see `common::subjects`):
//!
//! | `version` names | answer |
//! |---|---|
//! | `owner/name` | created at the model's `latest_version` (the newest live one), as by its own route |
//! | a version the model has had, live or not | created at that version, its input checked against that version's schema; it waits in the queue until a runner of that version takes it |
//! | a version nobody registered (or of another model) | `404` |
//! | an unregistered model | `404` |
//! | nothing, or not a string of that form | `400` at `version` |

use std::sync::Arc;

use crate::problem::FieldError;
use common::domain::AccountId;

pub use crate::validate::create_prediction::VersionRef;
use crate::{
    error::ApiError,
    state::AppState,
    state::model_catalog::RegisteredModel,
    validate::field::{Field, Read},
};

/// Why a `version` names no model that can run.
#[derive(Debug)]
pub enum Unresolved {
    /// The field itself is wrong (reported with the body's other field errors).
    Field(FieldError),
    /// Any other answer (404, a superseded version, a failure).
    Api(ApiError),
}

impl<E: Into<ApiError>> From<E> for Unresolved {
    fn from(e: E) -> Self {
        Self::Api(e.into())
    }
}

/// The model a create's `version` field names, at the version it names (its latest for
/// `owner/name`): a registered model, or a trained version of an account's own model that
/// `account` may see (see [`crate::ops::trained`]).
pub async fn resolve(
    state: &AppState,
    account: &AccountId,
    version: Option<Field<VersionRef>>,
) -> Result<Arc<RegisteredModel>, Unresolved> {
    let mut errors = Vec::new();
    let Some(reference) = version.required("version", &mut errors) else {
        return Err(Unresolved::Field(errors.remove(0)));
    };
    let (model, id) = match reference {
        VersionRef::Model(model) => (model, None),
        VersionRef::ModelAt(model, id) => (model, Some(id)),
        VersionRef::Id(id) => {
            let known = state.store.model_versions().get(&id).await?;
            let version = known.ok_or_else(|| ApiError::not_found(format!("Version {id} not found.")))?;
            (version.model, Some(id))
        }
    };
    let missing_version = |id: &str| ApiError::not_found(format!("Version {id} of {model} not found."));
    let Some(registered) = state.models.get(&model).await? else {
        // An account's own model (that this account may see) at a trained version.
        let trained = crate::ops::trained::trained_model(state, account, &model, id.as_deref()).await?;
        return trained.ok_or_else(|| match &id {
            Some(id) => missing_version(id).into(),
            None => ApiError::not_found(format!("Model {model} not found.")).into(),
        });
    };
    match id {
        None => Ok(registered),
        Some(id) => {
            let found = state.models.version(&model, &id).await?;
            Ok(found.ok_or_else(|| missing_version(&id))?)
        }
    }
}
