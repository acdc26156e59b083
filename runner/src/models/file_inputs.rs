//! What a model receives for a file input: resolved here, once, for built-in and Cog models
//! alike, just before the model runs.
//!
//! The api has checked, at create, that every file of this service the input names is the
//! caller's, and recorded them on the prediction (`input_files`). Here each is looked up again
//! (a file deleted since fails the prediction with `INPUT_FILE_MISSING`) and replaced by:
//! - for a Cog model ([`FileAccess::Url`]): a URL valid until the prediction's deadline, which
//!   the model server fetches without a key: a presigned URL of the object for a file in the
//!   S3-compatible store (the bytes never pass through the api), else a signed download URL
//!   under `PUBLIC_BASE_URL`;
//! - for a built-in model ([`FileAccess::Bytes`]): a `data:` URI of its bytes, which the model
//!   reads with [`data_uri_bytes`]. An `http(s)` URL in a `format: uri` field is fetched for it
//!   too (at most [`MAX_FETCH_BYTES`], within [`FETCH_TIMEOUT`]); a `data:` URI is passed as is.
//!
//! A Cog model reads `data:` and `http(s)` URIs itself, so they reach it unchanged.

use std::time::Duration;

use base64::{Engine, engine::general_purpose::STANDARD};
use common::{
    domain::{AccountId, ApiSurface, FileId},
    files::Files,
    links::Links,
};
use serde_json::{Map, Value};

use super::ModelError;

/// The most bytes a built-in model's file input may have (read into memory for it).
pub const MAX_FETCH_BYTES: u64 = 64 * 1024 * 1024;
/// How long fetching an `http(s)` input for a built-in model may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// How a model reads its file inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileAccess {
    /// It fetches URLs itself (Cog).
    Url,
    /// It is handed the bytes, as `data:` URIs (built-in models).
    Bytes,
}

/// The files a prediction's input names, and whose they are.
#[derive(Debug, Clone)]
pub struct NamedFiles {
    /// The owning account.
    pub account: AccountId,
    /// The files of this service its input names (checked by the api at create).
    pub files: Vec<FileId>,
    /// Until when a signed URL handed to the model must work (unix seconds).
    pub until: i64,
    /// A trained version's weights, which may be another account's (a public model's): the
    /// api vouched for them when it created the prediction.
    pub weights: Option<FileId>,
}

impl NamedFiles {
    /// No files (an input that names none).
    pub fn none() -> Self {
        Self { account: AccountId::generate(), files: Vec::new(), until: 0, weights: None }
    }
}

/// Resolves file inputs.
#[derive(Debug, Clone)]
pub struct FileInputs {
    files: Files,
    links: Links,
    http: reqwest::Client,
}

fn missing(path: &str, detail: impl std::fmt::Display) -> ModelError {
    ModelError { code: "INPUT_FILE_MISSING".into(), message: format!("{path}: {detail}") }
}

impl FileInputs {
    /// Resolution against `files`, signing URLs with `links`.
    pub fn new(files: Files, links: Links) -> Self {
        let http = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::limited(3))
            .build()
            .unwrap_or_default();
        Self { files, links, http }
    }

    /// `input` as a model that reads files by `access` receives it; `uri_fields` are the
    /// top-level `format: uri` properties of its schema.
    pub async fn resolve(
        &self,
        mut input: Map<String, Value>,
        named: &NamedFiles,
        access: FileAccess,
        uri_fields: &[String],
    ) -> Result<Map<String, Value>, ModelError> {
        for (name, value) in input.iter_mut() {
            let is_uri_field = uri_fields.iter().any(|f| f == name);
            match value {
                Value::String(s) => {
                    if let Some(resolved) = self.one(s, &format!("input.{name}"), named, access, is_uri_field).await? {
                        *s = resolved;
                    }
                }
                Value::Array(items) => {
                    for (i, item) in items.iter_mut().enumerate() {
                        if let Value::String(s) = item
                            && let Some(resolved) =
                                self.one(s, &format!("input.{name}[{i}]"), named, access, is_uri_field).await?
                        {
                            *s = resolved;
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(input)
    }

    /// What one value becomes, if anything changes.
    async fn one(
        &self,
        value: &str,
        path: &str,
        named: &NamedFiles,
        access: FileAccess,
        is_uri_field: bool,
    ) -> Result<Option<String>, ModelError> {
        if let Some(id) = self.links.file_named_by(value).filter(|id| named.files.contains(id)) {
            let record = self.files.get(&id).await.map_err(|e| ModelError {
                code: "INPUT_FILE_UNAVAILABLE".into(),
                message: format!("{path}: file {id} could not be read: {e}"),
            })?;
            let record = record
                .filter(|r| r.account_id == named.account || named.weights.as_ref() == Some(&id))
                .ok_or_else(|| missing(path, format!("file {id} was deleted before the prediction ran")))?;
            return Ok(Some(match access {
                FileAccess::Url => {
                    let left = u64::try_from(named.until - chrono::Utc::now().timestamp()).unwrap_or(0);
                    match self.files.presigned(&record, Duration::from_secs(left)) {
                        Some(url) => url.to_string(),
                        None => {
                            self.links.file_signed_download(&id, &record.account_id, named.until, ApiSurface::Canonical)
                        }
                    }
                }
                FileAccess::Bytes => {
                    let size = u64::try_from(record.size).unwrap_or(u64::MAX);
                    if size > MAX_FETCH_BYTES {
                        return Err(too_large(path));
                    }
                    let bytes = self
                        .files
                        .read_all(&record)
                        .await
                        .map_err(|e| missing(path, format!("file {id} could not be read: {e}")))?;
                    data_uri(&record.content_type, &bytes)
                }
            }));
        }
        if access == FileAccess::Bytes
            && is_uri_field
            && (value.starts_with("http://") || value.starts_with("https://"))
        {
            return self.fetch(value, path).await.map(Some);
        }
        Ok(None)
    }

    /// Fetches `url` into a `data:` URI, for a built-in model.
    async fn fetch(&self, url: &str, path: &str) -> Result<String, ModelError> {
        let unreadable = |e: &dyn std::fmt::Display| ModelError {
            code: "INPUT_FILE_UNAVAILABLE".into(),
            message: format!("{path}: {url} could not be fetched: {e}"),
        };
        let response = self.http.get(url).send().await.map_err(|e| unreadable(&e))?;
        let response = response.error_for_status().map_err(|e| unreadable(&e))?;
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/octet-stream")
            .to_owned();
        let mut bytes = Vec::new();
        let mut response = response;
        while let Some(chunk) = response.chunk().await.map_err(|e| unreadable(&e))? {
            bytes.extend_from_slice(&chunk);
            if bytes.len() as u64 > MAX_FETCH_BYTES {
                return Err(too_large(path));
            }
        }
        Ok(data_uri(&content_type, &bytes))
    }
}

fn too_large(path: &str) -> ModelError {
    ModelError {
        code: "INPUT_FILE_TOO_LARGE".into(),
        message: format!("{path}: a built-in model reads at most {MAX_FETCH_BYTES} bytes of a file"),
    }
}

/// A `data:` URI of `bytes` of media type `content_type`.
pub fn data_uri(content_type: &str, bytes: &[u8]) -> String {
    format!("data:{content_type};base64,{}", STANDARD.encode(bytes))
}

/// The media type and bytes of a `data:` URI (base64 or percent-free plain text).
pub fn data_uri_bytes(uri: &str) -> Option<(String, Vec<u8>)> {
    let (head, data) = uri.strip_prefix("data:")?.split_once(',')?;
    let (media, base64) = match head.strip_suffix(";base64") {
        Some(media) => (media, true),
        None => (head, false),
    };
    let media = if media.is_empty() { "text/plain" } else { media.split(';').next().unwrap_or(media) };
    let bytes = if base64 { STANDARD.decode(data.trim()).ok()? } else { data.as_bytes().to_vec() };
    Some((media.to_owned(), bytes))
}

/// The top-level properties of `schema` that are `format: uri`.
pub fn uri_fields(schema: &Value) -> Vec<String> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else { return Vec::new() };
    properties
        .iter()
        .filter(|(_, p)| {
            let uri = |s: &Value| s.get("format").and_then(Value::as_str) == Some("uri");
            uri(p) || p.get("items").is_some_and(uri)
        })
        .map(|(name, _)| name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn data_uris_round_trip_and_plain_ones_read_as_text() {
        let uri = data_uri("image/png", b"\x89PNG\x00\x01");
        assert_eq!(data_uri_bytes(&uri), Some(("image/png".into(), b"\x89PNG\x00\x01".to_vec())));
        assert_eq!(data_uri_bytes("data:,hello"), Some(("text/plain".into(), b"hello".to_vec())));
        assert_eq!(data_uri_bytes("data:text/plain;charset=utf-8,hi"), Some(("text/plain".into(), b"hi".to_vec())));
        assert_eq!(data_uri_bytes("data:image/png;base64,!!!"), None);
        assert_eq!(data_uri_bytes("https://h/x"), None);
    }

    #[test]
    fn uri_fields_are_the_format_uri_properties() {
        let schema = json!({"properties": {
            "image": {"type": "string", "format": "uri"},
            "masks": {"type": "array", "items": {"type": "string", "format": "uri"}},
            "prompt": {"type": "string"},
        }});
        let mut fields = uri_fields(&schema);
        fields.sort();
        assert_eq!(fields, vec!["image", "masks"]);
    }
}
