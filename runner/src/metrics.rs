//! The runner's Prometheus metrics, served at `GET /metrics` on `RUNNER_METRICS_BIND` (with
//! `GET /health` and `GET /ready`):
//!
//! - `runner_jobs_in_flight{model}`: predictions running in this process now;
//! - `runner_model_run_duration_seconds{model, outcome}`: how long model calls took, by how
//!   they ended (`succeeded`, `failed`, `timeout`, `canceled`, `handed_back`);
//! - `runner_state_write_duration_seconds{status}`: the latency of the MongoDB write of each
//!   status change (`processing`, `succeeded`, `failed`);
//! - `runner_queue_wait_seconds{model}`: how long predictions waited in the queue, from
//!   creation to the start this process made (`started_at - created_at`);
//! - `runner_jobs_pending{model}`: the model's jobs in the jobs stream not yet finished
//!   (waiting or running on any runner), as JetStream counts them at each lane scan;
//! - `runner_jobs_waiting{model}` and `runner_jobs_running{model}`: the same jobs counted
//!   apart, those no runner has taken and those taken and not yet finished (on any runner: the
//!   lanes' unacknowledged deliveries), at each lane scan;
//! - `runner_lane_scans_total{by}`: the lane scans this process made, by how they found the
//!   lanes (`count`: from the consumers' counts alone; `listing`: the subjects listed too,
//!   [`crate::doorbell`]);
//! - `runner_output_upload_seconds` and `runner_output_upload_bytes_total`: the output files a
//!   Cog server PUT to this runner ([`crate::models::cog::uploads`]), each timed from its
//!   request to the file stored, and their bytes;
//! - `model_instances{model,version,state}`: the model servers this runner started itself
//!   ([`crate::models::cog::instance`]), how many are in each state (`stopped`, `booting`,
//!   `ready`, `busy`: a run in flight, `stopping`); `model_boot_seconds{model}`: from starting one to its `READY`;
//!   `model_instance_exits_total{model,reason}`: how they ended (`idle`, `shutdown`, `crashed`,
//!   `setup_failed`);
//! - `mongodb_commands_total{command}` and `mongodb_command_duration_seconds{command}` with
//!   `MONGODB_COMMAND_METRICS=true`.

use std::time::Instant;

use common::metrics::ModelLabel;
use common::metrics::kit::*;

/// A model run's labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    model: String,
    outcome: String,
}

/// A model instance's labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InstanceLabels {
    model: String,
    version: String,
    state: &'static str,
}

/// How a model instance ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ExitLabels {
    model: String,
    reason: &'static str,
}

/// The states a model instance is counted in.
const INSTANCE_STATES: [&str; 5] = ["stopped", "booting", "ready", "busy", "stopping"];

/// A status change's label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScanLabel {
    by: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: String,
}

/// The runner's metrics (cheap to share: every family is an `Arc` inside).
#[derive(Clone)]
pub struct RunnerMetrics {
    registry: std::sync::Arc<Registry>,
    in_flight: Family<ModelLabel, Gauge>,
    run_duration: Family<RunLabels, Histogram>,
    state_write: Family<StatusLabel, Histogram>,
    pending: Family<ModelLabel, Gauge>,
    waiting: Family<ModelLabel, Gauge>,
    running: Family<ModelLabel, Gauge>,
    jobs_taken: Family<ModelLabel, Counter>,
    lane_scans: Family<ScanLabel, Counter>,
    queue_wait: Family<ModelLabel, Histogram>,
    upload_duration: Histogram,
    upload_bytes: Counter,
    instances: Family<InstanceLabels, Gauge>,
    boots: Family<ModelLabel, Histogram>,
    exits: Family<ExitLabels, Counter>,
}

impl Default for RunnerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl RunnerMetrics {
    /// Empty metrics, registered.
    pub fn new() -> Self {
        let in_flight = Family::<ModelLabel, Gauge>::default();
        let run_duration: Family<RunLabels, Histogram> =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 2.0, 20)));
        let state_write: Family<StatusLabel, Histogram> =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.0001, 2.0, 16)));
        let pending = Family::<ModelLabel, Gauge>::default();
        let waiting = Family::<ModelLabel, Gauge>::default();
        let running = Family::<ModelLabel, Gauge>::default();
        let jobs_taken = Family::<ModelLabel, Counter>::default();
        let lane_scans = Family::<ScanLabel, Counter>::default();
        // 5 ms to about 3 hours.
        let queue_wait: Family<ModelLabel, Histogram> =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.005, 2.0, 22)));
        // 1 ms to about 9 hours.
        let upload_duration = Histogram::new(exponential_buckets(0.001, 2.0, 25));
        let upload_bytes = Counter::default();
        let instances = Family::<InstanceLabels, Gauge>::default();
        // 50 ms to about 3.6 hours (a setup that loads weights).
        let boots: Family<ModelLabel, Histogram> =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.05, 2.0, 18)));
        let exits = Family::<ExitLabels, Counter>::default();
        let mut registry = Registry::default();
        registry.register("model_instances", "Model servers this runner started, by state", instances.clone());
        registry.register("model_boot_seconds", "From starting a model server to its READY", boots.clone());
        registry.register("model_instance_exits", "Model servers that ended, by reason", exits.clone());
        registry.register("runner_jobs_in_flight", "Predictions running in this process", in_flight.clone());
        registry.register("runner_model_run_duration_seconds", "Model call duration by outcome", run_duration.clone());
        registry.register(
            "runner_state_write_duration_seconds",
            "MongoDB write latency of a status change",
            state_write.clone(),
        );
        registry.register(
            "runner_jobs_pending",
            "Jobs of the model in the jobs stream, not yet finished",
            pending.clone(),
        );
        registry.register("runner_jobs_waiting", "Jobs of the model no runner has taken yet", waiting.clone());
        registry.register(
            "runner_jobs_running",
            "Jobs of the model taken by a runner, not yet finished",
            running.clone(),
        );
        registry.register("runner_jobs_started", "Predictions this process started", jobs_taken.clone());
        registry.register("runner_lane_scans", "Lane scans, by how they found the lanes", lane_scans.clone());
        registry.register(
            "runner_queue_wait_seconds",
            "Time from a prediction's creation to its start",
            queue_wait.clone(),
        );
        registry.register(
            "runner_output_upload_seconds",
            "Time from a Cog server's output file PUT to the file stored",
            upload_duration.clone(),
        );
        registry.register(
            "runner_output_upload_bytes",
            "Bytes of output files stored from uploads",
            upload_bytes.clone(),
        );
        Self {
            registry: std::sync::Arc::new(registry),
            in_flight,
            run_duration,
            state_write,
            pending,
            waiting,
            running,
            jobs_taken,
            lane_scans,
            queue_wait,
            upload_duration,
            upload_bytes,
            instances,
            boots,
            exits,
        }
    }

    /// One of `model`'s instances of `version` moved from `from` (none: a new instance) to `to`
    /// (each one of [`INSTANCE_STATES`]): the gauge counts the instances in each state.
    pub fn shift_model_instance(
        &self,
        model: &common::domain::ModelRef,
        version: &str,
        from: Option<&str>,
        to: &'static str,
    ) {
        let labels =
            |state: &'static str| InstanceLabels { model: model.to_string(), version: version.to_owned(), state };
        for each in INSTANCE_STATES {
            // Every state is shown from the first instance on, at 0 when none is in it.
            let gauge = self.instances.get_or_create(&labels(each));
            if Some(each) == from {
                gauge.dec();
            }
            if each == to {
                gauge.inc();
            }
        }
    }

    /// A server of `model` booted in `took`.
    pub fn model_booted(&self, model: &common::domain::ModelRef, took: std::time::Duration) {
        self.boots.get_or_create(&ModelLabel { model: model.to_string() }).observe(took.as_secs_f64());
    }

    /// A server of `model` ended, for `reason`.
    pub fn model_exited(&self, model: &common::domain::ModelRef, reason: &'static str) {
        self.exits.get_or_create(&ExitLabels { model: model.to_string(), reason }).inc();
    }

    /// An output file of `bytes` was uploaded and stored in `seconds`.
    pub fn uploaded(&self, bytes: u64, seconds: f64) {
        self.upload_duration.observe(seconds);
        self.upload_bytes.inc_by(bytes);
    }

    /// A prediction of `model` starts running here; it counts as in flight until the guard
    /// is dropped.
    pub fn started(&self, model: &str) -> InFlight {
        let label = ModelLabel::of(model);
        self.in_flight.get_or_create(&label).inc();
        self.jobs_taken.get_or_create(&label).inc();
        InFlight { gauge: self.in_flight.get_or_create(&label).clone(), started: Instant::now() }
    }

    /// A model call of `model` that took `since` until now ended with `outcome`.
    pub fn ran(&self, model: &str, outcome: &str, since: Instant) {
        let labels = RunLabels { model: model.to_owned(), outcome: outcome.to_owned() };
        self.run_duration.get_or_create(&labels).observe(since.elapsed().as_secs_f64());
    }

    /// A prediction of `model` started after waiting `seconds` in the queue.
    pub fn waited(&self, model: &str, seconds: f64) {
        self.queue_wait.get_or_create(&ModelLabel::of(model)).observe(seconds.max(0.0));
    }

    /// A status change to `status` was written in `seconds`.
    pub fn state_written(&self, status: &str, seconds: f64) {
        self.state_write.get_or_create(&StatusLabel { status: status.to_owned() }).observe(seconds);
    }

    /// `model` has `jobs` unfinished jobs in the stream.
    pub fn set_pending(&self, model: &str, jobs: i64) {
        self.pending.get_or_create(&ModelLabel::of(model)).set(jobs);
    }

    /// `model` has `waiting` jobs no runner has taken and `running` taken ones, in the stream.
    pub fn set_depth(&self, model: &str, waiting: i64, running: i64) {
        let label = ModelLabel::of(model);
        self.waiting.get_or_create(&label).set(waiting);
        self.running.get_or_create(&label).set(running);
    }

    /// A lane scan was made, `listed`: with a listing of the subjects, or else from the
    /// consumers' counts alone.
    pub fn counted_lanes(&self, listed: bool) {
        self.lane_scans.get_or_create(&ScanLabel { by: if listed { "listing" } else { "count" } }).inc();
    }

    /// The metrics in the OpenMetrics text format (without the closing `# EOF`).
    pub fn render(&self) -> String {
        common::metrics::families(&self.registry)
    }
}

/// A prediction counted as in flight; stops counting when dropped.
pub struct InFlight {
    gauge: Gauge,
    /// When it started.
    pub started: Instant,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_in_flight_until_its_guard_drops_and_then_timed() {
        let metrics = RunnerMetrics::new();
        let guard = metrics.started("demo/echo");
        assert!(metrics.render().contains(r#"runner_jobs_in_flight{model="demo/echo"} 1"#), "{}", metrics.render());
        metrics.ran("demo/echo", "succeeded", guard.started);
        drop(guard);
        let text = metrics.render();
        assert!(text.contains(r#"runner_jobs_in_flight{model="demo/echo"} 0"#), "{text}");
        assert!(
            text.contains(r#"runner_model_run_duration_seconds_count{model="demo/echo",outcome="succeeded"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"runner_jobs_started_total{model="demo/echo"} 1"#), "{text}");
        assert!(!text.contains("# EOF"), "the server adds the end marker once");
    }

    #[test]
    fn pending_jobs_and_state_writes_are_reported_per_label() {
        let metrics = RunnerMetrics::new();
        metrics.set_pending("demo/sleep", 7);
        metrics.state_written("processing", 0.002);
        metrics.waited("demo/sleep", 0.02);
        metrics.waited("demo/sleep", 3.0);
        let text = metrics.render();
        assert!(text.contains(r#"runner_queue_wait_seconds_count{model="demo/sleep"} 2"#), "{text}");
        assert!(text.contains(r#"runner_queue_wait_seconds_bucket{le="0.02",model="demo/sleep"} 1"#), "{text}");
        assert!(text.contains(r#"runner_jobs_pending{model="demo/sleep"} 7"#), "{text}");
        assert!(text.contains(r#"runner_state_write_duration_seconds_count{status="processing"} 1"#), "{text}");
    }
}
