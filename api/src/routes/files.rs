//! The Files API (both surfaces): upload, list, get, delete and download the account's files.
//! Uploads and file outputs are one kind of object ([`common::files`]).
//!
//! | route | scope |
//! |---|---|
//! | `POST /files` (multipart: part `content`, optional `metadata`; no other) | write |
//! | `GET /files` (paged, newest first) | read |
//! | `GET /files/{id}` | read |
//! | `DELETE /files/{id}` (204) | write |
//! | `GET /files/{id}/download` | read, or a signed `owner`/`expiry`/`signature` |
//!
//! An upload streams the `content` part straight into the file store, counting and hashing it
//! as it goes, and stops with 413 past `API_MAX_FILE_BYTES` without keeping anything; the api
//! never holds a whole file. The file becomes visible when its record is written, after the last
//! byte is stored. Another account's file is 404 on every route.

use crate::problem::{FieldError, Problem, ProblemKind};
use axum::{
    Json,
    extract::{Multipart, Path, RawQuery, State},
    http::{StatusCode, request::Parts},
    response::{IntoResponse, Response},
};
use bson::DateTime;
use common::{files::StoredBytes, views::FileView};

use crate::{
    error::ApiError,
    http::auth::{Authorized, Read, Write},
    http::extract::Query,
    http::file_response,
    http::page::{Listed, Page},
    http::surface::Surface,
    ops::uploads,
    ops::{self, owned::owned_file},
    routes::openapi::problems,
    state::AppState,
    validate::paging::{Paging, PagingParams},
};

/// A page of the list, as [`Page`] builds it.
pub type FilePage = Page<FileView>;

impl Listed for FileView {
    const PAGE: &'static str = "FilePage";
    const DESCRIPTION: &'static str = "A page of files.";
    const RESULTS: &'static str = "The files, newest first.";
    const TOTAL_COUNT: Option<&'static str> = Some("How many files the account has.");
}

/// The multipart body of an upload: the part `content` and, optionally, `metadata`; any other
/// part is 400.
// The type `create` reads the parts into (the bytes streamed into the file store as they
// arrive) and the body's OpenAPI description at once.
#[derive(Default, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UploadBody {
    /// The file's bytes, with its file name and content type in the part's headers.
    #[schema(value_type = String, format = Binary, required = true)]
    content: Option<UploadedContent>,
    /// A JSON object to keep with the file.
    #[schema(value_type = Option<Object>)]
    metadata: Option<String>,
    /// The file's name, in place of the one the `content` part's headers give (Replicate's
    /// `filename` part): 1 to 255 characters, not all spaces.
    #[schema(value_type = Option<String>, min_length = 1, max_length = 255, pattern = r"\S")]
    filename: Option<String>,
    /// The file's content type, in place of the `content` part's (Replicate's `type` part).
    #[serde(rename = "type")]
    #[schema(value_type = Option<String>, pattern = r"^[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+$")]
    media_type: Option<String>,
}

/// The `content` part, stored: its bytes, and the file name and content type of its headers.
struct UploadedContent {
    bytes: StoredBytes,
    name: String,
    content_type: String,
}

fn now_seconds() -> i64 {
    DateTime::now().timestamp_millis() / 1000
}

/// `POST /v1/files`
#[utoipa::path(
    post,
    path = "/files",
    operation_id = "createFile",
    tag = "files",
    request_body(content = UploadBody, content_type = "multipart/form-data", encoding(("metadata" = (content_type = "application/json")))),
    responses(
        (status = 201, description = "Stored", body = FileView),
        (status = 413, description = "Larger than `API_MAX_FILE_BYTES`"), (status = 400, response = inline(problems::BadRequest)), (status = 413, response = inline(problems::TooLarge))),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(file_id))]
pub async fn create(
    State(state): State<AppState>,
    Surface(surface): Surface,
    auth: Authorized<Write>,
    mut multipart: Multipart,
) -> Result<Response, ApiError> {
    // An upload takes as long as its bytes do, within its own limit (FILES_UPLOAD_TIMEOUT_SECONDS).
    common::deadline::clear();
    let mut body = UploadBody::default();
    let outcome = async {
        while let Some(field) = multipart.next_field().await.map_err(uploads::bad_multipart)? {
            match field.name().unwrap_or_default() {
                "content" if body.content.is_none() => {
                    let name = field.file_name().filter(|n| !n.is_empty()).unwrap_or("file").to_owned();
                    let content_type = field
                        .content_type()
                        .and_then(uploads::media_type)
                        .unwrap_or_else(|| "application/octet-stream".into());
                    let bytes = state
                        .files
                        .put_bytes(&name, uploads::body_of(field), state.config.max_file_bytes)
                        .await
                        .map_err(|e| uploads::upload_error(e, state.config.max_file_bytes))?;
                    body.content = Some(UploadedContent { bytes, name, content_type });
                }
                "metadata" if body.metadata.is_none() => {
                    body.metadata = Some(uploads::small_text(field, "metadata").await?);
                }
                // A form's array is sent as one part per item: metadata is one JSON object.
                "metadata" => return Err(bad_metadata()),
                "filename" if body.filename.is_none() => {
                    let text = uploads::small_text(field, "filename").await?;
                    // As for metadata, `null` (how a form sends no value) or nothing is none.
                    if absent(&text) {
                        continue;
                    }
                    let length = text.trim().chars().count();
                    if length == 0 || length > 255 {
                        return Err(ApiError::validation(
                            "The upload's filename part is not a file name.",
                            vec![FieldError::invalid("filename", "1 to 255 characters.")],
                        ));
                    }
                    body.filename = Some(text.trim().to_owned());
                }
                "type" if body.media_type.is_none() => {
                    let text = uploads::small_text(field, "type").await?;
                    if absent(&text) {
                        continue;
                    }
                    let Some(media_type) = uploads::media_type(&text) else {
                        return Err(ApiError::validation(
                            "The upload's type part is not a content type.",
                            vec![FieldError::invalid("type", "A content type such as image/png.")],
                        ));
                    };
                    body.media_type = Some(media_type);
                }
                other => {
                    let name = other.to_owned();
                    return Err(ApiError::validation(
                        format!("The upload has a part this route does not take: {name:?}."),
                        vec![FieldError::invalid(
                            name,
                            "Unknown part: send content (the file, with its name and type in the part's headers), and optionally metadata, filename and type.",
                        )],
                    ));
                }
            }
        }
        Ok::<(), ApiError>(())
    }
    .await;
    let Some(UploadedContent { bytes, name, content_type }) = body.content else {
        outcome?;
        return Err(ApiError::validation("The upload has no file.", vec![FieldError::missing("content")]));
    };
    // Replicate's `filename` and `type` parts, sent beside `content`, name and type it.
    let (name, content_type) = (body.filename.unwrap_or(name), body.media_type.unwrap_or(content_type));
    let account = &auth.caller.key.account_id;
    let new = outcome
        .and_then(|()| metadata_of(body.metadata.as_deref()))
        .map(|metadata| uploads::new_file(&state, account, name, content_type, metadata));
    let new = match new {
        Ok(new) => new,
        Err(e) => {
            state.files.discard(&bytes).await;
            return Err(e);
        }
    };
    let record = state.files.add_record(bytes, new).await.map_err(anyhow::Error::from)?;
    tracing::Span::current().record("file_id", record.id.as_str());
    let view = FileView::of(&record, &state.links, surface, now_seconds());
    Ok((StatusCode::CREATED, [(axum::http::header::LOCATION, view.urls.get.clone())], Json(view)).into_response())
}

/// The `metadata` part as stored: the compact JSON of an object, or empty for none (no part,
/// an empty one, or `null`).
fn metadata_of(part: Option<&str>) -> Result<String, ApiError> {
    match part.map(str::trim).filter(|m| !m.is_empty()) {
        None => Ok(String::new()),
        Some(text) => match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::Null) => Ok(String::new()),
            Ok(value @ serde_json::Value::Object(_)) => Ok(value.to_string()),
            _ => Err(bad_metadata()),
        },
    }
}

fn bad_metadata() -> ApiError {
    ApiError::validation(
        "The upload's metadata is not a JSON object.",
        vec![FieldError::invalid("metadata", "Must be a JSON object.")],
    )
}

/// `GET /v1/files`
#[utoipa::path(
    get,
    path = "/files",
    operation_id = "listFiles",
    tag = "files",
    params(PagingParams),
    responses((status = 200, description = "A page of the account's files, newest first", body = FilePage), (status = 400, response = inline(problems::BadRequest))),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Surface(surface): Surface,
    auth: Authorized<Read>,
    Query(paging): Query<Paging>,
) -> Result<Json<FilePage>, ApiError> {
    let account = &auth.caller.key.account_id;
    let (records, total_count) = ops::lists::files(&state, account, paging.offset, paging.limit).await?;
    let now = now_seconds();
    let views = records.iter().map(|r| FileView::of(r, &state.links, surface, now)).collect();
    let links = paging.links(total_count, &format!("{}/files", state.links.api(surface)));
    Ok(Json(Page::counted(views, links, total_count)))
}

/// `GET /v1/files/{id}`
#[utoipa::path(
    get,
    path = "/files/{id}",
    operation_id = "getFile",
    tag = "files",
    params(("id" = String, Path, description = "The file id")),
    responses((status = 200, description = "The file", body = FileView), (status = 404, response = inline(problems::NotFound))),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    Surface(surface): Surface,
    auth: Authorized<Read>,
    Path(id): Path<String>,
) -> Result<Json<FileView>, ApiError> {
    let record = owned_file(&state, &auth.caller.key.account_id, &id).await?;
    Ok(Json(FileView::of(&record, &state.links, surface, now_seconds())))
}

/// `DELETE /v1/files/{id}`
#[utoipa::path(
    delete,
    path = "/files/{id}",
    operation_id = "deleteFile",
    tag = "files",
    params(("id" = String, Path, description = "The file id")),
    responses((status = 204, description = "Deleted"), (status = 404, response = inline(problems::NotFound))),
    security(("bearer" = []))
)]
#[tracing::instrument(skip_all, fields(file_id = %id))]
pub async fn delete(
    State(state): State<AppState>,
    auth: Authorized<Write>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let record = owned_file(&state, &auth.caller.key.account_id, &id).await?;
    state.files.delete(&record.id).await.map_err(anyhow::Error::from)?;
    Ok(StatusCode::NO_CONTENT)
}

/// The signature of a signed download, as its query carries it.
struct Signed {
    owner: String,
    expiry: i64,
    signature: String,
}

/// The signed download a query asks for, if it carries a signature; a query whose `expiry` is
/// not a number is 400 whatever else it carries.
fn signed_query(query: Option<&str>) -> Result<Option<Signed>, ApiError> {
    let pairs: Vec<(String, String)> =
        url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()).into_owned().collect();
    let get = |k: &str| pairs.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
    let expiry = match get("expiry").map(|e| e.parse::<i64>()) {
        None => None,
        Some(Ok(expiry)) => Some(expiry),
        Some(Err(_)) => {
            return Err(ApiError::invalid_query(vec![FieldError::invalid(
                "expiry",
                "Must be unix seconds (an integer).",
            )]));
        }
    };
    let Some(signature) = get("signature") else { return Ok(None) };
    match (get("owner"), expiry) {
        (Some(owner), Some(expiry)) => Ok(Some(Signed { owner, expiry, signature })),
        _ => Err(bad_signature()),
    }
}

fn bad_signature() -> ApiError {
    ApiError::Problem(Problem::new(
        ProblemKind::Unauthorized,
        "This download link is expired or its signature is wrong; ask for the file again, or send an API key.",
    ))
}

/// `GET /v1/files/{id}/download`
#[utoipa::path(
    get,
    path = "/files/{id}/download",
    operation_id = "downloadFile",
    tag = "files",
    params(
        ("id" = String, Path, description = "The file id"),
        ("owner" = Option<String>, Query, description = "With `expiry` and `signature`: a signed download, which needs no `Authorization`"),
        ("expiry" = Option<i64>, Query, description = "Unix seconds after which the signed download is refused"),
        ("signature" = Option<String>, Query, description = "The signature of `owner`, the file id and `expiry`"),
        ("Range" = Option<String>, Header, description = "One byte range, `bytes=a-b`, `bytes=a-` or `bytes=-n`")
    ),
    responses(
        (status = 200, description = "The file's bytes, with its own content type", content_type = "*/*", body = Vec<u8>),
        (status = 206, description = "The range asked for", content_type = "*/*", body = Vec<u8>),
        (status = 304, description = "The `If-None-Match` ETag matches"),
        (status = 307, description = "A file in the S3-compatible store: `Location` is a presigned URL of its object, valid no longer than the link (or 15 minutes with a key); the `Range` header travels with the redirect"),
        (status = 416, description = "The range lies outside the file"), (status = 400, response = inline(problems::BadRequest)), (status = 404, response = inline(problems::NotFound)), (status = 416, response = inline(problems::RangeNotSatisfiable))),
    security(("bearer" = []), ())
)]
pub async fn download(
    State(state): State<AppState>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    mut parts: Parts,
) -> Result<Response, ApiError> {
    let (record, valid_for) = match signed_query(query.as_deref())? {
        Some(signed) => {
            let fresh = signed.expiry > now_seconds();
            if !fresh || !state.links.file_signature_valid(&signed.owner, &id, signed.expiry, &signed.signature) {
                return Err(bad_signature());
            }
            let account = common::domain::AccountId::parse(&signed.owner).map_err(|_| bad_signature())?;
            let left = u64::try_from(signed.expiry - now_seconds()).unwrap_or(0);
            (owned_file(&state, &account, &id).await?, std::time::Duration::from_secs(left))
        }
        None => {
            let auth =
                <Authorized<Read> as axum::extract::FromRequestParts<AppState>>::from_request_parts(&mut parts, &state)
                    .await?;
            (owned_file(&state, &auth.caller.key.account_id, &id).await?, file_response::REDIRECT_VALID_FOR)
        }
    };
    file_response::serve(&state.files, &record, &parts.headers, valid_for).await
}

/// Whether a text part says nothing: empty, or `null` (how a form sends no value).
fn absent(text: &str) -> bool {
    matches!(text.trim(), "" | "null")
}
