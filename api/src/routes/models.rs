//! Models (docs/replicate.md), in the shape Replicate's clients read: `GET /v1/models` (paginated)
//! and `GET /v1/models/{owner}/{name}` (scope `read`; their versions are
//! [`super::model_versions`]), and an account's own models: `POST /v1/models` and `DELETE /v1/models/{owner}/{name}` (scope
//! `admin`; see [`common::store::owned_models`]).
//!
//! Every registered model is `public`: any account may run it. An account's own model is
//! `public` or `private` (seen by its account only; another account gets 404), and has no
//! `latest_version` until a training records one. `run_count` counts the caller's
//! own predictions of the model (other accounts' activity is not revealed).

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
};
use common::{domain::ModelRef, store::OwnedModel};

use crate::{
    error::ApiError,
    http::auth::{Admin, Authorized, Read},
    http::extract::{Body, Query},
    http::page::Page,
    http::surface::Surface,
    ops::owned::{self, VisibleModel, visible_model},
    problem::FieldError,
    routes::{model_versions, openapi::problems, search},
    state::AppState,
    validate::{
        create_model,
        paging::PagingParams,
        search_query::{ListSearchParams, ModelListQuery},
    },
};

use super::model_view::{ModelPage, ModelView, model_view, owned_view};

/// `GET /v1/models`
#[utoipa::path(
    get,
    path = "/models",
    operation_id = "listModels",
    tag = "models",
    params(PagingParams, ListSearchParams),
    responses((status = 200, description = "A page of the models the caller may see, by address; with `query`, a page of a search (the `next` of `QUERY /models`), best match first", body = ModelPage), (status = 400, response = inline(problems::BadRequest))),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Surface(surface): Surface,
    auth: Authorized<Read>,
    Query(query): Query<ModelListQuery>,
) -> Result<Json<ModelPage>, ApiError> {
    let account = &auth.caller.key.account_id;
    let paging = query.paging;
    if let Some(text) = &query.text {
        let link = search::search_link(&state, surface, "models", text, paging.limit);
        return Ok(Json(search::matching(&state, surface, account, text, paging, link).await?));
    }
    let (models, total) = match query.order {
        Some(order) => owned::sorted_visible_models(&state, account, paging, order).await?,
        None => owned::visible_models(&state, account, paging).await?,
    };
    let mut results = Vec::with_capacity(models.len());
    for model in models {
        results.push(match model {
            VisibleModel::Registered(model) => model_view(&state, surface, account, &model).await?,
            VisibleModel::Owned(model) => owned_view(&state, surface, account, &model).await?,
        });
    }
    let (next, previous) = paging.links(total, &format!("{}/models", state.links.api(surface)));
    // A sorted list's neighbours are sorted the same way.
    let sorted = |link: String| match query.order {
        Some(order) => format!("{link}&sort_by={}&sort_direction={}", order.by.as_str(), order.direction.as_str()),
        None => link,
    };
    Ok(Json(Page::uncounted(results, (next.map(sorted), previous.map(sorted)))))
}

/// `GET /v1/models/{owner}/{name}`
#[utoipa::path(
    get,
    path = "/models/{owner}/{name}",
    operation_id = "getModel",
    tag = "models",
    params(("owner" = String, Path, description = "The model's owner"), ("name" = String, Path, description = "The model's name")),
    responses((status = 200, description = "The model and its current version", body = ModelView), (status = 404, response = inline(problems::NotFound))),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    Surface(surface): Surface,
    auth: Authorized<Read>,
    Path((owner, name)): Path<(String, String)>,
) -> Result<Json<ModelView>, ApiError> {
    let account = &auth.caller.key.account_id;
    Ok(Json(match visible_model(&state, account, &owner, &name).await? {
        VisibleModel::Registered(model) => model_view(&state, surface, account, &model).await?,
        VisibleModel::Owned(owned) => owned_view(&state, surface, account, &owned).await?,
    }))
}

/// `POST /v1/models`
#[utoipa::path(
    post,
    path = "/models",
    operation_id = "createModel",
    tag = "models",
    request_body(content = create_model::CreateModelBody, content_type = "application/json"),
    responses((status = 201, description = "Created, with no version yet", body = ModelView), (status = 400, response = inline(problems::BadRequest)), (status = 409, response = inline(problems::Conflict)), (status = 413, response = inline(problems::TooLarge))),
    security(("bearer" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    Surface(surface): Surface,
    auth: Authorized<Admin>,
    Body(new): Body<create_model::NewModel>,
) -> Result<(StatusCode, Json<ModelView>), ApiError> {
    let account_id = &auth.caller.key.account_id;
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
    Ok((StatusCode::CREATED, Json(owned_view(&state, surface, account_id, &owned).await?)))
}

/// `GET /v1/models/{owner}/{name}/readme` (Replicate's `models.readme.get`): the model's README
/// as Markdown. The service keeps no README of its own for a model: it is the model's address
/// as a title and its description.
#[utoipa::path(
    get,
    path = "/models/{owner}/{name}/readme",
    operation_id = "getModelReadme",
    tag = "models",
    params(("owner" = String, Path, description = "The model's owner"), ("name" = String, Path, description = "The model's name")),
    responses((status = 200, description = "The README, Markdown", content_type = "text/markdown", body = String), (status = 404, response = inline(problems::NotFound))),
    security(("bearer" = []))
)]
pub async fn readme(
    State(state): State<AppState>,
    Surface(surface): Surface,
    auth: Authorized<Read>,
    Path((owner, name)): Path<(String, String)>,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    let account = &auth.caller.key.account_id;
    let view = match visible_model(&state, account, &owner, &name).await? {
        VisibleModel::Registered(model) => model_view(&state, surface, account, &model).await?,
        VisibleModel::Owned(owned) => owned_view(&state, surface, account, &owned).await?,
    };
    let text = format!("# {}/{}\n\n{}\n", view.owner, view.name, view.description);
    Ok(([(axum::http::header::CONTENT_TYPE, "text/markdown; charset=utf-8")], text).into_response())
}

/// `GET /v1/models/{owner}/{name}/examples` (Replicate's `models.examples.list`): the example
/// predictions its author picked. The service keeps none: an empty page, for a model the
/// caller may see.
#[utoipa::path(
    get,
    path = "/models/{owner}/{name}/examples",
    operation_id = "listModelExamples",
    tag = "models",
    params(("owner" = String, Path, description = "The model's owner"), ("name" = String, Path, description = "The model's name")),
    responses((status = 200, description = "An empty page of predictions, `{results: [], next: null, previous: null, total_count: 0}`: no examples are kept", body = Object), (status = 404, response = inline(problems::NotFound))),
    security(("bearer" = []))
)]
pub async fn examples(
    State(state): State<AppState>,
    auth: Authorized<Read>,
    Path((owner, name)): Path<(String, String)>,
) -> Result<Json<serde_json::Value>, ApiError> {
    visible_model(&state, &auth.caller.key.account_id, &owner, &name).await?;
    Ok(Json(serde_json::json!({ "next": null, "previous": null, "results": [], "total_count": 0 })))
}

/// `PATCH /v1/models/{owner}/{name}` (Replicate's `models.update`): what the owner says of a
/// model of its account (description, links, visibility).
#[utoipa::path(
    patch,
    path = "/models/{owner}/{name}",
    operation_id = "updateModel",
    tag = "models",
    params(("owner" = String, Path, description = "The model's owner: the caller's account"), ("name" = String, Path, description = "The model's name")),
    request_body = create_model::UpdateModelBody,
    responses((status = 200, description = "The model as changed", body = ModelView), (status = 400, response = inline(problems::BadRequest)), (status = 404, response = inline(problems::NotFound))),
    security(("bearer" = []))
)]
pub async fn update(
    State(state): State<AppState>,
    Surface(surface): Surface,
    auth: Authorized<Admin>,
    Path((owner, name)): Path<(String, String)>,
    Body(change): Body<create_model::ModelChange>,
) -> Result<Json<ModelView>, ApiError> {
    let account = &auth.caller.key.account_id;
    let missing = || ApiError::not_found(format!("Model {owner}/{name} not found."));
    let model = ModelRef::new(&owner, &name).map_err(|_| missing())?;
    let owned_models = state.store.owned_models();
    let changed = if change.0.is_empty() {
        owned_models.get(&model).await?.filter(|m| &m.account_id == account && m.deleting_since.is_none())
    } else {
        owned_models.update(account, &model, &change.0).await?
    };
    let changed = changed.ok_or_else(missing)?;
    Ok(Json(owned_view(&state, surface, account, &changed).await?))
}

/// `DELETE /v1/models/{owner}/{name}`: with its trained versions and their weights.
#[utoipa::path(
    delete,
    path = "/models/{owner}/{name}",
    operation_id = "deleteModel",
    tag = "models",
    params(("owner" = String, Path, description = "The model's owner: the caller's account"), ("name" = String, Path, description = "The model's name")),
    responses((status = 204, description = "Deleted"), (status = 404, response = inline(problems::NotFound)), (status = 409, response = inline(problems::Conflict))),
    security(("bearer" = []))
)]
pub async fn delete(
    State(state): State<AppState>,
    auth: Authorized<Admin>,
    Path((owner, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let account = &auth.caller.key.account_id;
    let missing = || ApiError::not_found(format!("Model {owner}/{name} not found."));
    let model = ModelRef::new(&owner, &name).map_err(|_| missing())?;
    match state.store.owned_models().get(&model).await? {
        Some(owned) if &owned.account_id == account => {}
        _ => return Err(missing()),
    }
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
    // so a model made again at the address starts with none. The model itself goes last: a
    // delete that fails part way leaves it there, and the next delete finishes the rest.
    let versions = state.store.model_versions();
    let trained = versions.list_for(&model).await?;
    for version in &trained {
        model_versions::release_weights(&state, version).await?;
    }
    versions.remove_all_of(&model).await?;
    for version in &trained {
        model_versions::drop_weights(&state, version).await;
    }
    if !state.store.owned_models().delete(account, &model).await? {
        return Err(missing());
    }
    Ok(StatusCode::NO_CONTENT)
}
