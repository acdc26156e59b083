//! Lanes: each model's jobs are split by account, `jobs.<owner>.<model>.<account>.<id>`, and
//! each (model, account) is a durable consumer of its own, `<P>_runner_<model>_<account>`,
//! shared by every runner serving the model. Operators still scale runners per model: a runner
//! serves a model by serving all of its lanes. The scheduler ([`crate::scheduler`]) takes turns
//! between the lanes of a model, so one account's backlog cannot hold up another account's job
//! by more than about one slot turnover, and the queue itself stays in JetStream: nothing a
//! restart could lose.
//!
//! How a runner learns about lanes:
//! - **doorbells**: a core-NATS subscription to each served model's job subjects; a published
//!   job names its lane in its subject, and rings it (opening it first if it is new);
//! - **a scan** at start and every [`SCAN_INTERVAL`]: the jobs stream's subjects of each
//!   served model, which name every lane with a job waiting or running (a work queue keeps a
//!   message until it is acked). This finds what no doorbell announced: jobs queued while no
//!   runner was up, or handed back by a runner that died; lanes it sees empty stop being
//!   asked until a job rings them.
//!
//! Lanes are opened idempotently (`create_consumer` with the same configuration); the server
//! deletes a lane's consumer after [`LANE_INACTIVE_THRESHOLD`] without pulls. Jobs published
//! before lanes existed (one subject token after the model) drain through the model's former
//! consumer, which the scan opens as the lane of no account.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use async_nats::jetstream::{
    consumer::{AckPolicy, PullConsumer, pull},
    stream::Stream,
};
use common::{bus::Bus, domain::ModelRef, subjects::Subjects};
use futures::{StreamExt, TryStreamExt};
use tokio_util::sync::CancellationToken;

use crate::scheduler::{LaneKey, Scheduler};

/// How often the jobs stream is scanned for lanes no doorbell announced.
pub const SCAN_INTERVAL: Duration = Duration::from_secs(10);
/// A lane's consumer is deleted by the server after this long without pulls (longer than any
/// prediction may run, so a job in flight never loses its consumer).
pub const LANE_INACTIVE_THRESHOLD: Duration = Duration::from_secs(24 * 3600);

/// Opens and finds lanes on the jobs stream.
pub struct Lanes {
    stream: Stream,
    subjects: Subjects,
    ack_wait: Duration,
    max_deliver: i64,
}

impl Lanes {
    /// Lanes on `stream`, whose consumers redeliver after `ack_wait`, at most `max_deliver`
    /// times.
    pub fn new(stream: Stream, subjects: Subjects, ack_wait: Duration, max_deliver: i64) -> Self {
        Self { stream, subjects, ack_wait, max_deliver }
    }

    /// The lane's consumer, created if it does not exist.
    pub async fn open(&self, key: &LaneKey) -> anyhow::Result<PullConsumer> {
        let (name, filter, inactive_threshold) = match &key.account {
            Some(account) => (
                self.subjects.lane_consumer(&key.model, account),
                self.subjects.lane_jobs(&key.model, account),
                LANE_INACTIVE_THRESHOLD,
            ),
            None => {
                (self.subjects.runner_consumer(&key.model), self.subjects.legacy_model_jobs(&key.model), Duration::ZERO)
            }
        };
        let config = pull::Config {
            durable_name: Some(name.clone()),
            filter_subject: filter,
            ack_policy: AckPolicy::Explicit,
            ack_wait: self.ack_wait,
            max_deliver: self.max_deliver,
            inactive_threshold,
            ..Default::default()
        };
        self.stream.create_consumer(config).await.with_context(|| format!("creating consumer {name}"))
    }

    /// The lanes of `model` that hold a job (waiting or running), and how many jobs they hold.
    pub async fn with_jobs(&self, model: &ModelRef) -> anyhow::Result<(Vec<LaneKey>, usize)> {
        let subjects = self.stream.info_with_subjects(self.subjects.model_jobs(model)).await?;
        let subjects: Vec<(String, usize)> = subjects.try_collect().await?;
        let jobs = subjects.iter().map(|(_, count)| count).sum();
        let mut lanes: Vec<LaneKey> = subjects.iter().map(|(subject, _)| self.lane_of(model, subject)).collect();
        lanes.sort_by(|a, b| a.account.cmp(&b.account));
        lanes.dedup();
        Ok((lanes, jobs))
    }

    /// The lane a job subject of `model` belongs to.
    fn lane_of(&self, model: &ModelRef, subject: &str) -> LaneKey {
        LaneKey { model: model.clone(), account: self.subjects.account_of_job(model, subject) }
    }
}

/// Rings the scheduler for every job published for `models` (core NATS), and scans for lanes
/// at start and every [`SCAN_INTERVAL`] (reporting each model's unfinished jobs to `metrics`),
/// until `shutdown` fires.
pub async fn announce(
    bus: &Bus,
    models: Vec<ModelRef>,
    scheduler: Arc<Scheduler>,
    lanes: Arc<Lanes>,
    metrics: crate::metrics::RunnerMetrics,
    shutdown: CancellationToken,
) -> anyhow::Result<tokio::task::JoinSet<()>> {
    let mut tasks = tokio::task::JoinSet::new();
    for model in &models {
        let mut jobs = bus
            .client()
            .subscribe(bus.subjects().model_jobs(model))
            .await
            .with_context(|| format!("subscribing to the jobs of {model}"))?;
        let (scheduler, lanes, shutdown, model) = (scheduler.clone(), lanes.clone(), shutdown.clone(), model.clone());
        tasks.spawn(async move {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    job = jobs.next() => match job {
                        Some(job) => scheduler.ring(lanes.lane_of(&model, &job.subject)).await,
                        None => return,
                    },
                }
            }
        });
    }
    let bus = bus.clone();
    tasks.spawn(async move {
        let mut tick = tokio::time::interval(SCAN_INTERVAL);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            for model in &models {
                let scanned_at = std::time::Instant::now();
                match lanes.with_jobs(model).await {
                    Ok((found, jobs)) => {
                        metrics.set_pending(&model.to_string(), i64::try_from(jobs).unwrap_or(i64::MAX));
                        scheduler.scanned(model, &found, scanned_at);
                        for key in found {
                            scheduler.ring(key).await;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(%model, error = format!("{e:#}"), "scanning for lanes failed; making sure the streams exist");
                        if let Err(e) = bus.ensure_streams().await {
                            tracing::warn!(error = %e, "streams not created");
                        }
                    }
                }
            }
        }
    });
    Ok(tasks)
}
