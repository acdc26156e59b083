//! The API keys page (scope `admin`): the account's keys, a form to create one (name, scopes,
//! expiry, requests per minute; the new key is shown once, on the page that answers the form),
//! and a Deactivate button per active key (at once on every replica, see [`crate::state::keys`]).

use std::collections::HashMap;

use askama::Template;
use axum::{
    extract::{Path, Query, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use bson::DateTime;
use common::domain::Scope;
use serde_json::{Map, Value, json};

use super::{
    csrf::ConsoleAction,
    error::ConsoleError,
    page::{CONSOLE_PAGE, Chrome, PageNumber, Pager, html, see_other},
    session::Signed,
};
use crate::store::ApiKeyRecord;
use crate::{
    error::ApiError,
    ops::{self, accounts},
    state::AppState,
    validate::{FromBody, create_api_key::CreateApiKey},
};

/// One key in the list.
struct KeyRow {
    id: String,
    name: String,
    prefix: String,
    scopes: String,
    rpm: u32,
    active: bool,
    expires: String,
    last_used: String,
    current: bool,
}

#[derive(Template)]
#[template(path = "keys.html")]
struct KeysPage {
    chrome: Chrome,
    keys: Vec<KeyRow>,
    pager: Pager,
    new_key: Option<String>,
    error: Option<String>,
}

fn date(t: Option<DateTime>) -> String {
    t.map_or("—".into(), |t| t.to_chrono().format("%Y-%m-%d %H:%M UTC").to_string())
}

async fn render(
    state: &AppState,
    signed: &Signed,
    number: PageNumber,
    new_key: Option<String>,
    error: Option<String>,
) -> Result<Response, ConsoleError> {
    let (records, total) = ops::lists::api_keys(state, &signed.key.account_id, number.offset(), CONSOLE_PAGE).await?;
    let pager = number.pager("/keys", records.len(), total);
    let now = DateTime::now();
    let keys = records
        .iter()
        .map(|k: &ApiKeyRecord| KeyRow {
            id: k.id.to_string(),
            name: k.name.clone(),
            prefix: k.key_prefix.clone(),
            scopes: k.scopes.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
            rpm: k.rate_limit_rpm,
            active: k.is_usable_at(now),
            expires: date(k.expires_at),
            last_used: date(k.last_used_at),
            current: k.id == signed.key.id,
        })
        .collect();
    let status = if error.is_some() { StatusCode::BAD_REQUEST } else { StatusCode::OK };
    Ok((status, html(&KeysPage { chrome: signed.chrome("keys"), keys, pager, new_key, error })).into_response())
}

/// `GET /keys`
pub async fn list(
    State(state): State<AppState>,
    signed: Signed,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ConsoleError> {
    signed.require(Scope::Admin)?;
    render(&state, &signed, PageNumber::of(&query), None, None).await
}

/// The create-key request a submitted form means (empty fields take their defaults).
fn request_of(action: &ConsoleAction) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("name".into(), json!(action.field("name").trim()));
    let scopes: Vec<&str> =
        ["read", "write", "admin"].into_iter().filter(|s| !action.field(&format!("scope_{s}")).is_empty()).collect();
    body.insert("scopes".into(), json!(scopes));
    for number in ["expires_in_days", "rate_limit_rpm"] {
        let raw = action.field(number).trim();
        if !raw.is_empty() {
            body.insert(number.into(), raw.parse::<i64>().map_or_else(|_| json!(raw), |n| json!(n)));
        }
    }
    body
}

/// `POST /keys`: creates a key and shows it once.
pub async fn create(State(state): State<AppState>, action: ConsoleAction) -> Result<Response, ConsoleError> {
    action.signed.require(Scope::Admin)?;
    let request = match CreateApiKey::from_object(request_of(&action)) {
        Ok(request) => request,
        Err(errors) => {
            let message = errors.iter().map(|e| format!("{}: {}", e.field, e.message)).collect::<Vec<_>>().join(" ");
            return render(&state, &action.signed, PageNumber::default(), None, Some(message)).await;
        }
    };
    match accounts::create_key(&state, &action.signed.key, request).await {
        Ok((_, value)) => {
            render(&state, &action.signed, PageNumber::default(), Some(value.expose().to_owned()), None).await
        }
        Err(ApiError::Problem(p)) => {
            let detail = p.errors.iter().map(|e| e.message.clone()).next().unwrap_or(p.detail);
            render(&state, &action.signed, PageNumber::default(), None, Some(detail)).await
        }
        Err(e) => Err(e.into()),
    }
}

/// `POST /keys/{id}/deactivate`
pub async fn deactivate(
    State(state): State<AppState>,
    Path(id): Path<String>,
    action: ConsoleAction,
) -> Result<Response, ConsoleError> {
    action.signed.require(Scope::Admin)?;
    accounts::deactivate_key(&state, &action.signed.key.account_id, &id).await?;
    Ok(see_other("/keys"))
}
