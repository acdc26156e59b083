//! `GET /v1/usage` (scope `read`): the key's account's usage, from running totals kept as
//! predictions end ([`crate::ops::usage`]), as JSON or, with `Accept: text/csv`, as CSV.

use axum::{
    extract::State,
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};

use crate::{
    error::ApiError,
    http::auth::{Authorized, Read},
    http::extract::{AcceptsCsv, Query},
    ops::usage,
    routes::openapi::problems,
    state::AppState,
    validate::usage_query::{UsageParams, UsageQuery},
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
    Query(query): Query<UsageQuery>,
    AcceptsCsv(csv): AcceptsCsv,
) -> Result<Response, ApiError> {
    let report = usage::of_account(&state, &auth.caller.key.account_id, &query).await?;
    if csv {
        let content_type = HeaderValue::from_static("text/csv; charset=utf-8");
        return Ok(([(header::CONTENT_TYPE, content_type)], report.csv()).into_response());
    }
    Ok(axum::Json(report.json()).into_response())
}
