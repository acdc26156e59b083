//! The trainings pages: the list (`/trainings`, newest first), one training
//! (`/trainings/{id}`, its `urls.web`: status, logs and output live from its stream, as a
//! prediction's page, and Cancel), and the Train form on the page of a version with a trainer
//! (`POST /models/{owner}/{name}/train`): the trainer's `TrainingInput` fields in `x-order`
//! and a destination among the account's own models. The form starts the training exactly as
//! the API does ([`crate::ops::training`]); a bad value shows the page again with the field's error.

use std::collections::HashMap;

use askama::Template;
use axum::{
    extract::{Path, Query, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use common::domain::{ApiSurface, JobKind, Scope};
use serde_json::json;

use super::{
    csrf::ConsoleAction,
    error::ConsoleError,
    models::{self, form_for},
    page::{Chrome, Pager, ago, html, see_other},
    predictions::time,
    session::Signed,
};
use crate::{
    error::ApiError, ops::cancel, ops::owned::owned_job, ops::submit, state::AppState,
    validate::create_training::CreateTrainingBody,
};

/// `POST /models/{owner}/{name}/train` (scope `write`): starts the training and opens its page.
pub async fn train(
    State(state): State<AppState>,
    Path((owner, name)): Path<(String, String)>,
    action: ConsoleAction,
) -> Result<Response, ConsoleError> {
    action.signed.require(Scope::Write)?;
    let shown = models::model(&state, &action.signed, &owner, &name).await?;
    let no_trainer = || ConsoleError::NotFound(format!("Model {owner}/{name} has no trainer."));
    let mut form = form_for(&state, &action.signed, &shown).await?.ok_or_else(no_trainer)?;
    let input = models::input_of(&form.fields, &action.fields);
    // Read as a body is (its fields cannot fail to deserialize, so there is no error to lose).
    let body: CreateTrainingBody =
        serde_json::from_value(json!({"destination": action.field("destination"), "input": input})).unwrap_or_default();
    let caller = action.signed.caller();
    let validated =
        crate::ops::training::validated(&state, &caller, &shown.model, &form.version, body, ApiSurface::Canonical)
            .await;
    let mut training = match validated {
        Ok(training) => training,
        Err(ApiError::Problem(problem)) => {
            for field in &mut form.fields {
                field.value = action.field(&field.name).to_owned();
                let path = format!("input.{}", field.name);
                field.error = problem.errors.iter().find(|e| e.field == path).map(|e| e.message.clone());
            }
            action.field("destination").clone_into(&mut form.destination);
            form.error = Some(problem.detail);
            let chrome = action.signed.chrome("trainings");
            let page = models::page(&state, chrome, &shown, true, None, Some(form)).await?;
            return Ok((StatusCode::BAD_REQUEST, html(&page)).into_response());
        }
        Err(e) => return Err(e.into()),
    };
    submit::store_and_publish(&state, &caller.key.account_id, Default::default(), &mut training).await?;
    Ok(see_other(&format!("/trainings/{}", training.id)))
}

/// One row of the list.
struct Row {
    id: String,
    model: String,
    destination: String,
    status: &'static str,
    created: String,
    age: String,
}

#[derive(Template)]
#[template(path = "trainings.html")]
struct ListPage {
    chrome: Chrome,
    rows: Vec<Row>,
    pager: Pager,
}

/// `GET /trainings`: the account's trainings, newest first, 20 a page (`page`, from 0), in
/// `status` if given.
pub async fn list(
    State(state): State<AppState>,
    signed: Signed,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ConsoleError> {
    let listed = super::predictions::job_list(&state, &signed, JobKind::Training, "/trainings", &query).await?;
    let now = bson::DateTime::now();
    let rows = listed
        .jobs
        .iter()
        .map(|t| Row {
            id: t.id.to_string(),
            model: format!("{}:{}", t.model, t.version.chars().take(12).collect::<String>()),
            destination: t.destination.as_ref().map(ToString::to_string).unwrap_or_default(),
            status: t.status.as_str(),
            created: t.created_at.to_chrono().format("%Y-%m-%d %H:%M:%S UTC").to_string(),
            age: ago((now.timestamp_millis() - t.created_at.timestamp_millis()) / 1000),
        })
        .collect();
    Ok(html(&ListPage { chrome: signed.chrome("trainings"), rows, pager: listed.pager }))
}

#[derive(Template)]
#[template(path = "training.html")]
struct TrainingPage {
    chrome: Chrome,
    id: String,
    model: String,
    version: String,
    destination: String,
    status: &'static str,
    running: bool,
    can_cancel: bool,
    stream_url: String,
    error: Option<String>,
    /// `owner/name:<id>` of the version it made, and the model's page.
    trained_version: Option<String>,
    weights_file: Option<String>,
    logs: String,
    input: String,
    created: String,
    started: String,
    completed: String,
}

/// `GET /trainings/{id}`: another account's training is a 404 page.
pub async fn page(
    State(state): State<AppState>,
    signed: Signed,
    Path(id): Path<String>,
) -> Result<Response, ConsoleError> {
    let t = owned_job(&state, &signed.caller(), &id, JobKind::Training).await?;
    let view = t.view(&state.links, ApiSurface::Canonical);
    let output = view.training_output();
    let running = !t.status.is_terminal();
    let page = TrainingPage {
        chrome: signed.chrome("trainings"),
        id: t.id.to_string(),
        model: t.model.to_string(),
        version: t.version.clone(),
        destination: view.destination.clone().unwrap_or_default(),
        status: t.status.as_str(),
        running,
        can_cancel: running && signed.key.has_scope(Scope::Write),
        stream_url: view.urls.stream.clone(),
        error: t.error.as_ref().map(|e| e.message.clone()),
        trained_version: output.as_ref().map(|o| o.version.clone()),
        weights_file: output
            .as_ref()
            .and_then(|o| state.links.file_named_by(&o.weights))
            .map(|file| format!("/files/{file}")),
        logs: t.logs.clone(),
        input: serde_json::to_string_pretty(&t.input).unwrap_or_default(),
        created: time(Some(t.created_at)),
        started: time(t.started_at),
        completed: time(t.completed_at),
    };
    Ok(html(&page))
}

/// `POST /trainings/{id}/cancel` (scope `write`).
pub async fn cancel(
    State(state): State<AppState>,
    Path(id): Path<String>,
    action: ConsoleAction,
) -> Result<Response, ConsoleError> {
    action.signed.require(Scope::Write)?;
    cancel::cancel(&state, &action.signed.caller(), &id, JobKind::Training).await?;
    Ok(see_other(&format!("/trainings/{id}")))
}
