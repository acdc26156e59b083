//! The deployments page (scope `read` to look, `admin` to change): the account's deployments
//! with their current release, a form to create one, and per deployment a form that makes its
//! next release (version, hardware, instances) and a Delete button. The changes are
//! [`crate::ops::deployment_changes`]'s, as the API's routes make them.

use std::collections::HashMap;

use askama::Template;
use axum::{
    extract::{Path, Query, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use common::{domain::Scope, store::deployments::DeploymentRecord};
use serde_json::{Map, Value, json};

use super::{
    csrf::ConsoleAction,
    error::ConsoleError,
    page::{CONSOLE_PAGE, Chrome, PageNumber, Pager, html, see_other},
    session::Signed,
};
use crate::{
    error::ApiError,
    ops::{self, deployment_changes},
    state::AppState,
    validate::{
        FromBody,
        deployment::{self, NewDeployment},
        field,
    },
};

/// One deployment in the list.
struct DeploymentRow {
    name: String,
    full_name: String,
    release: u32,
    model: String,
    version: String,
    hardware: String,
    min_instances: u32,
    max_instances: u32,
    created: String,
}

#[derive(Template)]
#[template(path = "deployments.html")]
struct DeploymentsPage {
    chrome: Chrome,
    deployments: Vec<DeploymentRow>,
    pager: Pager,
    can_change: bool,
    notice: Option<String>,
    error: Option<String>,
}

fn row(d: &DeploymentRecord) -> DeploymentRow {
    let r = &d.current_release;
    DeploymentRow {
        name: d.name.clone(),
        full_name: d.full_name(),
        release: r.number,
        model: r.model.to_string(),
        version: r.version.clone(),
        hardware: r.configuration.hardware.to_string(),
        min_instances: r.configuration.min_instances,
        max_instances: r.configuration.max_instances,
        created: r.created_at.to_chrono().format("%Y-%m-%d %H:%M UTC").to_string(),
    }
}

async fn render(
    state: &AppState,
    signed: &Signed,
    number: PageNumber,
    notice: Option<String>,
    error: Option<String>,
) -> Result<Response, ConsoleError> {
    let (records, total) =
        ops::lists::deployments(state, &signed.key.account_id, number.offset(), CONSOLE_PAGE).await?;
    let pager = number.pager("/deployments", records.len(), total);
    let status = if error.is_some() { StatusCode::BAD_REQUEST } else { StatusCode::OK };
    let page = DeploymentsPage {
        chrome: signed.chrome("deployments"),
        deployments: records.iter().map(row).collect(),
        pager,
        can_change: signed.key.has_scope(Scope::Admin),
        notice,
        error,
    };
    Ok((status, html(&page)).into_response())
}

/// Every field error in one line: `field: message` each.
fn message_of(errors: &[crate::problem::FieldError]) -> String {
    errors.iter().map(|e| format!("{}: {}", e.field, e.message)).collect::<Vec<_>>().join(" ")
}

/// The error of a refused change, for the page.
fn refusal(e: ApiError) -> Result<String, ConsoleError> {
    match e {
        ApiError::Problem(p) if p.errors.is_empty() => Ok(p.detail),
        ApiError::Problem(p) => {
            Ok(p.errors.iter().map(|e| format!("{}: {}", e.field, e.message)).collect::<Vec<_>>().join(" "))
        }
        e => Err(e.into()),
    }
}

/// The body a form means: its non-empty fields, numbers as numbers.
fn body_of(action: &ConsoleAction, names: &[&str]) -> Map<String, Value> {
    let mut body = Map::new();
    for name in names {
        let raw = action.field(name).trim();
        if raw.is_empty() {
            continue;
        }
        let value = if name.ends_with("_instances") {
            raw.parse::<i64>().map_or_else(|_| json!(raw), |n| json!(n))
        } else {
            json!(raw)
        };
        body.insert((*name).to_owned(), value);
    }
    body
}

/// `GET /deployments`
pub async fn list(
    State(state): State<AppState>,
    signed: Signed,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ConsoleError> {
    signed.require(Scope::Read)?;
    render(&state, &signed, PageNumber::of(&query), None, None).await
}

/// `POST /deployments` (scope `admin`): creates a deployment at release 1.
pub async fn create(State(state): State<AppState>, action: ConsoleAction) -> Result<Response, ConsoleError> {
    action.signed.require(Scope::Admin)?;
    let body = body_of(&action, &["name", "model", "version", "hardware", "min_instances", "max_instances"]);
    let new = match NewDeployment::from_object(body) {
        Ok(new) => new,
        Err(errors) => {
            return render(&state, &action.signed, PageNumber::default(), None, Some(message_of(&errors))).await;
        }
    };
    match deployment_changes::create(&state, &action.signed.key.account_id, new).await {
        Ok(created) => {
            render(
                &state,
                &action.signed,
                PageNumber::default(),
                Some(format!("Created {} at release 1.", created.full_name())),
                None,
            )
            .await
        }
        Err(e) => render(&state, &action.signed, PageNumber::default(), None, Some(refusal(e)?)).await,
    }
}

/// `POST /deployments/{name}/release` (scope `admin`): the deployment's next release.
pub async fn release(
    State(state): State<AppState>,
    Path(name): Path<String>,
    action: ConsoleAction,
) -> Result<Response, ConsoleError> {
    action.signed.require(Scope::Admin)?;
    let current = owned(&state, &action.signed, &name).await?;
    let configuration = &current.current_release.configuration;
    let body = body_of(&action, &["version", "hardware", "min_instances", "max_instances"]);
    let change = match field::from_object(body)
        .and_then(|body| deployment::parse_change(body, (configuration.min_instances, configuration.max_instances)))
    {
        Ok(change) => change,
        Err(errors) => {
            return render(&state, &action.signed, PageNumber::default(), None, Some(message_of(&errors))).await;
        }
    };
    match deployment_changes::change(&state, current, change).await {
        Ok(changed) => {
            let notice = format!("{} is at release {}.", changed.full_name(), changed.current_release.number);
            render(&state, &action.signed, PageNumber::default(), Some(notice), None).await
        }
        Err(e) => render(&state, &action.signed, PageNumber::default(), None, Some(refusal(e)?)).await,
    }
}

/// `POST /deployments/{name}/delete` (scope `admin`)
pub async fn delete(
    State(state): State<AppState>,
    Path(name): Path<String>,
    action: ConsoleAction,
) -> Result<Response, ConsoleError> {
    action.signed.require(Scope::Admin)?;
    let found = owned(&state, &action.signed, &name).await?;
    deployment_changes::delete(&state, &found).await?;
    Ok(see_other("/deployments"))
}

/// The signed-in account's deployment `name` (a 404 page otherwise).
async fn owned(state: &AppState, signed: &Signed, name: &str) -> Result<DeploymentRecord, ConsoleError> {
    let found = deployment_changes::of_account(state, &signed.key.account_id, name).await?;
    found.ok_or_else(|| ConsoleError::NotFound(format!("Deployment {name} not found.")))
}
