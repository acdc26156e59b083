//! The runner's configuration (see [`common::config`] for the shared settings).
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `RUNNER_MODELS` | `*` | models to serve: comma-separated `owner/name`, `owner/*`, `*` |
//! | `RUNNER_CONCURRENCY` | `4` | predictions running at once in this process |
//! | `RUNNER_MODEL_CONCURRENCY` | `RUNNER_CONCURRENCY` | predictions of one model running at once here |
//! | `RUNNER_MODEL_WEIGHTS` | each 1 | shares of busy models: `owner/name=weight`, comma-separated (weights 1-1000) |
//! | `PRIORITY_AGING_SECONDS` | `60` | a job waiting this long counts one priority level higher (and one more for each such wait again), so low priority never starves |
//! | `RUNNER_ACK_WAIT_SECONDS` | `6` | a job not acked or progressed for this long is redelivered (a running job sends progress every third of it; a killed runner's jobs resume elsewhere within about this, or once its presence is 7 s old if that is later) |
//! | `RUNNER_MAX_DELIVER` | `5` | deliveries of one job before it is given up |
//! | `RUNNER_SHUTDOWN_GRACE_SECONDS` | `20` | how long running predictions may finish after SIGTERM |
//! | `RUNNER_RECONCILE_SECONDS` | `10` | how often the reconciler looks for stuck predictions |
//! | `RETENTION_SECONDS` | `3600` | how long after completion a prediction's data is kept |
//! | `RUNNER_METRICS_BIND` | none | where to serve `/metrics` and `/health` (off when unset) |
//! | `RUNNER_COG` | none | Cog models, comma-separated: `owner/name=[capability@]dir:/path[?settings]`, a Cog project the runner starts and stops itself (`models::cog::instances`; settings `idle_seconds`, `min_instances`, `max_instances`, `setup_timeout`), or `owner/name=[capability@]http://host:port`, a server someone else runs |
//! | `RUNNER_COG_TRAIN` | none | trainers, comma-separated: `owner/name=dir:/path` (the project's `train`) or `owner/name=http://host:port` (a Cog server in train mode, `--x-mode train`), each of a model this runner serves, or of the version `RUNNER_MODEL_VERSIONS` names for it (a runner of trainings only); its trainings run here one at a time |
//! | `RUNNER_COG_PYTHON` | `python3` | the Python with coglet that starts the projects' servers (`deploy/local/up` gives the one `deploy/local/install` makes) |
//! | `RUNNER_COG_MIN_INSTANCES` | `0` | a project's instances kept running when idle, where its declaration says nothing |
//! | `RUNNER_COG_MAX_INSTANCES` | `1` | a project's instances at most (1 to 64), each with the project's `concurrency.max` slots, where its declaration says nothing |
//! | `RUNNER_COG_IDLE_SECONDS` | `300` | how long a project's instance may sit idle before it is stopped |
//! | `RUNNER_COG_SYNC` | `true` | call non-streaming Cog models synchronously, without a webhook (see `models::cog::Transport`) |
//! | `RUNNER_COG_CALLBACK_BIND` | `127.0.0.1:0` | where the runner receives Cog webhooks |
//! | `RUNNER_COG_CALLBACK_URL` | the bound address | that receiver's URL as Cog servers reach it; a Cog server started with `--upload-url {this URL}/upload/` streams its output files there |
//! | `RUNNER_MAX_OUTPUT_FILE_BYTES` | `5368709120` (5 GiB) | the largest output file a Cog server may upload (past it 413, and the prediction fails) |
//! | `RUNNER_RETENTION_SWEEP_SECONDS` | `60` | how often expired data is removed |
//! | `RUNNER_HARDWARE` | `cpu` | the hardware pool this runner declares: deployments on that pool run here |
//! | `PREDICTION_MAX_LOG_BYTES` | `1048576` (1 MiB) | the logs a prediction keeps: past it the oldest lines go, after a line saying how much was cut |
//! | `PREDICTION_MAX_OUTPUT_BYTES` | `4194304` (4 MiB) | the longest output, as its text or JSON text with each file counted as its URL: past it the prediction fails with `OUTPUT_TOO_LARGE` |
//! | `RUNNER_MODEL_VERSIONS` | derived | version ids of served models: `owner/name=id`, comma-separated (an image digest's hex, say; 1-64 letters and digits); a model not named has the digest of what it registers |
//! | `RUNNER_VERSIONS_ARE_LATEST` | `true` | whether the versions this runner serves become their models' current versions when it registers them; `false` for a runner of an older version kept for the predictions pinned to it (a Kubernetes version pod): it records its versions, and the models' current versions stay as they are |

use std::{collections::HashMap, fmt, time::Duration};

use crate::{
    models::cog::{CogTarget, check_instances, instance::InstanceSettings, parse_targets_with},
    progress::Limits,
};
use common::{
    config::{CommonConfig, ConfigError, Env},
    domain::{ModelRef, Pool, model::is_valid_segment},
};

/// Which models a runner serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSelector {
    /// Every model (`*`).
    All,
    /// Every model of one owner (`owner/*`).
    Owner(String),
    /// One model (`owner/name`).
    Exact(ModelRef),
}

impl ModelSelector {
    /// Whether `model` is selected.
    pub fn matches(&self, model: &ModelRef) -> bool {
        match self {
            Self::All => true,
            Self::Owner(owner) => model.owner() == owner,
            Self::Exact(m) => m == model,
        }
    }
}

impl fmt::Display for ModelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::All => f.write_str("*"),
            Self::Owner(o) => write!(f, "{o}/*"),
            Self::Exact(m) => write!(f, "{m}"),
        }
    }
}

/// Parses `demo/*,acme/upscaler,*`.
pub fn parse_selectors(text: &str) -> Result<Vec<ModelSelector>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match s {
            "*" | "*/*" => Ok(ModelSelector::All),
            _ => match s.split_once('/') {
                Some((owner, "*")) if is_valid_segment(owner) => Ok(ModelSelector::Owner(owner.to_owned())),
                _ => s.parse().map(ModelSelector::Exact).map_err(|_| format!("{s:?} is not owner/name, owner/* or *")),
            },
        })
        .collect::<Result<Vec<_>, _>>()
        .and_then(|v| if v.is_empty() { Err("no model selected".into()) } else { Ok(v) })
}

/// Parses `demo/sleep=2,acme/up=5`.
pub fn parse_weights(text: &str) -> Result<HashMap<ModelRef, u32>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|pair| {
            let bad = || format!("{pair:?} is not owner/name=weight with a weight from 1 to 1000");
            let (model, weight) = pair.split_once('=').ok_or_else(bad)?;
            let model: ModelRef = model.trim().parse().map_err(|_| bad())?;
            let weight: u32 = weight.trim().parse().ok().filter(|w| (1..=1000).contains(w)).ok_or_else(bad)?;
            Ok((model, weight))
        })
        .collect()
}

/// Parses `demo/echo=v2, acme/up=3f2a...` into version ids by model.
pub fn parse_versions(text: &str) -> Result<HashMap<ModelRef, String>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|pair| {
            let bad = || format!("{pair:?} is not owner/name=id with an id of 1 to 64 letters and digits");
            let (model, id) = pair.split_once('=').ok_or_else(bad)?;
            let model: ModelRef = model.trim().parse().map_err(|_| bad())?;
            let id = id.trim();
            common::domain::route::is_version_id(id).then(|| (model, id.to_owned())).ok_or_else(bad)
        })
        .collect()
}

/// Everything the runner reads at start.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// Shared settings.
    pub common: CommonConfig,
    /// `RUNNER_MODELS`: the models served.
    pub models: Vec<ModelSelector>,
    /// `RUNNER_CONCURRENCY`: predictions running at once.
    pub concurrency: usize,
    /// `RUNNER_MODEL_CONCURRENCY`: predictions of one model running at once (default: all).
    pub model_concurrency: Option<usize>,
    /// `RUNNER_MODEL_WEIGHTS`: each busy model's share of slots relative to the others (1 when
    /// not named).
    pub model_weights: HashMap<ModelRef, u32>,
    /// `PRIORITY_AGING_SECONDS`: a job waiting this long counts one level higher.
    pub priority_aging: Duration,
    /// `RUNNER_ACK_WAIT_SECONDS`: redelivery after this long without an ack or progress.
    pub ack_wait: Duration,
    /// `RUNNER_MAX_DELIVER`: deliveries of one job before giving up.
    pub max_deliver: i64,
    /// `RUNNER_SHUTDOWN_GRACE_SECONDS`: how long running predictions may finish on shutdown.
    pub shutdown_grace: Duration,
    /// `RUNNER_RECONCILE_SECONDS`: how often the reconciler runs.
    pub reconcile_interval: Duration,
    /// `RETENTION_SECONDS`: how long after completion input, output, logs and files are kept.
    pub retention: Duration,
    /// `RUNNER_RETENTION_SWEEP_SECONDS`: how often the retention sweeper runs.
    pub retention_sweep_interval: Duration,
    /// `RUNNER_METRICS_BIND`: where to serve `/metrics` and `/health`, if anywhere.
    pub metrics_bind: Option<std::net::SocketAddr>,
    /// `RUNNER_COG`: models served by Cog servers.
    pub cog: Vec<CogTarget>,
    /// `RUNNER_COG_TRAIN`: trainers (Cog servers in train mode) of served models.
    pub cog_train: Vec<CogTarget>,
    /// `RUNNER_COG_PYTHON`: the Python that starts the projects' servers.
    pub cog_python: std::path::PathBuf,
    /// `RUNNER_COG_SYNC`: whether non-streaming Cog models are called synchronously.
    pub cog_sync: bool,
    /// `RUNNER_COG_CALLBACK_BIND`: where Cog webhooks are received.
    pub cog_callback_bind: std::net::SocketAddr,
    /// `RUNNER_COG_CALLBACK_URL`: the receiver's URL as Cog servers reach it.
    pub cog_callback_url: Option<String>,
    /// `RUNNER_MAX_OUTPUT_FILE_BYTES`: the largest file a Cog server may upload.
    pub max_output_file_bytes: u64,
    /// `RUNNER_HARDWARE`: the hardware pool this runner declares.
    pub hardware: Pool,
    /// `RUNNER_MODEL_VERSIONS`: version ids chosen by the operator.
    pub versions: HashMap<ModelRef, String>,
    /// `RUNNER_VERSIONS_ARE_LATEST`: whether registering a served version makes it its
    /// model's current one.
    pub versions_are_latest: bool,
    /// `PREDICTION_MAX_LOG_BYTES`, `PREDICTION_MAX_OUTPUT_BYTES`: what a prediction keeps.
    pub limits: Limits,
}

/// The most logs and output together: with an input of up to 1 MiB and the rest of the
/// prediction they stay well inside MongoDB's 16 MiB document.
const MAX_LOGS_AND_OUTPUT: usize = 12 * 1024 * 1024;

/// `PREDICTION_MAX_LOG_BYTES` and `PREDICTION_MAX_OUTPUT_BYTES`, each at least 1 KiB and
/// together at most [`MAX_LOGS_AND_OUTPUT`].
fn limits(env: &Env<'_>) -> Result<Limits, ConfigError> {
    let defaults = Limits::default();
    let limits = Limits {
        max_log_bytes: env.parse("PREDICTION_MAX_LOG_BYTES", defaults.max_log_bytes)?,
        max_output_bytes: env.parse("PREDICTION_MAX_OUTPUT_BYTES", defaults.max_output_bytes)?,
    };
    let bad = |var: &str, reason: &str| ConfigError { var: var.into(), reason: reason.into() };
    if limits.max_log_bytes < 1024 {
        return Err(bad("PREDICTION_MAX_LOG_BYTES", "must be at least 1024"));
    }
    if limits.max_output_bytes < 1024 {
        return Err(bad("PREDICTION_MAX_OUTPUT_BYTES", "must be at least 1024"));
    }
    if limits.max_log_bytes + limits.max_output_bytes > MAX_LOGS_AND_OUTPUT {
        return Err(bad(
            "PREDICTION_MAX_OUTPUT_BYTES",
            "with PREDICTION_MAX_LOG_BYTES must stay within 12 MiB (a prediction is one MongoDB document of at most 16 MiB)",
        ));
    }
    Ok(limits)
}

impl RunnerConfig {
    /// Reads and checks the configuration.
    pub fn from_env(env: &Env<'_>) -> Result<Self, ConfigError> {
        let bad = |var: &str, reason: String| ConfigError { var: var.into(), reason };
        let models = parse_selectors(&env.string("RUNNER_MODELS", "*")).map_err(|e| bad("RUNNER_MODELS", e))?;
        let concurrency: usize = env.parse("RUNNER_CONCURRENCY", 4)?;
        if concurrency == 0 {
            return Err(bad("RUNNER_CONCURRENCY", "must be at least 1".into()));
        }
        let max_deliver: i64 = env.parse("RUNNER_MAX_DELIVER", 5)?;
        if max_deliver < 1 {
            return Err(bad("RUNNER_MAX_DELIVER", "must be at least 1".into()));
        }
        let instances = InstanceSettings {
            min_instances: env.parse("RUNNER_COG_MIN_INSTANCES", 0usize)?,
            max_instances: env.parse("RUNNER_COG_MAX_INSTANCES", 1usize)?,
            idle: env.seconds("RUNNER_COG_IDLE_SECONDS", Duration::from_secs(300))?,
            setup_timeout: None,
        };
        check_instances(&instances).map_err(|e| bad("RUNNER_COG_MAX_INSTANCES", e))?;
        let ack_wait = env.seconds("RUNNER_ACK_WAIT_SECONDS", Duration::from_secs(6))?;
        if ack_wait < Duration::from_secs(1) {
            return Err(bad("RUNNER_ACK_WAIT_SECONDS", "must be at least 1".into()));
        }
        let priority_aging = env.seconds("PRIORITY_AGING_SECONDS", Duration::from_secs(60))?;
        if priority_aging < Duration::from_secs(1) {
            return Err(bad("PRIORITY_AGING_SECONDS", "must be at least 1".into()));
        }
        Ok(Self {
            common: CommonConfig::from_env(env)?,
            priority_aging,
            models,
            concurrency,
            model_concurrency: env
                .get("RUNNER_MODEL_CONCURRENCY")
                .map(|_| env.parse("RUNNER_MODEL_CONCURRENCY", 1usize))
                .transpose()?
                .map(|n| n.max(1)),
            model_weights: parse_weights(&env.string("RUNNER_MODEL_WEIGHTS", ""))
                .map_err(|e| bad("RUNNER_MODEL_WEIGHTS", e))?,
            ack_wait,
            max_deliver,
            shutdown_grace: env.seconds("RUNNER_SHUTDOWN_GRACE_SECONDS", Duration::from_secs(20))?,
            retention: env.seconds("RETENTION_SECONDS", Duration::from_secs(3600))?,
            metrics_bind: env
                .get("RUNNER_METRICS_BIND")
                .map(|_| env.parse("RUNNER_METRICS_BIND", std::net::SocketAddr::from(([127, 0, 0, 1], 0))))
                .transpose()?,
            cog: parse_targets_with(&env.string("RUNNER_COG", ""), &instances).map_err(|e| bad("RUNNER_COG", e))?,
            cog_train: parse_targets_with(&env.string("RUNNER_COG_TRAIN", ""), &instances)
                .map_err(|e| bad("RUNNER_COG_TRAIN", e))?,
            cog_python: env.string("RUNNER_COG_PYTHON", "python3").into(),
            cog_sync: env.flag("RUNNER_COG_SYNC", true)?,
            cog_callback_bind: env
                .parse("RUNNER_COG_CALLBACK_BIND", std::net::SocketAddr::from(([127, 0, 0, 1], 0)))?,
            cog_callback_url: env.get("RUNNER_COG_CALLBACK_URL"),
            max_output_file_bytes: env
                .parse("RUNNER_MAX_OUTPUT_FILE_BYTES", crate::models::cog::uploads::DEFAULT_MAX_FILE_BYTES)?,
            hardware: Pool::parse(&env.string("RUNNER_HARDWARE", common::domain::route::DEFAULT_POOL))
                .map_err(|e| bad("RUNNER_HARDWARE", e.to_string()))?,
            versions: parse_versions(&env.string("RUNNER_MODEL_VERSIONS", ""))
                .map_err(|e| bad("RUNNER_MODEL_VERSIONS", e))?,
            versions_are_latest: env.flag("RUNNER_VERSIONS_ARE_LATEST", true)?,
            limits: limits(env)?,
            retention_sweep_interval: env
                .seconds("RUNNER_RETENTION_SWEEP_SECONDS", Duration::from_secs(60))?
                .max(Duration::from_millis(100)),
            reconcile_interval: env
                .seconds("RUNNER_RECONCILE_SECONDS", Duration::from_secs(10))?
                .max(Duration::from_millis(100)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_parse_and_match() {
        let s = parse_selectors("demo/*, acme/up").expect("valid");
        let echo: ModelRef = "demo/echo".parse().expect("valid");
        let up: ModelRef = "acme/up".parse().expect("valid");
        let other: ModelRef = "acme/other".parse().expect("valid");
        assert!(s.iter().any(|x| x.matches(&echo)));
        assert!(s.iter().any(|x| x.matches(&up)));
        assert!(!s.iter().any(|x| x.matches(&other)));
        assert_eq!(parse_selectors("*").expect("valid"), vec![ModelSelector::All]);
    }

    #[test]
    fn weights_parse_and_bad_ones_are_refused() {
        let w = parse_weights("demo/sleep=2, demo/echo=1").expect("valid");
        assert_eq!(w.get(&"demo/sleep".parse().expect("model")), Some(&2));
        assert!(parse_weights("").expect("none").is_empty());
        for bad in ["demo/sleep", "demo/sleep=0", "demo/sleep=x", "sleep=2", "demo/sleep=1001"] {
            assert!(parse_weights(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn versions_parse_and_bad_ones_are_refused() {
        let v = parse_versions("demo/echo=v2, acme/up=3f2a").expect("valid");
        assert_eq!(v.get(&"demo/echo".parse().expect("model")).map(String::as_str), Some("v2"));
        for bad in
            ["demo/echo", "demo/echo=", "demo/echo=sha256:ab", "echo=v1", &format!("demo/echo={}", "a".repeat(65))]
        {
            assert!(parse_versions(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn malformed_selectors_are_refused() {
        for bad in ["", "demo", "demo/ec*ho", "*/echo", "de mo/*"] {
            assert!(parse_selectors(bad).is_err(), "{bad:?}");
        }
    }
}
