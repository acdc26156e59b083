//! The notifier's Prometheus metrics, served at `GET /metrics` on `NOTIFIER_METRICS_BIND` (with
//! `GET /health` and `GET /ready`):
//!
//! - `notifier_deliveries_total{outcome}`: attempts by outcome: `2xx`, `4xx`, `5xx`, `other`
//!   (another status), `timeout`, `error` (no answer: refused connection, DNS, TLS) and
//!   `refused` (not sent: the SSRF guard refused a private target);
//! - `notifier_attempt_duration_seconds`: from sending to the answer or the failure;
//! - `notifier_deliveries_failed_permanently_total`: events whose last attempt failed;
//! - `notifier_retry_backlog{kind}`: the shared consumer's backlog as JetStream reports it
//!   every [`BACKLOG_REFRESH`]: `pending` (events not yet delivered to any notifier),
//!   `ack_pending` (events being delivered) and `redelivered`; and `waiting`, the events
//!   waiting in MongoDB for a retry ([`crate::backlog`]);
//! - `mongodb_commands_total{command}` and `mongodb_command_duration_seconds{command}` with
//!   `MONGODB_COMMAND_METRICS=true`.

use std::time::Duration;

use common::metrics::kit::*;

use crate::deliver::AttemptResult;

/// How often the retry backlog is read from the consumer's info.
pub const BACKLOG_REFRESH: Duration = Duration::from_secs(5);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

/// The notifier's metrics (cheap to share).
#[derive(Clone)]
pub struct NotifierMetrics {
    registry: std::sync::Arc<Registry>,
    deliveries: Family<OutcomeLabel, Counter>,
    latency: Histogram,
    failed: Counter,
    backlog: Family<KindLabel, Gauge>,
}

impl Default for NotifierMetrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The outcome label of an attempt.
pub fn outcome_of(result: &AttemptResult) -> &'static str {
    match result {
        AttemptResult::Delivered { .. } => "2xx",
        AttemptResult::Rejected { status, .. } if (400..500).contains(status) => "4xx",
        AttemptResult::Rejected { status, .. } if (500..600).contains(status) => "5xx",
        AttemptResult::Rejected { .. } => "other",
        AttemptResult::Failed { timed_out: true, .. } => "timeout",
        AttemptResult::Failed { .. } => "error",
        AttemptResult::Refused { .. } => "refused",
    }
}

impl NotifierMetrics {
    /// Empty metrics, registered.
    pub fn new() -> Self {
        let deliveries = Family::<OutcomeLabel, Counter>::default();
        let latency = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        let failed = Counter::default();
        let backlog = Family::<KindLabel, Gauge>::default();
        let mut registry = Registry::default();
        registry.register("notifier_deliveries", "Webhook delivery attempts by outcome", deliveries.clone());
        registry.register("notifier_attempt_duration_seconds", "Webhook attempt latency", latency.clone());
        registry.register("notifier_deliveries_failed_permanently", "Events whose last attempt failed", failed.clone());
        registry.register(
            "notifier_retry_backlog",
            "Events not yet delivered: in JetStream, and waiting in MongoDB for a retry",
            backlog.clone(),
        );
        for kind in ["pending", "ack_pending", "redelivered", "waiting"] {
            backlog.get_or_create(&KindLabel { kind }).set(0);
        }
        Self { registry: std::sync::Arc::new(registry), deliveries, latency, failed, backlog }
    }

    /// An attempt ended with `result` after `latency`.
    pub fn attempted(&self, result: &AttemptResult, latency: Duration) {
        self.deliveries.get_or_create(&OutcomeLabel { outcome: outcome_of(result) }).inc();
        self.latency.observe(latency.as_secs_f64());
    }

    /// An event's last attempt failed.
    pub fn failed_permanently(&self) {
        self.failed.inc();
    }

    /// The consumer's backlog now.
    pub fn set_backlog(&self, pending: u64, ack_pending: usize, redelivered: usize) {
        self.set_kind("pending", pending);
        self.set_kind("ack_pending", ack_pending as u64);
        self.set_kind("redelivered", redelivered as u64);
    }

    /// The events waiting in MongoDB for a retry now.
    pub fn set_waiting(&self, waiting: u64) {
        self.set_kind("waiting", waiting);
    }

    fn set_kind(&self, kind: &'static str, n: u64) {
        self.backlog.get_or_create(&KindLabel { kind }).set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// The metrics in the OpenMetrics text format (without the closing `# EOF`).
    pub fn render(&self) -> String {
        common::metrics::families(&self.registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_answer_has_its_outcome() {
        let rejected = |status| AttemptResult::Rejected { status, retry_after: None };
        assert_eq!(outcome_of(&AttemptResult::Delivered { status: 204 }), "2xx");
        assert_eq!(outcome_of(&rejected(404)), "4xx");
        assert_eq!(outcome_of(&rejected(503)), "5xx");
        assert_eq!(outcome_of(&rejected(302)), "other");
        assert_eq!(outcome_of(&AttemptResult::Failed { error: "t".into(), timed_out: true }), "timeout");
        assert_eq!(outcome_of(&AttemptResult::Failed { error: "c".into(), timed_out: false }), "error");
        assert_eq!(outcome_of(&AttemptResult::Refused { reason: "private".into() }), "refused");
    }

    #[test]
    fn attempts_failures_and_the_backlog_are_rendered() {
        let metrics = NotifierMetrics::new();
        metrics.attempted(&AttemptResult::Delivered { status: 200 }, Duration::from_millis(3));
        metrics.failed_permanently();
        metrics.set_backlog(4, 2, 1);
        metrics.set_waiting(7);
        let text = metrics.render();
        for line in [
            r#"notifier_deliveries_total{outcome="2xx"} 1"#,
            "notifier_attempt_duration_seconds_count 1",
            "notifier_deliveries_failed_permanently_total 1",
            r#"notifier_retry_backlog{kind="pending"} 4"#,
            r#"notifier_retry_backlog{kind="ack_pending"} 2"#,
            r#"notifier_retry_backlog{kind="waiting"} 7"#,
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }
}
