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
use common::domain::{AccountId, ModelRef};
use serde_json::Value;

use crate::{error::ApiError, state::AppState, state::model_catalog::RegisteredModel};

/// The longest version id accepted (ours are 64 hex digits).
const MAX_ID_LEN: usize = 128;

/// A parsed `version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionRef {
    /// `owner/name`: whatever version the model has now.
    Model(ModelRef),
    /// `owner/name:id`.
    ModelAt(ModelRef, String),
    /// A bare version id.
    Id(String),
}

fn is_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_ID_LEN && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

impl VersionRef {
    /// Parses `owner/name`, `owner/name:id` or `id`.
    pub fn parse(text: &str) -> Option<Self> {
        match text.split_once(':') {
            Some((model, id)) => Some(Self::ModelAt(model.parse().ok()?, is_id(id).then(|| id.to_owned())?)),
            None if text.contains('/') => text.parse().ok().map(Self::Model),
            None => is_id(text).then(|| Self::Id(text.to_owned())),
        }
    }
}

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
    version: Option<&Value>,
) -> Result<Arc<RegisteredModel>, Unresolved> {
    let text = match version {
        None | Some(Value::Null) => return Err(Unresolved::Field(FieldError::missing("version"))),
        Some(Value::String(s)) => s,
        Some(_) => return Err(Unresolved::Field(FieldError::invalid("version", FORM))),
    };
    let reference = VersionRef::parse(text).ok_or_else(|| Unresolved::Field(FieldError::invalid("version", FORM)))?;
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

const FORM: &str = "Must be 'owner/name', 'owner/name:<version id>' or a version id.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_forms_parse() {
        let m: ModelRef = "demo/echo".parse().expect("model");
        assert_eq!(VersionRef::parse("demo/echo"), Some(VersionRef::Model(m.clone())));
        assert_eq!(VersionRef::parse("demo/echo:abc123"), Some(VersionRef::ModelAt(m, "abc123".into())));
        assert_eq!(VersionRef::parse("abc123"), Some(VersionRef::Id("abc123".into())));
    }

    #[test]
    fn anything_else_is_refused() {
        for bad in ["", "demo/echo:", ":abc", "demo/ec.ho", "a b", "demo/echo:a:b", "Demo/echo", &"a".repeat(129)] {
            assert_eq!(VersionRef::parse(bad), None, "{bad:?}");
        }
    }
}
