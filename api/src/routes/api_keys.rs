//! API keys of the caller's account (scope `admin`): create, and get one by id. A key may only
//! grant scopes its creator holds. The full key value is returned on create and, to admins of
//! the same account, on get (it is kept sealed with the master key).

use axum::{
    Json,
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
};
use bson::DateTime;
use bytes::Bytes;
use chrono::Utc;
use common::{
    domain::{ApiKeyId, Scope},
    problem::FieldError,
    store::ApiKeyRecord,
};
use serde::Serialize;

use crate::{
    accounts,
    auth::{Admin, Authorized},
    error::ApiError,
    state::AppState,
    validate::{body, create_api_key},
};

/// An API key as the create response shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ApiKeyView {
    /// The key id.
    pub id: String,
    /// The full key value.
    pub key: String,
    /// Its first 8 characters.
    pub key_prefix: String,
    /// Its name.
    pub name: String,
    /// Its scopes.
    pub scopes: Vec<Scope>,
    /// Requests per minute allowed.
    pub rate_limit_rpm: u32,
    /// Whether it works.
    pub is_active: bool,
    /// When it was created.
    pub created_at: chrono::DateTime<Utc>,
    /// When it stops working, `null` if never.
    pub expires_at: Option<chrono::DateTime<Utc>>,
}

/// An API key as the get response shows it: with `last_used_at`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ApiKeyDetails {
    /// The key.
    #[serde(flatten)]
    pub key: ApiKeyView,
    /// When it was last used (at most a minute stale), `null` if never.
    pub last_used_at: Option<chrono::DateTime<Utc>>,
}

impl ApiKeyView {
    fn of(record: &ApiKeyRecord, key: String) -> Self {
        Self {
            id: record.id.to_string(),
            key,
            key_prefix: record.key_prefix.clone(),
            name: record.name.clone(),
            scopes: record.scopes.clone(),
            rate_limit_rpm: record.rate_limit_rpm,
            is_active: record.is_active,
            created_at: record.created_at.to_chrono(),
            expires_at: record.expires_at.map(DateTime::to_chrono),
        }
    }
}

const DAY_MS: i64 = 24 * 3600 * 1000;

/// `POST /v1/account/api-keys`
#[utoipa::path(
    post,
    path = "/v1/account/api-keys",
    operation_id = "createApiKey",
    tag = "account",
    request_body(content = Option<create_api_key::CreateApiKeyBody>, content_type = "application/json", description = "Optional: every field has a default"),
    responses((status = 201, description = "Created; `key` is the full value", body = ApiKeyView)),
    security(("bearer" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    auth: Authorized<Admin>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<ApiKeyView>), ApiError> {
    let body = body::optional_json_object(&headers, &body)?;
    let request = create_api_key::parse(&body)
        .map_err(|errors| ApiError::validation("The request has invalid fields; see errors.", errors))?;
    let caller = &auth.caller.key;
    if let Some(extra) = request.scopes.iter().find(|s| !caller.has_scope(**s)) {
        return Err(ApiError::validation(
            "A key cannot grant a scope its creator lacks.",
            vec![FieldError::invalid("scopes", format!("The calling key lacks the '{extra}' scope."))],
        ));
    }
    let expires_at =
        request.expires_in_days.map(|days| DateTime::from_millis(DateTime::now().timestamp_millis() + days * DAY_MS));
    let (record, value) = accounts::issue_key(
        &state.store,
        &state.config.common.master_key,
        caller.account_id.clone(),
        request.name,
        request.scopes,
        state.config.default_rate_limit_rpm,
        expires_at,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(ApiKeyView::of(&record, value.expose().to_owned()))))
}

/// `GET /v1/account/api-keys/{id}`
#[utoipa::path(
    get,
    path = "/v1/account/api-keys/{id}",
    operation_id = "getApiKey",
    tag = "account",
    params(("id" = String, Path, description = "The key id")),
    responses((status = 200, description = "The key, with its full value", body = ApiKeyDetails)),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    auth: Authorized<Admin>,
    Path(id): Path<String>,
) -> Result<Json<ApiKeyDetails>, ApiError> {
    let missing = || ApiError::not_found(format!("API key {id} not found."));
    let key_id = ApiKeyId::parse(&id).map_err(|_| missing())?;
    let record =
        state.store.api_keys().get_for_account(&key_id, &auth.caller.key.account_id).await?.ok_or_else(missing)?;
    let value = record.value(&state.config.common.master_key)?;
    Ok(Json(ApiKeyDetails {
        key: ApiKeyView::of(&record, value),
        last_used_at: record.last_used_at.map(DateTime::to_chrono),
    }))
}
