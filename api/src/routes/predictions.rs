//! Predictions: create and get.
//!
//! Create validates everything before writing anything, stores the `starting` prediction, then
//! publishes its job (`Nats-Msg-Id` = the prediction id). If the publish fails the prediction
//! is still accepted: it is stored, and the runner's reconciler republishes `starting`
//! predictions whose job never reached the stream.

use axum::{
    Json,
    extract::{Path, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use bytes::Bytes;
use common::{
    domain::{ModelRef, Prediction, PredictionId, PredictionView},
    messages::JobMessage,
};
use serde_json::Value;

use crate::{
    auth::{Authorized, Read, Write},
    error::ApiError,
    state::AppState,
    validate::{body, create_prediction, input},
};

/// `POST /v1/models/{owner}/{model}/predictions`
#[tracing::instrument(skip_all, fields(model = %format!("{owner}/{name}"), prediction_id))]
pub async fn create(
    State(state): State<AppState>,
    auth: Authorized<Write>,
    Path((owner, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let missing = || ApiError::not_found(format!("Model {owner}/{name} not found."));
    let model_ref = ModelRef::new(&owner, &name).map_err(|_| missing())?;
    let model = state.models.get(&model_ref).await?.ok_or_else(missing)?;

    let body = body::json_object(&headers, &body)?;
    let request = create_prediction::parse(&body);
    let model_input = match &request {
        Ok(req) => input::validate(&model.input_schema, &req.input),
        Err(_) => Ok(Default::default()),
    };
    let (request, model_input) = match (request, model_input) {
        (Ok(r), Ok(i)) => (r, i),
        (r, i) => {
            let mut errors = r.err().unwrap_or_default();
            errors.extend(i.err().unwrap_or_default());
            return Err(ApiError::validation("The request has invalid fields; see errors.", errors));
        }
    };

    let prediction = Prediction::new_starting(
        auth.caller.key.account_id.clone(),
        model_ref.clone(),
        model.record.version.clone(),
        model.record.capability.clone(),
        Value::Object(request.input),
        Value::Object(model_input),
        request.webhook,
        request.webhook_events_filter,
    );
    tracing::Span::current().record("prediction_id", prediction.id.as_str());
    state.store.predictions().insert(&prediction).await?;

    let job = JobMessage::RunPredictionV1 { prediction_id: prediction.id.clone(), model: model_ref };
    if let Err(e) = state.bus.publish_job(&job).await {
        tracing::error!(error = %e, "job not published; the reconciler will republish it");
    }

    let view = prediction.view(state.base_url());
    let mut response = (StatusCode::CREATED, Json(&view)).into_response();
    if let Ok(location) = HeaderValue::from_str(&view.urls.get) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// `GET /v1/predictions/{id}`
pub async fn get(
    State(state): State<AppState>,
    auth: Authorized<Read>,
    Path(id): Path<String>,
) -> Result<Json<PredictionView>, ApiError> {
    let missing = || ApiError::not_found(format!("Prediction {id} not found."));
    let prediction_id = PredictionId::parse(&id).map_err(|_| missing())?;
    let prediction = state
        .store
        .predictions()
        .get_for_account(&prediction_id, &auth.caller.key.account_id)
        .await?
        .ok_or_else(missing)?;
    Ok(Json(prediction.view(state.base_url())))
}
