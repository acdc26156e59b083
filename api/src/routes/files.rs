//! `GET /v1/files/{id}` (scope `read`): a file output of one of the account's predictions,
//! with its content type. Another account's file, or one removed by retention, is 404.

use axum::{
    extract::{Path, State},
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};
use common::domain::FileId;

use crate::{
    auth::{Authorized, Read},
    error::ApiError,
    state::AppState,
};

/// `GET /v1/files/{id}`
#[utoipa::path(
    get,
    path = "/v1/files/{id}",
    operation_id = "getFile",
    tag = "predictions",
    params(("id" = String, Path, description = "The file id, from a prediction's output URL")),
    responses((status = 200, description = "The file, with its content type", content_type = "application/octet-stream", body = Vec<u8>)),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    auth: Authorized<Read>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let missing = || ApiError::not_found(format!("File {id} not found."));
    let file_id = FileId::parse(&id).map_err(|_| missing())?;
    let files = state.store.files();
    let info =
        files.info(&file_id).await?.filter(|f| f.account_id == auth.caller.key.account_id).ok_or_else(missing)?;
    let bytes = files.read(&file_id).await?;
    let mut response = bytes.into_response();
    let headers = response.headers_mut();
    let content_type =
        HeaderValue::from_str(&info.content_type).unwrap_or(HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::CONTENT_TYPE, content_type);
    if let Ok(disposition) = HeaderValue::from_str(&format!("inline; filename=\"{}\"", info.filename)) {
        headers.insert(header::CONTENT_DISPOSITION, disposition);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, max-age=3600"));
    Ok(response)
}
