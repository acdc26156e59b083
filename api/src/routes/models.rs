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

use crate::{
    error::ApiError,
    http::auth::{Admin, Authorized, Read},
    http::extract::{Body, Query},
    http::page::Page,
    http::surface::Surface,
    ops::{
        self,
        owned::{self, VisibleModel, visible_model},
    },
    routes::{openapi::problems, search},
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
    let owned = ops::models::create(&state, account_id, new).await?;
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
    let changed = ops::models::update(&state, account, &owner, &name, &change).await?;
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
    ops::models::delete(&state, &auth.caller.key.account_id, &owner, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
