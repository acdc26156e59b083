//! Storing an uploaded part as a file, shared by the Files API (`routes::files`) and
//! the console's run form: the part streams into the file store under
//! `API_MAX_FILE_BYTES`, with a media type kept only when well formed, and the file expires
//! `FILES_RETENTION_HOURS` later.

use crate::problem::{FieldError, Problem, ProblemKind};
use axum::extract::multipart::Field;
use bson::DateTime;
use common::{
    domain::AccountId,
    files::{ByteStream, FileStoreError, FilesError, NewFile},
    store::FileRecord,
};
use futures::{StreamExt, TryStreamExt};

use crate::{error::ApiError, state::AppState};

/// The largest text part (`metadata`, a console form's field).
pub const MAX_FIELD_BYTES: usize = 64 * 1024;

/// A new upload of `account`: named, typed, with `metadata` (compact JSON or empty), expiring
/// after `FILES_RETENTION_HOURS`.
pub fn new_file(
    state: &AppState,
    account: &AccountId,
    name: String,
    content_type: String,
    metadata: String,
) -> NewFile {
    let retention = chrono::Duration::from_std(state.config.files_retention).unwrap_or(chrono::Duration::days(1));
    NewFile {
        account_id: account.clone(),
        name,
        content_type,
        metadata,
        expires_at: Some(DateTime::from_chrono(chrono::Utc::now() + retention)),
        prediction_id: None,
    }
}

/// Stores file part `field` as a new upload of `account` (no metadata).
pub async fn store_part(state: &AppState, account: &AccountId, field: Field<'_>) -> Result<FileRecord, ApiError> {
    let name = field.file_name().filter(|n| !n.is_empty()).unwrap_or("file").to_owned();
    let content_type = field.content_type().and_then(media_type).unwrap_or_else(|| "application/octet-stream".into());
    let new = new_file(state, account, name, content_type, String::new());
    let max = state.config.max_file_bytes;
    state.files.create(new, body_of(field), max).await.map_err(|e| upload_error(e, max))
}

/// `text` as a media type to store and answer with (`type/subtype`, lowercase, parameters
/// dropped), or `None` if it is not one: a file is served with the type it was given, so only a
/// well-formed one is kept (others become `application/octet-stream`).
pub fn media_type(text: &str) -> Option<String> {
    let essence = text.split(';').next()?.trim().to_ascii_lowercase();
    let (kind, subtype) = essence.split_once('/')?;
    let token = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&b));
    (token(kind) && token(subtype)).then_some(essence)
}

/// The answer to an upload that could not be stored: 413 past the limit, 400 for a body cut
/// short, else internal.
pub fn upload_error(e: FilesError, max_bytes: u64) -> ApiError {
    match e {
        FilesError::Bytes(FileStoreError::TooLarge { .. }) => ApiError::Problem(Problem::new(
            ProblemKind::PayloadTooLarge,
            format!("The file is larger than the {max_bytes}-byte limit (API_MAX_FILE_BYTES)."),
        )),
        FilesError::Bytes(FileStoreError::Body(e)) => ApiError::validation(
            "The upload could not be read to its end.",
            vec![FieldError::invalid("content", e.to_string())],
        ),
        other => ApiError::Internal(other.into()),
    }
}

/// A part's bytes as the file store reads them.
pub fn body_of(field: Field<'_>) -> ByteStream<'_> {
    field.map_err(|e| std::io::Error::other(e.body_text())).boxed()
}

/// 400 for a body that is not a readable multipart upload.
pub fn bad_multipart(e: axum::extract::multipart::MultipartError) -> ApiError {
    ApiError::validation(
        "The body is not a readable multipart/form-data upload.",
        vec![FieldError::invalid("body", e.body_text())],
    )
}

/// A small text part (at most [`MAX_FIELD_BYTES`]).
pub async fn small_text(mut field: Field<'_>, name: &str) -> Result<String, ApiError> {
    let mut bytes = Vec::new();
    while let Some(chunk) = field.chunk().await.map_err(bad_multipart)? {
        bytes.extend_from_slice(&chunk);
        if bytes.len() > MAX_FIELD_BYTES {
            return Err(ApiError::validation(
                format!("The upload's {name} part is over {MAX_FIELD_BYTES} bytes."),
                vec![FieldError::invalid(name, format!("Must be at most {MAX_FIELD_BYTES} bytes."))],
            ));
        }
    }
    String::from_utf8(bytes).map_err(|_| {
        ApiError::validation("A text part is not UTF-8.", vec![FieldError::invalid(name, "Must be UTF-8 text.")])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_well_formed_media_types_are_kept() {
        assert_eq!(media_type("image/PNG").as_deref(), Some("image/png"));
        assert_eq!(media_type("text/plain; charset=utf-8").as_deref(), Some("text/plain"));
        assert_eq!(media_type("application/vnd.api+json").as_deref(), Some("application/vnd.api+json"));
        for bad in ["null", "", "image/", "/png", "a/b/c", "ÂªT/x", "text/pl ain"] {
            assert_eq!(media_type(bad), None, "{bad}");
        }
    }
}
