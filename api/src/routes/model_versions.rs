//! A model's versions (docs/replicate.md): `GET /v1/models/{owner}/{name}/versions` and
//! `GET …/versions/{id}` (scope `read`), for a registered model and an account's own (whose
//! versions its trainings record; a private one's are 404 to other accounts).
//!
//! A version's `openapi_schema` has `components.schemas.Input` (the registered input schema)
//! and `Output`: the model's own (a Cog model's, with `x-cog-array-type` and
//! `x-cog-array-display`, which the official clients read to treat an iterator as one), or a
//! string (text, a file URL or compact JSON) for a model that declares none; and
//! `TrainingInput` when a runner serves a trainer of it. `cog_version` is [`COG_VERSION`]: the
//! registry does not record which Cog, if any, serves a model.

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
};
use chrono::{DateTime, Utc};
use common::store::ModelVersionRecord;
use serde::Serialize;
use serde_json::{Value, json};

use crate::{
    error::ApiError,
    http::auth::{Admin, Authorized, Read},
    http::page::{Listed, Page},
    ops::{
        self,
        owned::{VisibleModel, visible_model},
    },
    routes::openapi::problems,
    state::AppState,
};

/// The `cog_version` of every version (never null: replicate-python requires a string).
pub const COG_VERSION: &str = "unknown";

/// A model version.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct VersionView {
    /// The version id: the digest that predictions of it carry as `version`.
    pub id: String,
    /// When a runner first registered it.
    pub created_at: DateTime<Utc>,
    /// Always [`COG_VERSION`].
    pub cog_version: String,
    /// An OpenAPI document with `components.schemas.Input` and `Output`, and `TrainingInput`
    /// when a runner serves a trainer of the version.
    #[schema(value_type = Object)]
    pub openapi_schema: Value,
    /// For a version a training made: the model and version it was trained from, and the
    /// training; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trained_from: Option<TrainedFromView>,
}

/// What a trained version was trained from.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TrainedFromView {
    /// The model, `owner/name`.
    pub model: String,
    /// Its version.
    pub version: String,
    /// The training that made this version.
    pub training: String,
}

/// A model's versions, as [`Page`] builds it: one page holds them all.
pub type VersionPage = Page<VersionView>;

impl Listed for VersionView {
    const PAGE: &'static str = "VersionPage";
    const DESCRIPTION: &'static str = "A model's versions, newest first (one page holds them all).";
    const RESULTS: &'static str = "The versions.";
    const TOTAL_COUNT: Option<&'static str> = None;
    const NEXT: &'static str = "Always `null`.";
    const PREVIOUS: &'static str = "Always `null`.";
}

/// The version as clients see it.
pub(super) fn version_view(version: &ModelVersionRecord) -> Result<VersionView, ApiError> {
    let mut input = version.input_schema()?;
    if let Value::Object(schema) = &mut input {
        schema.entry("title").or_insert_with(|| json!("Input"));
    }
    let output = match version.output_schema().transpose()? {
        Some(declared) => declared,
        None => json!({"title": "Output", "type": "string", "description": "Text, a file URL, or compact JSON."}),
    };
    let mut openapi_schema = json!({
        "openapi": "3.0.2",
        "info": {"title": version.model.to_string(), "version": version.id},
        "paths": {},
        "components": {"schemas": {"Input": input, "Output": output}},
    });
    if let Some(training_input) = version.training_input_schema().transpose()? {
        openapi_schema["components"]["schemas"]["TrainingInput"] = training_input;
    }
    Ok(VersionView {
        id: version.id.clone(),
        created_at: version.created_at.to_chrono(),
        cog_version: COG_VERSION.to_owned(),
        openapi_schema,
        trained_from: version.trained_from.as_ref().map(|from| TrainedFromView {
            model: from.model.to_string(),
            version: from.version.clone(),
            training: from.training.to_string(),
        }),
    })
}

/// `GET /v1/models/{owner}/{name}/versions`
#[utoipa::path(
    get,
    path = "/models/{owner}/{name}/versions",
    operation_id = "listModelVersions",
    tag = "models",
    params(("owner" = String, Path, description = "The model's owner"), ("name" = String, Path, description = "The model's name")),
    responses((status = 200, description = "Every version the model has had, newest first", body = VersionPage), (status = 404, response = inline(problems::NotFound))),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    auth: Authorized<Read>,
    Path((owner, name)): Path<(String, String)>,
) -> Result<Json<VersionPage>, ApiError> {
    let versions = match visible_model(&state, &auth.caller.key.account_id, &owner, &name).await? {
        VisibleModel::Registered(model) => {
            let mut versions = ops::lists::versions(&state, &model.record.model).await?;
            if !versions.iter().any(|v| v.id == model.record.version) {
                versions.insert(0, ModelVersionRecord::of(&model.record));
            }
            versions
        }
        VisibleModel::Owned(owned) => ops::lists::versions(&state, &owned.model).await?,
    };
    let results = versions.iter().map(version_view).collect::<Result<_, _>>()?;
    Ok(Json(Page::uncounted(results, (None, None))))
}

/// `GET /v1/models/{owner}/{name}/versions/{id}`
#[utoipa::path(
    get,
    path = "/models/{owner}/{name}/versions/{id}",
    operation_id = "getModelVersion",
    tag = "models",
    params(
        ("owner" = String, Path, description = "The model's owner"),
        ("name" = String, Path, description = "The model's name"),
        ("id" = String, Path, description = "The version id"),
    ),
    responses((status = 200, description = "The version", body = VersionView), (status = 404, response = inline(problems::NotFound))),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    auth: Authorized<Read>,
    Path((owner, name, id)): Path<(String, String, String)>,
) -> Result<Json<VersionView>, ApiError> {
    let missing = || ApiError::not_found(format!("Version {id} of {owner}/{name} not found."));
    let model = visible_model(&state, &auth.caller.key.account_id, &owner, &name).await?;
    let version = ops::models::version_of(&state, &model, &id).await?.ok_or_else(missing)?;
    Ok(Json(version_view(&version)?))
}

/// `DELETE /v1/models/{owner}/{name}/versions/{id}`: a version of the account's own model
/// (a trained one), with its weights; `latest_version` moves to the newest left.
#[utoipa::path(
    delete,
    path = "/models/{owner}/{name}/versions/{id}",
    operation_id = "deleteModelVersion",
    tag = "models",
    params(
        ("owner" = String, Path, description = "The model's owner: the caller's account"),
        ("name" = String, Path, description = "The model's name"),
        ("id" = String, Path, description = "The version id"),
    ),
    responses((status = 204, description = "Deleted"), (status = 404, response = inline(problems::NotFound)), (status = 409, response = inline(problems::Conflict))),
    security(("bearer" = []))
)]
pub async fn delete(
    State(state): State<AppState>,
    auth: Authorized<Admin>,
    Path((owner, name, id)): Path<(String, String, String)>,
) -> Result<StatusCode, ApiError> {
    ops::models::delete_version(&state, &auth.caller.key.account_id, &owner, &name, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::store::ModelRecord;

    #[test]
    fn a_version_schema_has_input_and_output_and_nothing_is_null() {
        let record = ModelRecord::new(
            "demo/echo".parse().expect("model"),
            "text-generation",
            &json!({"type": "object", "properties": {"prompt": {"type": "string"}}}),
        );
        let view = version_view(&ModelVersionRecord::of(&record)).expect("renders");
        let json = serde_json::to_value(&view).expect("json");
        assert_eq!(json["id"], record.version.as_str());
        assert_eq!(json["cog_version"], COG_VERSION);
        let schemas = &json["openapi_schema"]["components"]["schemas"];
        assert_eq!(schemas["Input"]["properties"]["prompt"]["type"], "string");
        assert_eq!(schemas["Input"]["title"], "Input");
        assert_eq!(schemas["Output"]["type"], "string");
    }
}
