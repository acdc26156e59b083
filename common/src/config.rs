//! Configuration from environment variables, typed and checked at start-up: a missing or bad
//! value stops the process with a message naming the variable. Secrets never appear in logs
//! (their types' `Debug` hides them).
//!
//! Shared settings (every service):
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `MONGODB_URI` | `mongodb://127.0.0.1:27017` | MongoDB connection string |
//! | `MONGODB_DATABASE` | `predictions` | database name |
//! | `NATS_URL` | `nats://127.0.0.1:4222` | NATS server(s), comma separated |
//! | `NATS_PREFIX` | `ps` | prefix of every stream, subject and consumer |
//! | `NATS_STREAM_REPLICAS` | `1` | copies of each JetStream stream (3 on a three-node cluster) |
//! | `NATS_MAX_CONSUMERS` | `100000` | consumers the jobs and events streams may hold (a queue lane is one; nats-server 2.15 otherwise allows 1,000 a stream) |
//! | `PUBLIC_BASE_URL` | `http://localhost:8080` | the api's public address, used in links |
//! | `MASTER_KEY` | required | base64 of 32 bytes; seals API keys and signing secrets |
//! | `MASTER_KEY_PREVIOUS` | none | the key being rotated out: still opens and verifies, never seals |
//! | `PREDICTION_DEADLINE_SECONDS` | `1800` | a prediction not ended by then fails with `PREDICTION_TIMEOUT` |
//! | `TRAINING_DEADLINE_SECONDS` | `86400` | a training not ended by then fails with `PREDICTION_TIMEOUT` |
//! | `MONGODB_COMMAND_METRICS` | `false` | count MongoDB commands for `/metrics` (driver command monitoring; costs CPU, see [`crate::store::commands`]) |
//! | `MONGODB_QUERY_SHAPES` | `false` | also keep the shape of every query in memory (a test aid: the test that checks every query has an index) |
//! | `FILES_STORE` | `gridfs` | where new files' bytes go: `gridfs` (MongoDB) or `s3` |
//! | `S3_BUCKET` | none | the S3-compatible bucket (required by `FILES_STORE=s3`; keep it set after switching back to `gridfs` while files stored there should stay readable) |
//! | `S3_ENDPOINT` | AWS | the store's address, for a store other than AWS S3 |
//! | `S3_REGION` | `AWS_REGION`, else `us-east-1` | the region requests are signed for |
//! | `S3_FORCE_PATH_STYLE` | `false` | `<endpoint>/<bucket>/<key>` addressing (MinIO, S3Proxy) |
//! | `S3_SINGLE_PUT_MAX_BYTES` | `5242880` (5 MiB) | a file whose length is declared up to this size is written in one `PutObject`; larger or undeclared, as a multipart upload (at most 5 GiB; S3Proxy: see docs/files.md) |
//! | `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN` | required with `S3_BUCKET` (token optional) | the store's credentials |
//! | `FILES_UPLOAD_TIMEOUT_SECONDS` | `3600` | the longest a file's bytes may take to be stored; unfinished uploads older than this (and a minute) are swept |
//! | `FILES_S3_REDIRECT` | `true` | downloads of files in S3 answer 307 to a presigned object URL; `false` streams them through the api |

use std::{fmt::Display, str::FromStr, time::Duration};

use crate::{
    crypto::MasterKey,
    domain::JobKind,
    files::{FileStoreKind, FilesConfig, S3Settings},
    store::commands::Monitoring,
    subjects::Subjects,
};

/// Why configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("configuration: {var}: {reason}")]
pub struct ConfigError {
    /// The variable at fault.
    pub var: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Looks a variable up by name.
type Lookup<'a> = Box<dyn Fn(&str) -> Option<String> + 'a>;

/// A source of settings: the process environment, or a map in tests.
pub struct Env<'a> {
    lookup: Lookup<'a>,
}

impl<'a> Env<'a> {
    /// The process environment.
    pub fn process() -> Self {
        Self::from_fn(|name| std::env::var(name).ok())
    }

    /// Settings from any lookup function (tests).
    pub fn from_fn(lookup: impl Fn(&str) -> Option<String> + 'a) -> Self {
        Self { lookup: Box::new(lookup) }
    }

    /// The variable's value if set and not empty.
    pub fn get(&self, name: &str) -> Option<String> {
        (self.lookup)(name).filter(|v| !v.trim().is_empty())
    }

    /// The value, or `default`.
    pub fn string(&self, name: &str, default: &str) -> String {
        self.get(name).unwrap_or_else(|| default.to_owned())
    }

    /// The value, which must be set.
    pub fn required(&self, name: &str) -> Result<String, ConfigError> {
        self.get(name).ok_or_else(|| ConfigError { var: name.to_owned(), reason: "must be set".into() })
    }

    /// The value parsed as `T`, or `default` when unset.
    pub fn parse<T>(&self, name: &str, default: T) -> Result<T, ConfigError>
    where
        T: FromStr,
        T::Err: Display,
    {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v
                .trim()
                .parse()
                .map_err(|e: T::Err| ConfigError { var: name.to_owned(), reason: format!("{v:?} is not valid: {e}") }),
        }
    }

    /// A duration given in (possibly fractional) seconds, or `default`.
    pub fn seconds(&self, name: &str, default: Duration) -> Result<Duration, ConfigError> {
        let secs: f64 = self.parse(name, default.as_secs_f64())?;
        Duration::try_from_secs_f64(secs).map_err(|e| ConfigError {
            var: name.to_owned(),
            reason: format!("{secs} is not a duration in seconds: {e}"),
        })
    }

    /// A boolean (`true`/`false`/`1`/`0`), or `default`.
    pub fn flag(&self, name: &str, default: bool) -> Result<bool, ConfigError> {
        match self.get(name).as_deref().map(str::trim) {
            None => Ok(default),
            Some("true" | "1" | "yes") => Ok(true),
            Some("false" | "0" | "no") => Ok(false),
            Some(other) => Err(ConfigError { var: name.to_owned(), reason: format!("{other:?} is not true or false") }),
        }
    }
}

/// The consumers a stream may hold unless `NATS_MAX_CONSUMERS` says otherwise. nats-server
/// 2.15 gives every stream that sets no limit of its own a limit of 1,000 (and reads 0 or -1 as
/// "its default"): each queue lane (a model's version, pool, account and level with work in the
/// last day) is a consumer of the jobs stream, and at 1,000 the next lane could not be opened,
/// so its predictions never started (measured with 1,000 accounts waiting on one model).
pub const DEFAULT_MAX_CONSUMERS: i32 = 100_000;

/// How long a job may take from its creation before it fails with `PREDICTION_TIMEOUT`, by
/// kind: a fine-tune takes hours where a prediction takes seconds. A create's `Cancel-After`
/// may only shorten it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// `PREDICTION_DEADLINE_SECONDS` (default 30 minutes).
    pub prediction: Duration,
    /// `TRAINING_DEADLINE_SECONDS` (default 24 hours).
    pub training: Duration,
}

impl Deadlines {
    /// The deadline of a job of `kind`, counted from its creation.
    pub fn of(&self, kind: JobKind) -> Duration {
        match kind {
            JobKind::Prediction => self.prediction,
            JobKind::Training => self.training,
        }
    }
}

/// Settings every service shares.
#[derive(Debug, Clone)]
pub struct CommonConfig {
    /// `MONGODB_URI`: MongoDB connection string.
    pub mongodb_uri: String,
    /// `MONGODB_DATABASE`: database name.
    pub mongodb_database: String,
    /// `NATS_URL`: NATS server address(es).
    pub nats_url: String,
    /// `NATS_PREFIX`: the names of streams, subjects and consumers.
    pub subjects: Subjects,
    /// `NATS_STREAM_REPLICAS`: copies of each stream (1 to 5).
    pub nats_stream_replicas: usize,
    /// `NATS_MAX_CONSUMERS`: the consumers the jobs and events streams may each hold.
    pub nats_max_consumers: i32,
    /// `PUBLIC_BASE_URL`: the api's public address, without a trailing slash.
    pub public_base_url: String,
    /// `MASTER_KEY`: seals API keys, webhook signing secrets and secret inputs at rest; with
    /// `MASTER_KEY_PREVIOUS` (during a rotation) it also opens what the previous key sealed.
    pub master_key: MasterKey,
    /// `PREDICTION_DEADLINE_SECONDS`, `TRAINING_DEADLINE_SECONDS`: the longest a job may
    /// take from creation, by kind.
    pub deadlines: Deadlines,
    /// `MONGODB_COMMAND_METRICS`, `MONGODB_QUERY_SHAPES`: whether MongoDB commands are counted,
    /// and their queries' shapes kept.
    pub command_monitoring: Monitoring,
    /// `FILES_STORE`, `S3_*`, `AWS_*`, `FILES_S3_REDIRECT`: where files' bytes go.
    pub files: FilesConfig,
}

impl CommonConfig {
    /// Reads the shared settings.
    pub fn from_env(env: &Env<'_>) -> Result<Self, ConfigError> {
        let prefix = env.string("NATS_PREFIX", "ps");
        let subjects =
            Subjects::new(&prefix).map_err(|e| ConfigError { var: "NATS_PREFIX".into(), reason: e.to_string() })?;
        let master_key = MasterKey::from_base64(&env.required("MASTER_KEY")?)
            .map_err(|e| ConfigError { var: "MASTER_KEY".into(), reason: e.to_string() })?;
        let master_key = match env.get("MASTER_KEY_PREVIOUS").filter(|v| !v.trim().is_empty()) {
            None => master_key,
            Some(text) => {
                let previous = MasterKey::from_base64(&text)
                    .map_err(|e| ConfigError { var: "MASTER_KEY_PREVIOUS".into(), reason: e.to_string() })?;
                master_key.with_previous(&previous)
            }
        };
        let public_base_url = env.string("PUBLIC_BASE_URL", "http://localhost:8080");
        if !(public_base_url.starts_with("http://") || public_base_url.starts_with("https://")) {
            return Err(ConfigError {
                var: "PUBLIC_BASE_URL".into(),
                reason: "must be an absolute http(s) URL".into(),
            });
        }
        Ok(Self {
            mongodb_uri: env.string("MONGODB_URI", "mongodb://127.0.0.1:27017"),
            mongodb_database: env.string("MONGODB_DATABASE", "predictions"),
            nats_url: env.string("NATS_URL", "nats://127.0.0.1:4222"),
            subjects,
            nats_max_consumers: match env.parse("NATS_MAX_CONSUMERS", DEFAULT_MAX_CONSUMERS)? {
                n if n >= 1_000 => n,
                _ => {
                    return Err(ConfigError {
                        var: "NATS_MAX_CONSUMERS".into(),
                        reason: "must be at least 1000".into(),
                    });
                }
            },
            nats_stream_replicas: match env.parse("NATS_STREAM_REPLICAS", 1usize)? {
                n @ 1..=5 => n,
                _ => {
                    return Err(ConfigError {
                        var: "NATS_STREAM_REPLICAS".into(),
                        reason: "must be from 1 to 5".into(),
                    });
                }
            },
            public_base_url: public_base_url.trim_end_matches('/').to_owned(),
            master_key,
            deadlines: Deadlines {
                prediction: env.seconds("PREDICTION_DEADLINE_SECONDS", Duration::from_secs(1800))?,
                training: env.seconds("TRAINING_DEADLINE_SECONDS", Duration::from_secs(24 * 3600))?,
            },
            command_monitoring: match (
                env.flag("MONGODB_COMMAND_METRICS", false)?,
                env.flag("MONGODB_QUERY_SHAPES", false)?,
            ) {
                (_, true) => Monitoring::Shapes,
                (true, false) => Monitoring::Counted,
                (false, false) => Monitoring::Off,
            },
            files: files_config(env)?,
        })
    }
}

/// Where files' bytes go: `FILES_STORE` (`gridfs` or `s3`), and the S3 store when `S3_BUCKET`
/// is set.
fn files_config(env: &Env<'_>) -> Result<FilesConfig, ConfigError> {
    let bad = |var: &str, reason: String| ConfigError { var: var.into(), reason };
    let store: FileStoreKind = env.string("FILES_STORE", "gridfs").parse().map_err(|e| bad("FILES_STORE", e))?;
    let s3 = match env.get("S3_BUCKET").filter(|b| !b.is_empty()) {
        None if store == FileStoreKind::S3 => {
            return Err(bad("S3_BUCKET", "FILES_STORE=s3 needs the bucket's name".into()));
        }
        None => None,
        Some(bucket) => {
            let endpoint = match env.get("S3_ENDPOINT").filter(|e| !e.is_empty()) {
                None => None,
                Some(e) => Some(url::Url::parse(&e).map_err(|err| bad("S3_ENDPOINT", err.to_string()))?),
            };
            let region = env.get("S3_REGION").or_else(|| env.get("AWS_REGION")).unwrap_or_else(|| "us-east-1".into());
            Some(S3Settings {
                bucket,
                endpoint,
                region,
                force_path_style: env.flag("S3_FORCE_PATH_STYLE", false)?,
                single_put_max_bytes: single_put_max_bytes(env)?,
                access_key_id: env.required("AWS_ACCESS_KEY_ID")?,
                secret_access_key: env.required("AWS_SECRET_ACCESS_KEY")?,
                session_token: env.get("AWS_SESSION_TOKEN").filter(|t| !t.is_empty()),
            })
        }
    };
    Ok(FilesConfig {
        store,
        s3,
        s3_redirect: env.flag("FILES_S3_REDIRECT", true)?,
        upload_timeout: env.seconds("FILES_UPLOAD_TIMEOUT_SECONDS", crate::files::DEFAULT_UPLOAD_TIMEOUT)?,
    })
}

/// `S3_SINGLE_PUT_MAX_BYTES`: from one part's size (what is written in one request anyway) to
/// S3's largest `PutObject`.
fn single_put_max_bytes(env: &Env<'_>) -> Result<u64, ConfigError> {
    let (least, most) = (crate::files::s3::PART_SIZE as u64, crate::files::s3::SINGLE_PUT_LIMIT);
    let value = env.parse("S3_SINGLE_PUT_MAX_BYTES", least)?;
    if !(least..=most).contains(&value) {
        let reason = format!("{value} is not between {least} (one part) and {most} (S3's largest PutObject)");
        return Err(ConfigError { var: "S3_SINGLE_PUT_MAX_BYTES".into(), reason });
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn defaults_apply_when_only_the_master_key_is_set() {
        let vars = env(&[("MASTER_KEY", &MasterKey::generate_base64())]);
        let cfg = CommonConfig::from_env(&Env::from_fn(|k| vars.get(k).cloned())).expect("valid");
        assert_eq!(cfg.mongodb_database, "predictions");
        assert_eq!(cfg.public_base_url, "http://localhost:8080");
        assert_eq!(cfg.command_monitoring, Monitoring::Off, "command monitoring costs CPU: opt in");
        assert_eq!(cfg.subjects.jobs_stream(), "PS_JOBS");
    }

    #[test]
    fn a_missing_master_key_names_the_variable() {
        let err = CommonConfig::from_env(&Env::from_fn(|_| None)).expect_err("must fail");
        assert_eq!(err.var, "MASTER_KEY");
    }

    #[test]
    fn a_previous_master_key_opens_what_it_sealed_and_a_bad_one_names_its_variable() {
        let (new, old) = (MasterKey::generate_base64(), MasterKey::generate_base64());
        let vars = env(&[("MASTER_KEY", &new), ("MASTER_KEY_PREVIOUS", &old)]);
        let cfg = CommonConfig::from_env(&Env::from_fn(|k| vars.get(k).cloned())).expect("valid");
        let sealed = MasterKey::from_base64(&old).expect("valid").seal("s", "c");
        assert_eq!(cfg.master_key.open(&sealed, "c"), Ok("s".into()));
        let vars = env(&[("MASTER_KEY", &new), ("MASTER_KEY_PREVIOUS", "short")]);
        let err = CommonConfig::from_env(&Env::from_fn(|k| vars.get(k).cloned())).expect_err("must fail");
        assert_eq!(err.var, "MASTER_KEY_PREVIOUS");
    }

    #[test]
    fn bad_values_name_their_variable() {
        let key = MasterKey::generate_base64();
        let vars = env(&[("MASTER_KEY", &key), ("NATS_PREFIX", "a.b")]);
        let err = CommonConfig::from_env(&Env::from_fn(|k| vars.get(k).cloned())).expect_err("must fail");
        assert_eq!(err.var, "NATS_PREFIX");
        let vars = env(&[("X", "abc")]);
        let e = Env::from_fn(|k| vars.get(k).cloned());
        assert_eq!(e.parse::<u32>("X", 1).expect_err("not a number").var, "X");
        assert_eq!(e.parse::<u32>("Y", 7), Ok(7));
    }

    #[test]
    fn a_trailing_slash_is_dropped_from_the_base_url() {
        let vars =
            env(&[("MASTER_KEY", &MasterKey::generate_base64()), ("PUBLIC_BASE_URL", "https://api.example.com/")]);
        let cfg = CommonConfig::from_env(&Env::from_fn(|k| vars.get(k).cloned())).expect("valid");
        assert_eq!(cfg.public_base_url, "https://api.example.com");
    }
}
