//! Files in the console: the Files page (`/files`), the account's uploads and file outputs,
//! newest first, each with a Delete button (scope `write`); and `GET /files/{id}`, a file's
//! bytes for the pages' `<img>`, `<video>` and links, loaded with the session and streamed like
//! the API's downloads ([`crate::http::file_response`]). Another account's file, or one removed, is
//! a 404 page.

use askama::Template;
use std::collections::HashMap;

use axum::{
    extract::{Path, Query, State},
    http::HeaderMap,
    response::Response,
};
use bson::DateTime;
use common::domain::Scope;

use super::{
    csrf::ConsoleAction,
    error::ConsoleError,
    page::{CONSOLE_PAGE, Chrome, PageNumber, Pager, html, see_other},
    session::Signed,
};
use crate::{
    http::file_response,
    ops::{self, owned::owned_file},
    state::AppState,
};

/// One file in the list.
struct FileRow {
    id: String,
    name: String,
    content_type: String,
    size: String,
    created: String,
    expires: String,
    image: bool,
}

#[derive(Template)]
#[template(path = "files.html")]
struct FilesPage {
    chrome: Chrome,
    files: Vec<FileRow>,
    pager: Pager,
    can_write: bool,
}

fn date(t: Option<DateTime>) -> String {
    t.map_or("—".into(), |t| t.to_chrono().format("%Y-%m-%d %H:%M UTC").to_string())
}

/// `1536` → `1.5 KiB`.
fn size(bytes: i64) -> String {
    let mut value = bytes as f64;
    for unit in ["B", "KiB", "MiB", "GiB"] {
        if value < 1024.0 || unit == "GiB" {
            return if unit == "B" { format!("{bytes} B") } else { format!("{value:.1} {unit}") };
        }
        value /= 1024.0;
    }
    format!("{bytes} B")
}

/// `GET /files`
pub async fn list(
    State(state): State<AppState>,
    signed: Signed,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ConsoleError> {
    let number = PageNumber::of(&query);
    let (records, total) = ops::lists::files(&state, &signed.key.account_id, number.offset(), CONSOLE_PAGE).await?;
    let pager = number.pager("/files", records.len(), total);
    let files = records
        .iter()
        .map(|r| FileRow {
            id: r.id.to_string(),
            name: r.name.clone(),
            content_type: r.content_type.clone(),
            size: size(r.size),
            created: date(Some(r.created_at)),
            expires: date(r.expires_at),
            image: r.content_type.starts_with("image/"),
        })
        .collect();
    Ok(html(&FilesPage { can_write: signed.key.has_scope(Scope::Write), chrome: signed.chrome("files"), files, pager }))
}

/// `GET /files/{id}`
pub async fn get(
    State(state): State<AppState>,
    signed: Signed,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ConsoleError> {
    let record = owned_file(&state, &signed.key.account_id, &id).await?;
    Ok(file_response::serve(&state.files, &record, &headers, file_response::REDIRECT_VALID_FOR).await?)
}

/// `POST /files/{id}/delete` (scope `write`)
pub async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
    action: ConsoleAction,
) -> Result<Response, ConsoleError> {
    action.signed.require(Scope::Write)?;
    let record = owned_file(&state, &action.signed.key.account_id, &id).await?;
    state.files.delete(&record.id).await?;
    Ok(see_other("/files"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(size(512), "512 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(300 * 1024), "300.0 KiB");
        assert_eq!(size(100 * 1024 * 1024), "100.0 MiB");
    }
}
