//! Predictions: create (by model route, or by `version`), get, list and cancel, on either
//! API surface (each handler renders for its [`Surface`]).
//!
//! Create validates everything before writing anything, then stores the prediction and sends
//! its job ([`crate::ops::submit`]; creates that arrive together share one write:
//! `AppState::new_predictions`). `Prefer: wait` holds the response until the prediction ends
//! (see [`crate::ops::wait`]); `Idempotency-Key` returns the first prediction of a key (see
//! [`crate::ops::idempotency`]). Cancel is [`crate::ops::cancel`].
//!
//! The steps a create takes only sometimes (a wait, a replay, a trained version's look-up) are
//! awaited boxed: a future is as large as its largest step, and a create's is moved from
//! layer to layer of the middleware for every request (measured: `memmove` was 9 % of the
//! api's CPU under the cost batch).

use axum::{
    Json,
    extract::{Path, State},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use bson::doc;
use common::{
    domain::{ApiSurface, JobKind, ModelRef, Prediction},
    views::{PredictionView, QueuePlace, StatusView},
};
use tracing::Instrument;

use crate::store::Claim;
use crate::{
    error::ApiError,
    http::auth::{Authorized, Caller, Read, Write},
    http::extract::{JobOptions, PreferWait, Query, Sent},
    http::page::{Listed, Page},
    http::surface::Surface,
    ops::idempotency,
    ops::submit,
    ops::versions,
    ops::wait,
    routes::openapi::problems,
    state::AppState,
    state::model_catalog::RegisteredModel,
    validate::{
        FromBody,
        create_prediction::{CreateByVersionBody, CreatePrediction, CreatePredictionBody},
        list_predictions::{self, ListPredictions},
        paging,
    },
};

/// `POST /v1/models/{owner}/{name}/predictions`
#[utoipa::path(
    post,
    path = "/models/{owner}/{name}/predictions",
    operation_id = "createPrediction",
    tag = "predictions",
    params(("owner" = String, Path, description = "The model's owner"), ("name" = String, Path, description = "The model's name")),
    request_body(content = CreatePredictionBody, content_type = "application/json"),
    responses((status = 201, description = "Created, `starting`; `Location` names it", body = PredictionView), (status = 400, response = inline(problems::BadRequest)), (status = 402, response = inline(problems::BudgetExhausted)), (status = 404, response = inline(problems::NotFound)), (status = 413, response = inline(problems::TooLarge))),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(model = %format!("{owner}/{name}"), prediction_id))]
pub async fn create(
    State(state): State<AppState>,
    surface: Surface,
    auth: Authorized<Write>,
    Path((owner, name)): Path<(String, String)>,
    wait: PreferWait,
    options: JobOptions,
    Sent(body): Sent<CreatePredictionBody>,
) -> Result<Response, ApiError> {
    let missing = || ApiError::not_found(format!("Model {owner}/{name} not found."));
    let model_ref = ModelRef::new(&owner, &name).map_err(|_| missing())?;
    let model = match state.models.get(&model_ref).await? {
        Some(model) => model,
        None => Box::pin(crate::ops::trained::trained_model(&state, &auth.caller.key.account_id, &model_ref, None))
            .await?
            .ok_or_else(missing)?,
    };
    create_for(&state, surface, &auth.caller, &model, Create { wait, options, body, placement: None }).await
}

/// `POST /v1/predictions`: create by `version` (`owner/name`, `owner/name:id` or a bare
/// id; see [`versions::resolve`]), otherwise as the model route.
#[utoipa::path(
    post,
    path = "/predictions",
    operation_id = "createPredictionByVersion",
    tag = "predictions",
    request_body(content = CreateByVersionBody, content_type = "application/json"),
    responses((status = 201, description = "Created, `starting`; `Location` names it", body = PredictionView), (status = 400, response = inline(problems::BadRequest)), (status = 402, response = inline(problems::BudgetExhausted)), (status = 404, response = inline(problems::NotFound)), (status = 413, response = inline(problems::TooLarge))),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(model, prediction_id))]
pub async fn create_by_version(
    State(state): State<AppState>,
    surface: Surface,
    auth: Authorized<Write>,
    wait: PreferWait,
    options: JobOptions,
    Sent(CreateByVersionBody { version, create: body }): Sent<CreateByVersionBody>,
) -> Result<Response, ApiError> {
    let model = match versions::resolve(&state, &auth.caller.key.account_id, version).await {
        Ok(model) => model,
        Err(versions::Unresolved::Api(e)) => return Err(e),
        Err(versions::Unresolved::Field(error)) => {
            let mut errors = vec![error];
            errors.extend(CreatePrediction::check(body).err().unwrap_or_default());
            return Err(ApiError::invalid_fields(errors));
        }
    };
    tracing::Span::current().record("model", model.record.model.to_string());
    create_for(&state, surface, &auth.caller, &model, Create { wait, options, body, placement: None }).await
}

/// A create as its request asks for it.
pub struct Create {
    /// `Prefer: wait`.
    pub wait: PreferWait,
    /// `Idempotency-Key` and `Cancel-After`.
    pub options: JobOptions,
    /// The body.
    pub body: CreatePredictionBody,
    /// Where a deployment places it.
    pub placement: Option<Placement>,
}

/// Where a deployment's prediction runs: recorded on it, and its job goes to its pool.
pub struct Placement {
    /// `owner/name` of the deployment.
    pub deployment: String,
    /// The pool of its current release.
    pub hardware: common::domain::Pool,
    /// The priority of its predictions that ask for none.
    pub priority: Option<common::domain::Priority>,
}

/// Validates `create` for `model` (at the version it runs), stores the prediction and sends
/// its job (to the runners of its placement's pool, when a deployment places it); answers 201
/// with the prediction as `surface` shows it (after its `Prefer: wait`, if any).
pub async fn create_for(
    state: &AppState,
    Surface(surface): Surface,
    caller: &Caller,
    model: &RegisteredModel,
    create: Create,
) -> Result<Response, ApiError> {
    let Create { wait: PreferWait(wait), options, body, placement } = create;
    // A wait past the replica's or the key's cap is not held: answered at once (see `wait_slots`).
    let wait_for = wait.and_then(|limit| state.wait_slots.try_take(&caller.key.id).map(|slot| (limit, slot)));
    let account = caller.key.account_id.clone();
    let default_priority = placement.as_ref().and_then(|p| p.priority).unwrap_or_default();
    let mut prediction = submit::validated(state, caller, model, body, surface, default_priority, Vec::new()).await?;
    if let Some(placement) = placement {
        prediction.deployment = Some(placement.deployment);
        prediction.hardware = Some(placement.hardware);
    }
    tracing::Span::current().record("prediction_id", prediction.id.as_str());
    let events = match wait_for {
        Some(_) => Some(Box::pin(state.bus.client().subscribe(state.bus.subjects().events(&prediction.id))).await?),
        None => None,
    };
    // A client that disconnects cannot stop the writes halfway: the handler runs to
    // completion (see `run_to_completion`).
    match submit::store_and_publish(state, &account, options, &mut prediction).await? {
        Claim::New => {}
        Claim::Existing(first) => return Box::pin(idempotency::replay(state, &account, &first, surface)).await,
    }

    let waited = wait_for.as_ref().map(|(limit, _)| *limit);
    let view = match (wait_for, events) {
        // The `completed` event shows the prediction as the surface that created it does: this one.
        (Some((limit, _slot)), Some(events)) => {
            crate::http::shed::release_while_waiting();
            common::deadline::extend(limit);
            // The wait counts from the request's arrival, as a client's read timeout does.
            let spent = common::deadline::arrived().map_or(std::time::Duration::ZERO, |at| at.elapsed());
            let left = limit.saturating_sub(spent);
            match Box::pin(wait::completion(events, left).instrument(tracing::info_span!("wait_for_end"))).await {
                Some(wait::Ended::Shown(done)) => *done,
                Some(wait::Ended::Stored) | None => Box::pin(still_running(state, prediction, surface)).await?,
            }
        }
        _ => prediction.view(&state.links, surface),
    };
    let mut response = (StatusCode::CREATED, Json(&view)).into_response();
    if let Some(limit) = waited {
        let applied = HeaderValue::from_str(&format!("wait={}", limit.as_secs())).map_err(anyhow::Error::from)?;
        response.headers_mut().insert("preference-applied", applied);
    }
    if let Ok(location) = HeaderValue::from_str(&view.urls.get) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// The answer to a create whose `Prefer: wait` ran out: the prediction as it stands. On the
/// Replicate-compatible surface its status is `starting`, as Replicate answers: its clients
/// take any other status in a create response as final and stop polling.
async fn still_running(state: &AppState, created: Prediction, surface: ApiSurface) -> Result<PredictionView, ApiError> {
    let current = crate::ops::owned::by_id(state, &created.id).await?.unwrap_or(created);
    let mut view = current.view(&state.links, surface);
    if surface == ApiSurface::Replicate && !view.status.is_terminal() {
        view.status = StatusView::Starting;
    }
    Ok(view)
}

pub use crate::ops::owned::owned_prediction;

/// `GET /v1/predictions/{id}`
#[utoipa::path(
    get,
    path = "/predictions/{id}",
    operation_id = "getPrediction",
    tag = "predictions",
    params(("id" = String, Path, description = "The prediction id")),
    responses((status = 200, description = "The prediction", body = PredictionView, headers(("Retry-After" = u64, description = "While it waits to start: the whole seconds until its estimated start, when at least one; polling sooner learns nothing new"))), (status = 404, response = inline(problems::NotFound))),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    Surface(surface): Surface,
    auth: Authorized<Read>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let prediction = crate::ops::owned::owned_job(&state, &auth.caller, &id, JobKind::Prediction).await?;
    let mut view = prediction.view(&state.links, surface);
    view.queue = state.queue_places.place(&prediction).await?;
    let poll_again = view.queue.as_ref().and_then(poll_after);
    let mut response = Json(view).into_response();
    if let Some(seconds) = poll_again {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    Ok(response)
}

/// When a waiting prediction is worth polling again: the whole seconds until its estimated
/// start, when that is at least one (a client that polls sooner learns nothing new).
fn poll_after(place: &QueuePlace) -> Option<u64> {
    let until = place.estimated_start_at? - chrono::Utc::now();
    u64::try_from(until.num_seconds()).ok().filter(|s| *s >= 1)
}

/// A page of the list, as [`Page`] builds it.
pub type PredictionPage = Page<PredictionView>;

impl Listed for PredictionView {
    const PAGE: &'static str = "PredictionPage";
    const DESCRIPTION: &'static str = "A page of predictions.";
    const RESULTS: &'static str = "The predictions, newest first.";
    const TOTAL_COUNT: Option<&'static str> = Some("How many predictions match in all.");
}

/// `GET /v1/predictions`
#[utoipa::path(
    get,
    path = "/predictions",
    operation_id = "listPredictions",
    tag = "predictions",
    params(list_predictions::StatusParams, paging::PagingParams),
    responses((status = 200, description = "A page of the account's predictions, newest first", body = PredictionPage), (status = 400, response = inline(problems::BadRequest))),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Surface(surface): Surface,
    auth: Authorized<Read>,
    Query(query): Query<ListPredictions>,
) -> Result<Json<PredictionPage>, ApiError> {
    let page = listed(&state, surface, &auth.caller.key.account_id, JobKind::Prediction, query).await?;
    Ok(Json(page.map(|p| p.view(&state.links, surface))))
}

/// The page a list query (`status`, `limit`, `offset`) asks for of `account`'s jobs of `kind`
/// (`GET /predictions` and `GET /trainings`), with the links to its neighbours.
pub async fn listed(
    state: &AppState,
    surface: ApiSurface,
    account: &common::domain::AccountId,
    kind: JobKind,
    query: ListPredictions,
) -> Result<Page<Prediction>, ApiError> {
    let (stored, total_count) = crate::ops::jobs::page(state, account, kind, &query).await?;
    let jobs = futures::future::try_join_all(stored.into_iter().map(|p| crate::ops::owned::whole(state, p))).await?;
    let resource = match kind {
        JobKind::Prediction => "predictions",
        JobKind::Training => "trainings",
    };
    let (next, previous) = query.neighbours(total_count);
    let base = format!("{}/{resource}", state.links.api(surface));
    // On /replicate/v1 the neighbours are cursors over the list as it stood at this page's
    // newest job (or the cursor's own snapshot): jobs created meanwhile move no page, as
    // Replicate's cursors.
    let as_of = query.as_of.or_else(|| jobs.first().map(|p| p.created_at.to_chrono()));
    let link = |offset: u64| match (surface, as_of) {
        (ApiSurface::Replicate, Some(as_of)) => format!("{base}?{}", query.cursor_query_at(offset, as_of)),
        _ => format!("{base}?{}", query.query_at(offset)),
    };
    Ok(Page::counted(jobs, (next.map(link), previous.map(link)), total_count))
}

/// `POST /v1/predictions/{id}/cancel`: `starting` or `processing` → `canceled`, at once.
///
/// The change is a conditional update on the status just read (so the metrics computed from
/// it are right), followed by the `completed` event and, for a `processing` prediction, the
/// cancel broadcast that makes the runner holding it abort the model call.
#[utoipa::path(
    post,
    path = "/predictions/{id}/cancel",
    operation_id = "cancelPrediction",
    tag = "predictions",
    params(("id" = String, Path, description = "The prediction id")),
    responses((status = 200, description = "Canceled", body = PredictionView), (status = 400, response = inline(problems::BadRequest)), (status = 404, response = inline(problems::NotFound))),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(prediction_id = %id))]
pub async fn cancel(
    State(state): State<AppState>,
    Surface(surface): Surface,
    auth: Authorized<Write>,
    Path(id): Path<String>,
) -> Result<Json<PredictionView>, ApiError> {
    let canceled = crate::ops::cancel::cancel(&state, &auth.caller, &id, JobKind::Prediction).await?;
    Ok(Json(canceled.view(&state.links, surface)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_prediction_is_worth_polling_again_at_its_estimated_start() {
        let at = |ms: i64| QueuePlace {
            position: 5,
            estimated_start_at: Some(chrono::Utc::now() + chrono::Duration::milliseconds(ms)),
        };
        assert_eq!(poll_after(&at(3_500)), Some(3));
        assert_eq!(poll_after(&at(500)), None, "under a second: poll as usual");
        assert_eq!(poll_after(&QueuePlace { position: 5, estimated_start_at: None }), None);
    }
}
