//! `GET /files/{id}`: a file (an output or an upload), for the pages' `<img>`, `<video>` and
//! links, loaded with the session and streamed like the API's downloads
//! ([`crate::file_response`]). Another account's file, or one removed, is a 404 page.

use axum::{
    extract::{Path, State},
    http::HeaderMap,
    response::Response,
};

use super::{error::ConsoleError, session::Signed};
use crate::{file_response, routes::files::owned, state::AppState};

/// `GET /files/{id}`
pub async fn get(
    State(state): State<AppState>,
    signed: Signed,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ConsoleError> {
    let record = owned(&state, &signed.key.account_id, &id).await?;
    Ok(file_response::serve(&state.files, &record, &headers).await?)
}
