//! `GET /files/{id}`: a file output, for the pages' `<img>`, `<video>` and links, loaded with
//! the session. Another account's file, or one removed by retention, is a 404 page.

use axum::{
    extract::{Path, State},
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};
use common::domain::FileId;

use super::{error::ConsoleError, session::Signed};
use crate::state::AppState;

/// `GET /files/{id}`
pub async fn get(
    State(state): State<AppState>,
    signed: Signed,
    Path(id): Path<String>,
) -> Result<Response, ConsoleError> {
    let missing = || ConsoleError::NotFound(format!("File {id} not found."));
    let file_id = FileId::parse(&id).map_err(|_| missing())?;
    let files = state.store.files();
    let info = files.info(&file_id).await.map_err(anyhow::Error::from)?;
    let info = info.filter(|f| f.account_id == signed.key.account_id).ok_or_else(missing)?;
    let bytes = files.read(&file_id).await.map_err(anyhow::Error::from)?;
    let mut response = bytes.into_response();
    let headers = response.headers_mut();
    let content_type =
        HeaderValue::from_str(&info.content_type).unwrap_or(HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::CONTENT_TYPE, content_type);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, max-age=3600"));
    Ok(response)
}
