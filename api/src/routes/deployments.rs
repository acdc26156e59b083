//! Deployments, in Replicate's shape: a name in the account that runs one model version on one
//! hardware pool, changed release by release. `POST /v1/deployments`, `PATCH` and `DELETE
//! /v1/deployments/{owner}/{name}` need `admin`; `GET /v1/deployments` and `GET …/{name}`
//! need `read`; `POST …/{name}/predictions` needs `write` and runs the current release's
//! version on runners of its pool (see [`crate::routes::predictions::create_for`]). `owner` is
//! the account's name; another account's deployment is 404. What a change does is
//! [`crate::ops::deployment_changes`]'s, which the console's page calls too.

use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
    response::Response,
};
use chrono::Utc;
use common::{domain::AccountId, store::deployments::DeploymentRecord};
use serde::Serialize;

use crate::{
    error::ApiError,
    http::auth::{Admin, Authorized, Caller, Read, Write},
    http::extract::{Body, JobOptions, PreferWait, Query, Sent},
    http::page::{Listed, Page},
    http::surface::Surface,
    ops::{self, deployment_changes},
    routes::openapi::problems,
    routes::{account::AccountName, predictions},
    state::AppState,
    validate::{
        create_prediction::CreatePredictionBody,
        deployment,
        paging::{Paging, PagingParams},
    },
};

/// What a release runs on.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ConfigurationView {
    /// The hardware pool.
    pub hardware: String,
    /// The fewest runners an autoscaler keeps.
    pub min_instances: u32,
    /// The most runners an autoscaler starts.
    pub max_instances: u32,
    /// The priority of its predictions that ask for none.
    pub priority: common::domain::Priority,
}

/// A release.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReleaseView {
    /// 1, then one more for each change.
    pub number: u32,
    /// `owner/name` of the model.
    pub model: String,
    /// The version its predictions run.
    pub version: String,
    /// When it was made.
    pub created_at: chrono::DateTime<Utc>,
    /// The account that made it.
    pub created_by: AccountName,
    /// What it runs on.
    pub configuration: ConfigurationView,
}

/// A deployment.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeploymentView {
    /// The account's name.
    pub owner: String,
    /// The deployment's name.
    pub name: String,
    /// The release its predictions run.
    pub current_release: ReleaseView,
}

/// A page of the list, as [`Page`] builds it.
pub type DeploymentPage = Page<DeploymentView>;

impl Listed for DeploymentView {
    const PAGE: &'static str = "DeploymentPage";
    const DESCRIPTION: &'static str = "A page of deployments, newest first.";
    const RESULTS: &'static str = "The deployments.";
    const TOTAL_COUNT: Option<&'static str> = None;
}

fn view(d: &DeploymentRecord) -> DeploymentView {
    let r = &d.current_release;
    DeploymentView {
        owner: d.owner.clone(),
        name: d.name.clone(),
        current_release: ReleaseView {
            number: r.number,
            model: r.model.to_string(),
            version: r.version.clone(),
            created_at: r.created_at.to_chrono(),
            created_by: AccountName::of(&r.created_by),
            configuration: ConfigurationView {
                hardware: r.configuration.hardware.to_string(),
                min_instances: r.configuration.min_instances,
                max_instances: r.configuration.max_instances,
                priority: r.configuration.priority.unwrap_or_default(),
            },
        },
    }
}

async fn owned(state: &AppState, caller: &Caller, owner: &str, name: &str) -> Result<DeploymentRecord, ApiError> {
    deployment_changes::owned(state, &caller.key.account_id, owner, name).await
}

/// `POST /v1/deployments`
#[utoipa::path(
    post,
    path = "/deployments",
    operation_id = "createDeployment",
    tag = "deployments",
    request_body(content = deployment::CreateDeploymentBody, content_type = "application/json"),
    responses((status = 201, description = "Created, release 1", body = DeploymentView), (status = 400, response = inline(problems::BadRequest)), (status = 404, response = inline(problems::NotFound)), (status = 409, response = inline(problems::Conflict)), (status = 413, response = inline(problems::TooLarge))),
    security(("bearer" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    auth: Authorized<Admin>,
    Body(new): Body<deployment::NewDeployment>,
) -> Result<(StatusCode, Json<DeploymentView>), ApiError> {
    let record = deployment_changes::create(&state, &auth.caller.key.account_id, new).await?;
    Ok((StatusCode::CREATED, Json(view(&record))))
}

/// `GET /v1/deployments`
#[utoipa::path(
    get,
    path = "/deployments",
    operation_id = "listDeployments",
    tag = "deployments",
    params(PagingParams),
    responses((status = 200, description = "A page of the account's deployments, newest first", body = DeploymentPage), (status = 400, response = inline(problems::BadRequest))),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Surface(surface): Surface,
    auth: Authorized<Read>,
    Query(paging): Query<Paging>,
) -> Result<Json<DeploymentPage>, ApiError> {
    let account: &AccountId = &auth.caller.key.account_id;
    let (records, total) = ops::lists::deployments(&state, account, paging.offset, paging.limit).await?;
    let links = paging.links(total, &format!("{}/deployments", state.links.api(surface)));
    Ok(Json(Page::uncounted(records.iter().map(view).collect(), links)))
}

/// `GET /v1/deployments/{owner}/{name}`
#[utoipa::path(
    get,
    path = "/deployments/{owner}/{name}",
    operation_id = "getDeployment",
    tag = "deployments",
    params(("owner" = String, Path, description = "The account's name"), ("name" = String, Path, description = "The deployment's name")),
    responses((status = 200, description = "The deployment", body = DeploymentView), (status = 404, response = inline(problems::NotFound))),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    auth: Authorized<Read>,
    Path((owner, name)): Path<(String, String)>,
) -> Result<Json<DeploymentView>, ApiError> {
    Ok(Json(view(&owned(&state, &auth.caller, &owner, &name).await?)))
}

/// `PATCH /v1/deployments/{owner}/{name}`: any change makes release `number + 1`.
#[utoipa::path(
    patch,
    path = "/deployments/{owner}/{name}",
    operation_id = "updateDeployment",
    tag = "deployments",
    params(("owner" = String, Path, description = "The account's name"), ("name" = String, Path, description = "The deployment's name")),
    request_body(content = deployment::UpdateDeploymentBody, content_type = "application/json"),
    responses((status = 200, description = "The deployment at its new release", body = DeploymentView), (status = 400, response = inline(problems::BadRequest)), (status = 404, response = inline(problems::NotFound)), (status = 409, response = inline(problems::Conflict)), (status = 413, response = inline(problems::TooLarge))),
    security(("bearer" = []))
)]
pub async fn update(
    State(state): State<AppState>,
    auth: Authorized<Admin>,
    Path((owner, name)): Path<(String, String)>,
    Sent(body): Sent<deployment::UpdateDeploymentBody>,
) -> Result<Json<DeploymentView>, ApiError> {
    let current = owned(&state, &auth.caller, &owner, &name).await?;
    let configuration = &current.current_release.configuration;
    let change = deployment::parse_change(body, (configuration.min_instances, configuration.max_instances))
        .map_err(ApiError::invalid_fields)?;
    Ok(Json(view(&deployment_changes::change(&state, current, change).await?)))
}

/// `DELETE /v1/deployments/{owner}/{name}`
#[utoipa::path(
    delete,
    path = "/deployments/{owner}/{name}",
    operation_id = "deleteDeployment",
    tag = "deployments",
    params(("owner" = String, Path, description = "The account's name"), ("name" = String, Path, description = "The deployment's name")),
    responses((status = 204, description = "Deleted; its predictions keep their `deployment`"), (status = 404, response = inline(problems::NotFound))),
    security(("bearer" = []))
)]
pub async fn delete(
    State(state): State<AppState>,
    auth: Authorized<Admin>,
    Path((owner, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let found = owned(&state, &auth.caller, &owner, &name).await?;
    deployment_changes::delete(&state, &found).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/deployments/{owner}/{name}/predictions`
#[utoipa::path(
    post,
    path = "/deployments/{owner}/{name}/predictions",
    operation_id = "createDeploymentPrediction",
    tag = "deployments",
    params(("owner" = String, Path, description = "The account's name"), ("name" = String, Path, description = "The deployment's name")),
    request_body(content = CreatePredictionBody, content_type = "application/json"),
    responses((status = 201, description = "Created, `starting`, at the current release's version", body = common::views::PredictionView), (status = 400, response = inline(problems::BadRequest)), (status = 402, response = inline(problems::BudgetExhausted)), (status = 404, response = inline(problems::NotFound)), (status = 413, response = inline(problems::TooLarge))),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(deployment = %format!("{owner}/{name}"), prediction_id))]
pub async fn predict(
    State(state): State<AppState>,
    surface: Surface,
    auth: Authorized<Write>,
    Path((owner, name)): Path<(String, String)>,
    wait: PreferWait,
    options: JobOptions,
    Sent(body): Sent<CreatePredictionBody>,
) -> Result<Response, ApiError> {
    let found = owned(&state, &auth.caller, &owner, &name).await?;
    let release = &found.current_release;
    let model = state.models.version(&release.model, &release.version).await?.ok_or_else(|| {
        ApiError::not_found(format!("Version {} of {} is no longer registered.", release.version, release.model))
    })?;
    let placement = predictions::Placement {
        deployment: found.full_name(),
        hardware: release.configuration.hardware.clone(),
        priority: release.configuration.priority,
    };
    let create = predictions::Create { wait, options, body, placement: Some(placement) };
    predictions::create_for(&state, surface, &auth.caller, &model, create).await
}
