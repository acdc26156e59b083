//! The api's configuration (see [`common::config`] for the shared settings).
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `API_BIND` | `0.0.0.0:8080` | address to listen on |
//! | `API_METRICS_BIND` | none (off) | where to serve `/metrics` (and `/health`): an address of its own, or `public` for `API_BIND` beside the API; never the public port unless asked |
//! | `DEFAULT_RATE_LIMIT_RPM` | `3000` | `rate_limit_rpm` of new keys: requests a minute, every authenticated request counted |
//! | `SHUTDOWN_GRACE_SECONDS` | `30` | how long in-flight requests may finish after SIGTERM |
//! | `API_MAX_IN_FLIGHT` | `512` | requests this replica works on at once; past it, 503 with `Retry-After: 1` at once (`/health`, `/ready`, `/metrics` excepted; held waits give their slot back) |
//! | `API_REQUEST_DEADLINE_SECONDS` | `10` | how long a request's work may go on: past it, its reads stop on the server and its prediction, if still queued for its write, is not written (503 with `Retry-After`); a `Prefer: wait` create adds its wait, an upload has its own limit |
//! | `API_MAX_QUEUE_SECONDS` | `0` (off) | the longest a new prediction may expect to wait to start; a create past it is refused at once, 503 with `Retry-After` |
//! | `API_MAX_WAITS` | `1000` | `Prefer: wait` creates held at once by this replica; past it, answered at once |
//! | `API_MAX_WAITS_PER_KEY` | `100` | the same, per API key |
//! | `API_MAX_FILE_BYTES` | `104857600` (100 MiB) | the largest upload of the Files API; past it, 413 |
//! | `FILES_RETENTION_HOURS` | `24` | an upload expires this long after it was made, and is then deleted |
//! | `API_DEPLOYMENT_SLOTS_PER_INSTANCE` | `4` | predictions one runner of a deployment runs at once: `deployment_desired_instances` is its pending work divided by this |

use std::{net::SocketAddr, time::Duration};

use common::config::{CommonConfig, ConfigError, Env};

/// Where the api serves `/metrics` (`API_METRICS_BIND`). The figures name every account's
/// deployments and models, so the public port serves them only when asked to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsAt {
    /// Nowhere (unset).
    Off,
    /// On `API_BIND`, beside the API (`public`): a single-machine setup whose port only its
    /// operator reaches, such as `deploy/local/up`.
    Public,
    /// On a listener of its own (an address): what the Kubernetes kit and compose file use.
    Bind(SocketAddr),
}

impl MetricsAt {
    fn from_env(env: &Env<'_>) -> Result<Self, ConfigError> {
        match env.get("API_METRICS_BIND").as_deref().map(str::trim) {
            None | Some("") => Ok(Self::Off),
            Some("public") => Ok(Self::Public),
            Some(text) => text.parse().map(Self::Bind).map_err(|_| ConfigError {
                var: "API_METRICS_BIND".into(),
                reason: format!("{text:?} is neither an address (host:port) nor `public`"),
            }),
        }
    }
}

/// Everything the api reads at start.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// Shared settings.
    pub common: CommonConfig,
    /// `API_BIND`: where to listen.
    pub bind: SocketAddr,
    /// `API_METRICS_BIND`: where `/metrics` is served, if anywhere.
    pub metrics: MetricsAt,
    /// `DEFAULT_RATE_LIMIT_RPM`: requests per minute of new keys.
    pub default_rate_limit_rpm: u32,
    /// `SHUTDOWN_GRACE_SECONDS`: how long in-flight requests may finish after a shutdown signal.
    pub shutdown_grace: Duration,
    /// `API_MAX_IN_FLIGHT`: requests this replica works on at once (see [`crate::http::shed`]).
    pub max_in_flight: usize,
    /// `API_REQUEST_DEADLINE_SECONDS`: how long a request's work may go on (see
    /// [`common::deadline`]).
    pub request_deadline: Duration,
    /// `API_MAX_QUEUE_SECONDS`: the longest wait to start a create may expect; `None` (0) for
    /// no bound (see [`crate::state::queue_places`]).
    pub max_queue_wait: Option<Duration>,
    /// `API_MAX_WAITS`: `Prefer: wait` creates this replica holds at once.
    pub max_waits: usize,
    /// `API_MAX_WAITS_PER_KEY`: the same, per API key.
    pub max_waits_per_key: usize,
    /// `API_MAX_FILE_BYTES`: the largest upload.
    pub max_file_bytes: u64,
    /// `FILES_RETENTION_HOURS`: how long an upload is kept.
    pub files_retention: Duration,
    /// `API_DEPLOYMENT_SLOTS_PER_INSTANCE`: predictions one runner of a deployment runs at once.
    pub deployment_slots_per_instance: u32,
}

impl ApiConfig {
    /// Reads and checks the configuration.
    pub fn from_env(env: &Env<'_>) -> Result<Self, ConfigError> {
        let default_rate_limit_rpm = env.parse("DEFAULT_RATE_LIMIT_RPM", 3_000u32)?;
        if default_rate_limit_rpm == 0 {
            return Err(ConfigError { var: "DEFAULT_RATE_LIMIT_RPM".into(), reason: "must be at least 1".into() });
        }
        let max_file_bytes = env.parse("API_MAX_FILE_BYTES", 100 * 1024 * 1024u64)?;
        if max_file_bytes == 0 {
            return Err(ConfigError { var: "API_MAX_FILE_BYTES".into(), reason: "must be at least 1".into() });
        }
        let retention_hours = env.parse("FILES_RETENTION_HOURS", 24u64)?;
        if retention_hours == 0 || retention_hours > 24 * 366 {
            return Err(ConfigError { var: "FILES_RETENTION_HOURS".into(), reason: "must be from 1 to 8784".into() });
        }
        let deployment_slots_per_instance = env.parse("API_DEPLOYMENT_SLOTS_PER_INSTANCE", 4u32)?;
        if deployment_slots_per_instance == 0 {
            return Err(ConfigError {
                var: "API_DEPLOYMENT_SLOTS_PER_INSTANCE".into(),
                reason: "must be at least 1".into(),
            });
        }
        Ok(Self {
            common: CommonConfig::from_env(env)?,
            deployment_slots_per_instance,
            max_file_bytes,
            files_retention: Duration::from_secs(retention_hours * 3600),
            bind: env.parse("API_BIND", SocketAddr::from(([0, 0, 0, 0], 8080)))?,
            metrics: MetricsAt::from_env(env)?,
            default_rate_limit_rpm,
            shutdown_grace: env.seconds("SHUTDOWN_GRACE_SECONDS", Duration::from_secs(30))?,
            max_in_flight: env.parse("API_MAX_IN_FLIGHT", 512)?,
            max_waits: env.parse("API_MAX_WAITS", 1000)?,
            request_deadline: positive_seconds(env, "API_REQUEST_DEADLINE_SECONDS", Duration::from_secs(10))?,
            max_queue_wait: Some(env.seconds("API_MAX_QUEUE_SECONDS", Duration::ZERO)?).filter(|d| !d.is_zero()),
            max_waits_per_key: env.parse("API_MAX_WAITS_PER_KEY", 100)?,
        })
    }
}

/// `name` in seconds, which must be more than zero.
fn positive_seconds(env: &Env<'_>, name: &str, default: Duration) -> Result<Duration, ConfigError> {
    let value = env.seconds(name, default)?;
    if value.is_zero() {
        return Err(ConfigError { var: name.into(), reason: "must be more than 0 seconds".into() });
    }
    Ok(value)
}
