//! API keys of the caller's account (scope `admin`): create, list, get one by id, and
//! deactivate one. A key may only grant scopes its creator holds. The full key value is
//! returned on create and, to admins of the same account, on get (it is kept sealed with the
//! master key); the list shows only each key's prefix. A deactivation is announced to every
//! api replica before it is answered, so the key stops working everywhere at once
//! ([`crate::state::keys`]); it cannot be undone (create a new key instead).

use crate::problem::FieldError;
use crate::store::ApiKeyRecord;
use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
};
use bson::DateTime;
use chrono::Utc;
use common::domain::{ApiKeyId, Scope};
use serde::Serialize;

use crate::{
    error::ApiError,
    http::auth::{Admin, Authorized},
    http::extract::{Body, OptionalBody, Query},
    http::page::{Listed, Page},
    ops::{self, accounts},
    routes::openapi::problems,
    state::AppState,
    validate::{
        FromBody, create_api_key,
        field::{Faults, Field, FieldValue, Read},
        paging::{Paging, PagingParams},
    },
};

/// What every view of an API key shows: everything but its value and its last use.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ApiKeyFields {
    /// The key id.
    pub id: String,
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

impl ApiKeyFields {
    /// The fields of a stored key.
    pub fn of(record: &ApiKeyRecord) -> Self {
        Self {
            id: record.id.to_string(),
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

/// An API key as the create response shows it: with its full value.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ApiKeyView {
    /// The full key value.
    pub key: String,
    /// The rest.
    #[serde(flatten)]
    pub fields: ApiKeyFields,
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
        Self { key, fields: ApiKeyFields::of(record) }
    }
}

/// `POST /v1/account/api-keys`
#[utoipa::path(
    post,
    path = "/account/api-keys",
    operation_id = "createApiKey",
    tag = "account",
    request_body(content = Option<create_api_key::CreateApiKeyBody>, content_type = "application/json", description = "Optional: every field has a default"),
    responses((status = 201, description = "Created; `key` is the full value", body = ApiKeyView), (status = 400, response = inline(problems::BadRequest)), (status = 413, response = inline(problems::TooLarge))),
    security(("bearer" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    auth: Authorized<Admin>,
    OptionalBody(request): OptionalBody<create_api_key::CreateApiKey>,
) -> Result<(StatusCode, Json<ApiKeyView>), ApiError> {
    let (record, value) = accounts::create_key(&state, &auth.caller.key, request).await?;
    Ok((StatusCode::CREATED, Json(ApiKeyView::of(&record, value.expose().to_owned()))))
}

/// `GET /v1/account/api-keys/{id}`
#[utoipa::path(
    get,
    path = "/account/api-keys/{id}",
    operation_id = "getApiKey",
    tag = "account",
    params(("id" = String, Path, description = "The key id")),
    responses((status = 200, description = "The key, with its full value", body = ApiKeyDetails), (status = 404, response = inline(problems::NotFound))),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    auth: Authorized<Admin>,
    Path(id): Path<String>,
) -> Result<Json<ApiKeyDetails>, ApiError> {
    let missing = || ApiError::not_found(format!("API key {id} not found."));
    let key_id = ApiKeyId::parse(&id).map_err(|_| missing())?;
    let record = accounts::key_of(&state, &auth.caller.key.account_id, &key_id).await?.ok_or_else(missing)?;
    let value = record.value(&state.config.common.master_key)?;
    Ok(Json(ApiKeyDetails {
        key: ApiKeyView::of(&record, value),
        last_used_at: record.last_used_at.map(DateTime::to_chrono),
    }))
}

/// An API key in a list: everything but its value.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ApiKeySummary {
    /// The key.
    #[serde(flatten)]
    pub fields: ApiKeyFields,
    /// When it was last used (at most a minute stale), `null` if never.
    pub last_used_at: Option<chrono::DateTime<Utc>>,
}

impl ApiKeySummary {
    /// The summary of a stored key.
    pub fn of(record: &ApiKeyRecord) -> Self {
        Self { fields: ApiKeyFields::of(record), last_used_at: record.last_used_at.map(DateTime::to_chrono) }
    }
}

/// A page of the list, as [`Page`] builds it.
pub type ApiKeyPage = Page<ApiKeySummary>;

impl Listed for ApiKeySummary {
    const PAGE: &'static str = "ApiKeyPage";
    const DESCRIPTION: &'static str = "A page of API keys.";
    const RESULTS: &'static str = "The keys, newest first.";
    const TOTAL_COUNT: Option<&'static str> = Some("How many keys the account has.");
}

/// `GET /v1/account/api-keys`
#[utoipa::path(
    get,
    path = "/account/api-keys",
    operation_id = "listApiKeys",
    tag = "account",
    params(PagingParams),
    responses((status = 200, description = "A page of the account's keys, newest first, without their values", body = ApiKeyPage), (status = 400, response = inline(problems::BadRequest))),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    auth: Authorized<Admin>,
    Query(paging): Query<Paging>,
) -> Result<Json<ApiKeyPage>, ApiError> {
    let account = &auth.caller.key.account_id;
    let (keys, total_count) = ops::lists::api_keys(&state, account, paging.offset, paging.limit).await?;
    let summaries = keys.iter().map(ApiKeySummary::of).collect();
    let url = format!("{}/v1/account/api-keys", state.base_url());
    Ok(Json(Page::counted(summaries, paging.links(total_count, &url), total_count)))
}

/// The body of `PATCH /v1/account/api-keys/{id}` (no other field is accepted).
// As sent; `Deactivate` is it checked.
#[derive(utoipa::ToSchema, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateApiKeyBody {
    /// `false` deactivates the key, at once on every replica; a key cannot be reactivated.
    #[schema(schema_with = false_only, required = true)]
    is_active: Option<Field<Inactive>>,
}

/// `is_active: false`, the one change a key takes.
pub struct Inactive;

impl FieldValue for Inactive {
    fn from_value(value: serde_json::Value) -> Result<Self, Faults> {
        match value {
            serde_json::Value::Bool(false) => Ok(Self),
            serde_json::Value::Bool(true) => {
                Err(Faults::new("A deactivated key cannot be reactivated; create a new key instead."))
            }
            _ => Err(Faults::new("Must be false.")),
        }
    }
}

/// A checked `PATCH` of a key: deactivate it.
pub struct Deactivate;

impl FromBody for Deactivate {
    type Sent = UpdateApiKeyBody;

    fn check(body: UpdateApiKeyBody) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        let inactive = body.is_active.required("is_active", &mut errors);
        match inactive {
            Some(Inactive) if errors.is_empty() => Ok(Self),
            _ => Err(errors),
        }
    }
}

/// The schema of a boolean that may only be `false`.
fn false_only() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::Boolean)
        .enum_values(Some([false]))
        .description(Some("Only `false`: deactivates the key."))
        .build()
}

/// `PATCH /v1/account/api-keys/{id}`: `{"is_active": false}` deactivates the key.
#[utoipa::path(
    patch,
    path = "/account/api-keys/{id}",
    operation_id = "updateApiKey",
    tag = "account",
    params(("id" = String, Path, description = "The key id")),
    request_body(content = UpdateApiKeyBody, content_type = "application/json"),
    responses((status = 200, description = "The key as it is now", body = ApiKeySummary), (status = 400, response = inline(problems::BadRequest)), (status = 404, response = inline(problems::NotFound)), (status = 413, response = inline(problems::TooLarge))),
    security(("bearer" = []))
)]
pub async fn update(
    State(state): State<AppState>,
    auth: Authorized<Admin>,
    Path(id): Path<String>,
    Body(Deactivate): Body<Deactivate>,
) -> Result<Json<ApiKeySummary>, ApiError> {
    let record = accounts::deactivate_key(&state, &auth.caller.key.account_id, &id).await?;
    Ok(Json(ApiKeySummary::of(&record)))
}
