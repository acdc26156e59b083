//! A file as clients see it (`GET /v1/files/{id}`, uploads, the list), built from its record
//! ([`FileView::of`]).

use chrono::{DateTime, Utc};

use crate::{
    domain::ApiSurface,
    links::{Links, SIGNED_DOWNLOAD_SECONDS},
    store::FileRecord,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The checksums of a file's bytes.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileChecksums {
    /// SHA-256, lowercase hex.
    pub sha256: String,
    /// MD5, lowercase hex.
    pub md5: String,
}

/// The links of a file.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileUrls {
    /// `{base}/v1/files/{id}`: this object (on the surface that answered).
    pub get: String,
    /// `{base}/v1/files/{id}/download?owner=…&expiry=…&signature=…`: the bytes, without
    /// `Authorization`, until `expiry` (unix seconds).
    pub download: String,
}

/// A file.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileView {
    /// The file id.
    pub id: String,
    /// Its file name.
    pub name: String,
    /// Its media type.
    pub content_type: String,
    /// Its size in bytes.
    pub size: i64,
    /// The MD5 of its bytes (lowercase hex), also its HTTP `ETag`.
    pub etag: String,
    /// Checksums of its bytes.
    pub checksums: FileChecksums,
    /// What the uploader attached (`{}` when nothing).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub metadata: Map<String, Value>,
    /// When it was stored.
    pub created_at: DateTime<Utc>,
    /// When it is deleted (`null` for a prediction's output, which goes with the prediction).
    pub expires_at: Option<DateTime<Utc>>,
    /// Its links.
    pub urls: FileUrls,
}

impl FileView {
    /// File `record` as `surface` shows it at `now` (unix seconds): its signed download works
    /// for [`SIGNED_DOWNLOAD_SECONDS`].
    pub fn of(record: &FileRecord, links: &Links, surface: ApiSurface, now: i64) -> Self {
        let metadata = match serde_json::from_str(&record.metadata) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        };
        let expiry = now + SIGNED_DOWNLOAD_SECONDS;
        Self {
            id: record.id.to_string(),
            name: record.name.clone(),
            content_type: record.content_type.clone(),
            size: record.size,
            etag: record.md5.clone(),
            checksums: FileChecksums { sha256: record.sha256.clone(), md5: record.md5.clone() },
            metadata,
            created_at: record.created_at.to_chrono(),
            expires_at: record.expires_at.map(|t| t.to_chrono()),
            urls: FileUrls {
                get: links.file(&record.id, surface),
                download: links.file_signed_download(&record.id, &record.account_id, expiry, surface),
            },
        }
    }
}
