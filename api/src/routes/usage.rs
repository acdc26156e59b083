//! `GET /v1/usage` (scope `read`): the key's account's usage, from running totals kept as
//! predictions end ([`crate::usage`]), as JSON or, with `Accept: text/csv`, as CSV.

use axum::{
    extract::{RawQuery, State},
    http::{HeaderMap, HeaderValue, header},
    response::{IntoResponse, Response},
};

use crate::{
    auth::{Authorized, Read},
    error::ApiError,
    openapi::problems,
    state::AppState,
    usage,
    validate::usage_query::{self, UsageParams},
};

/// `GET /v1/usage`
#[utoipa::path(
    get,
    path = "/usage",
    operation_id = "getUsage",
    tag = "account",
    params(UsageParams),
    responses(
        (status = 200, description = "Usage per bucket and group: `{start, end, bucket, group_by, results: [{start, end, groups: [{<group keys>, count: {succeeded, failed, canceled}, predict_time, total_time}]}], totals}`; with `Accept: text/csv`, one CSV row per bucket and group", content_type = "application/json", body = serde_json::Value),
        (status = 400, response = inline(problems::BadRequest)),
    ),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    auth: Authorized<Read>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let query = usage_query::parse(query.as_deref(), chrono::Utc::now()).map_err(ApiError::invalid_query)?;
    let report = usage::report(&state.store, Some(&auth.caller.key.account_id), &query).await?;
    let csv = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/csv"));
    if csv {
        let content_type = HeaderValue::from_static("text/csv; charset=utf-8");
        return Ok(([(header::CONTENT_TYPE, content_type)], report.csv()).into_response());
    }
    Ok(axum::Json(report.json()).into_response())
}
