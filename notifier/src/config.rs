//! The notifier's configuration (see [`common::config`] for the shared settings).
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `NOTIFIER_RETRY_SCHEDULE` | `5,30,120,600,1800,3600,10800,21600` | seconds before each retry |
//! | `NOTIFIER_TIMEOUT_SECONDS` | `10` | a delivery succeeds only with a 2xx within this time |
//! | `NOTIFIER_CONCURRENCY` | `64` | first deliveries in flight at once in this process; also the most retry attempts in flight, and receivers whose retries are worked at once (docs/webhooks.md, Isolation) |
//! | `NOTIFIER_ALLOW_PRIVATE_TARGETS` | `false` | allow loopback/private targets (local use, tests) |
//! | `NOTIFIER_SHUTDOWN_GRACE_SECONDS` | `15` | how long in-flight deliveries may finish on shutdown |
//! | `NOTIFIER_METRICS_BIND` | none | where to serve `/metrics` and `/health` (off when unset) |
//! | `NOTIFIER_PER_TARGET` | `8` | deliveries in flight at once to one `host:port` from this process (a busy receiver's events wait in its own queue in MongoDB) |
//! | `NOTIFIER_SECRET_CACHE_SECONDS` | `5` | how long opened signing secrets are reused |
//! | `NOTIFIER_RECORD_LINGER_SECONDS` | `0.02` | how long attempt records gather before one write stores them (acknowledgements wait for it, webhooks do not) |

use std::time::Duration;

use common::config::{CommonConfig, ConfigError, Env};

use crate::retry::RetrySchedule;

/// Everything the notifier reads at start.
#[derive(Debug, Clone)]
pub struct NotifierConfig {
    /// Shared settings.
    pub common: CommonConfig,
    /// `NOTIFIER_RETRY_SCHEDULE`: delays before each retry.
    pub retry_schedule: RetrySchedule,
    /// `NOTIFIER_TIMEOUT_SECONDS`: the bound on one delivery.
    pub timeout: Duration,
    /// `NOTIFIER_CONCURRENCY`: deliveries in flight at once.
    pub concurrency: usize,
    /// `NOTIFIER_ALLOW_PRIVATE_TARGETS`: whether private addresses may be targets.
    pub allow_private_targets: bool,
    /// `NOTIFIER_SHUTDOWN_GRACE_SECONDS`: how long deliveries may finish on shutdown.
    pub shutdown_grace: Duration,
    /// `NOTIFIER_METRICS_BIND`: where to serve `/metrics` and `/health`, if anywhere.
    pub metrics_bind: Option<std::net::SocketAddr>,
    /// `NOTIFIER_PER_TARGET`: deliveries in flight at once to one target.
    pub per_target: usize,
    /// `NOTIFIER_SECRET_CACHE_SECONDS`: how long opened secrets are reused (a rotation takes
    /// effect within this time).
    pub secret_cache: Duration,
    /// `NOTIFIER_RECORD_LINGER_SECONDS`: how long attempt records gather for one write.
    pub record_linger: Duration,
}

impl NotifierConfig {
    /// Reads and checks the configuration.
    pub fn from_env(env: &Env<'_>) -> Result<Self, ConfigError> {
        let bad = |var: &str, reason: String| ConfigError { var: var.into(), reason };
        let retry_schedule =
            RetrySchedule::parse(&env.string("NOTIFIER_RETRY_SCHEDULE", "5,30,120,600,1800,3600,10800,21600"))
                .map_err(|e| bad("NOTIFIER_RETRY_SCHEDULE", e))?;
        let concurrency: usize = env.parse("NOTIFIER_CONCURRENCY", 64)?;
        if concurrency == 0 {
            return Err(bad("NOTIFIER_CONCURRENCY", "must be at least 1".into()));
        }
        let record_linger = env.seconds("NOTIFIER_RECORD_LINGER_SECONDS", Duration::from_millis(20))?;
        if record_linger > Duration::from_secs(1) {
            // Acknowledgements wait for the write; a long linger would only delay them.
            return Err(bad("NOTIFIER_RECORD_LINGER_SECONDS", "must be at most 1 second".into()));
        }
        Ok(Self {
            common: CommonConfig::from_env(env)?,
            retry_schedule,
            timeout: env.seconds("NOTIFIER_TIMEOUT_SECONDS", Duration::from_secs(10))?,
            concurrency,
            allow_private_targets: env.flag("NOTIFIER_ALLOW_PRIVATE_TARGETS", false)?,
            shutdown_grace: env.seconds("NOTIFIER_SHUTDOWN_GRACE_SECONDS", Duration::from_secs(15))?,
            per_target: env.parse("NOTIFIER_PER_TARGET", 8usize)?.max(1),
            metrics_bind: env
                .get("NOTIFIER_METRICS_BIND")
                .map(|_| env.parse("NOTIFIER_METRICS_BIND", std::net::SocketAddr::from(([127, 0, 0, 1], 0))))
                .transpose()?,
            secret_cache: env.seconds("NOTIFIER_SECRET_CACHE_SECONDS", Duration::from_secs(5))?,
            record_linger,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use common::crypto::MasterKey;

    use super::*;

    fn config(vars: &[(&str, &str)]) -> Result<NotifierConfig, ConfigError> {
        let mut map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        map.insert("MASTER_KEY".into(), MasterKey::generate_base64());
        NotifierConfig::from_env(&Env::from_fn(|k| map.get(k).cloned()))
    }

    #[test]
    fn attempt_records_linger_twenty_milliseconds_by_default() {
        assert_eq!(config(&[]).expect("valid").record_linger, Duration::from_millis(20));
    }

    #[test]
    fn a_record_linger_over_a_second_is_refused_by_name() {
        let err = config(&[("NOTIFIER_RECORD_LINGER_SECONDS", "2")]).expect_err("too long");
        assert_eq!(err.var, "NOTIFIER_RECORD_LINGER_SECONDS");
        assert!(config(&[("NOTIFIER_RECORD_LINGER_SECONDS", "0")]).is_ok(), "zero writes at once");
    }
}
