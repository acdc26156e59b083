//! Trainings (docs/trainings.md), on either API surface: create on a version of a model
//! (`POST /v1/models/{owner}/{name}/versions/{id}/trainings`, scope `write`), list, get and
//! cancel (`/v1/trainings…`). A training is a job in the pipeline of predictions (see
//! [`crate::ops::training`]); this file renders it as Replicate's training object. Its webhooks
//! are a prediction's: the same events, filter and signing.

use axum::{
    Json,
    extract::{Path, State},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use chrono::{DateTime, Utc};
use common::{
    domain::{ApiSurface, JobKind, ModelRef, Prediction, training::TrainingOutput},
    links::{Links, PredictionUrls},
    views::{ErrorView, StatusView},
};
use serde::Serialize;
use serde_json::Value;

use crate::store::Claim;
use crate::{
    error::ApiError,
    http::auth::{Authorized, Read, Write},
    http::extract::{JobOptions, Query, Sent},
    http::page::{Listed, Page},
    http::surface::Surface,
    ops::idempotency,
    ops::owned::owned_job,
    ops::submit,
    routes::openapi::problems,
    state::AppState,
    validate::{
        create_training,
        list_predictions::{self, ListPredictions},
        paging,
    },
};

/// A training as clients see it (Replicate's training object).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TrainingView {
    /// The training id.
    pub id: String,
    /// The model trained, `owner/name`.
    pub model: String,
    /// The version trained.
    pub version: String,
    /// The model the new version goes to, `owner/name`.
    pub destination: Option<String>,
    /// The input as submitted.
    #[schema(value_type = Object)]
    pub input: Value,
    /// The status (on `/replicate/v1` also `aborted`: see the prediction's).
    pub status: StatusView,
    /// Log text.
    pub logs: String,
    /// `{version, weights}` once it succeeded, else `null`.
    pub output: Option<TrainingOutput>,
    /// Once failed: `{code, message}` (canonical), the message (Replicate-compatible).
    pub error: Option<ErrorView>,
    /// Timings in seconds, `null` until it ended.
    pub metrics: Option<common::views::MetricsView>,
    /// Always `api`.
    pub source: String,
    /// Links to it.
    pub urls: PredictionUrls,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Start of training.
    pub started_at: Option<DateTime<Utc>>,
    /// Completion time.
    pub completed_at: Option<DateTime<Utc>>,
}

impl TrainingView {
    /// Training `p` as `surface` shows it.
    pub fn of(p: &Prediction, links: &Links, surface: ApiSurface) -> Self {
        let view = p.view(links, surface);
        let output = view.training_output();
        Self {
            id: view.id,
            model: view.model,
            version: view.version,
            destination: view.destination,
            input: view.input,
            status: view.status,
            logs: view.logs,
            output,
            error: view.error,
            metrics: view.metrics,
            source: view.source,
            urls: view.urls,
            created_at: view.created_at,
            started_at: view.started_at,
            completed_at: view.completed_at,
        }
    }
}

/// `POST /v1/models/{owner}/{name}/versions/{id}/trainings`
#[utoipa::path(
    post,
    path = "/models/{owner}/{name}/versions/{id}/trainings",
    operation_id = "createTraining",
    tag = "trainings",
    params(
        ("owner" = String, Path, description = "The model's owner"),
        ("name" = String, Path, description = "The model's name"),
        ("id" = String, Path, description = "The version to train: one with a trainer"),
    ),
    request_body(content = create_training::CreateTrainingBody, content_type = "application/json"),
    responses((status = 201, description = "Created, `starting`; `Location` names it", body = TrainingView), (status = 400, response = inline(problems::BadRequest)), (status = 402, response = inline(problems::BudgetExhausted)), (status = 404, response = inline(problems::NotFound)), (status = 413, response = inline(problems::TooLarge))),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(model = %format!("{owner}/{name}"), prediction_id))]
pub async fn create(
    State(state): State<AppState>,
    Surface(surface): Surface,
    auth: Authorized<Write>,
    Path((owner, name, version)): Path<(String, String, String)>,
    options: JobOptions,
    Sent(body): Sent<create_training::CreateTrainingBody>,
) -> Result<Response, ApiError> {
    let model =
        ModelRef::new(&owner, &name).map_err(|_| ApiError::not_found(format!("Model {owner}/{name} not found.")))?;
    let caller = &auth.caller;
    let mut training = crate::ops::training::validated(&state, caller, &model, &version, body, surface).await?;
    tracing::Span::current().record("prediction_id", training.id.as_str());
    let account = caller.key.account_id.clone();
    if let Claim::Existing(first) = submit::store_and_publish(&state, &account, options, &mut training).await? {
        return idempotency::replay_as(&state, &account, &first, |t| {
            let view = TrainingView::of(t, &state.links, surface);
            let location = view.urls.get.clone();
            (view, location)
        })
        .await;
    }
    let view = TrainingView::of(&training, &state.links, surface);
    let mut response = (StatusCode::CREATED, Json(&view)).into_response();
    if let Ok(location) = HeaderValue::from_str(&view.urls.get) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// A page of the list, as [`Page`] builds it.
pub type TrainingPage = Page<TrainingView>;

impl Listed for TrainingView {
    const PAGE: &'static str = "TrainingPage";
    const DESCRIPTION: &'static str = "A page of trainings.";
    const RESULTS: &'static str = "The trainings, newest first.";
    const TOTAL_COUNT: Option<&'static str> = Some("How many trainings match in all.");
}

/// `GET /v1/trainings`
#[utoipa::path(
    get,
    path = "/trainings",
    operation_id = "listTrainings",
    tag = "trainings",
    params(list_predictions::StatusParams, paging::PagingParams),
    responses((status = 200, description = "A page of the account's trainings, newest first", body = TrainingPage), (status = 400, response = inline(problems::BadRequest))),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Surface(surface): Surface,
    auth: Authorized<Read>,
    Query(query): Query<ListPredictions>,
) -> Result<Json<TrainingPage>, ApiError> {
    let account = &auth.caller.key.account_id;
    let page = super::predictions::listed(&state, surface, account, JobKind::Training, query).await?;
    Ok(Json(page.map(|t| TrainingView::of(&t, &state.links, surface))))
}

/// `GET /v1/trainings/{id}`
#[utoipa::path(
    get,
    path = "/trainings/{id}",
    operation_id = "getTraining",
    tag = "trainings",
    params(("id" = String, Path, description = "The training id")),
    responses((status = 200, description = "The training", body = TrainingView), (status = 404, response = inline(problems::NotFound))),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    Surface(surface): Surface,
    auth: Authorized<Read>,
    Path(id): Path<String>,
) -> Result<Json<TrainingView>, ApiError> {
    let training = owned_job(&state, &auth.caller, &id, JobKind::Training).await?;
    Ok(Json(TrainingView::of(&training, &state.links, surface)))
}

/// `POST /v1/trainings/{id}/cancel`: `starting` or `processing` → `canceled`, at once; a
/// running training's trainer is told to stop.
#[utoipa::path(
    post,
    path = "/trainings/{id}/cancel",
    operation_id = "cancelTraining",
    tag = "trainings",
    params(("id" = String, Path, description = "The training id")),
    responses((status = 200, description = "Canceled", body = TrainingView), (status = 400, response = inline(problems::BadRequest)), (status = 404, response = inline(problems::NotFound))),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(prediction_id = %id))]
pub async fn cancel(
    State(state): State<AppState>,
    Surface(surface): Surface,
    auth: Authorized<Write>,
    Path(id): Path<String>,
) -> Result<Json<TrainingView>, ApiError> {
    let canceled = crate::ops::cancel::cancel(&state, &auth.caller, &id, JobKind::Training).await?;
    Ok(Json(TrainingView::of(&canceled, &state.links, surface)))
}
