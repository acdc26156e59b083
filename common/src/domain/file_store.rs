//! Which store holds a file's bytes: named in each file's record, so the services read a
//! file from the store that holds it whatever the configured store is now (see
//! [`crate::files`]).

/// Where a file's bytes are kept; recorded with each file, so files written before the
/// configured store changed stay readable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileStoreKind {
    /// GridFS in the service's MongoDB database (files recorded before stores were named).
    #[default]
    Gridfs,
    /// The S3-compatible object store of `S3_*`.
    S3,
}

impl FileStoreKind {
    /// Its name in settings (`FILES_STORE`) and records.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gridfs => "gridfs",
            Self::S3 => "s3",
        }
    }
}

impl std::str::FromStr for FileStoreKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "gridfs" => Ok(Self::Gridfs),
            "s3" => Ok(Self::S3),
            other => Err(format!("`{other}` is not a file store: use gridfs or s3")),
        }
    }
}
