//! Lanes: each model's jobs are split by route, account and priority,
//! `jobs.<owner>.<model>.<version>.<pool or any>.<account>[.<high or low>].<id>`, and each
//! (model, route, account, level) is a durable consumer of its own, shared by every runner
//! serving that version (on that pool). A `normal` job has no level token, so the lanes of
//! before levels are the `normal` ones. Operators still scale runners per model and version: a runner serves a version
//! by serving all of its lanes, and never sees another version's jobs (JetStream's subject
//! filters keep them apart). The scheduler ([`crate::scheduler`]) takes turns
//! between the lanes of a model, so one account's backlog cannot hold up another account's job
//! by more than about one slot turnover, and the queue itself stays in JetStream: nothing a
//! restart could lose.
//!
//! How a runner learns about lanes: see [`crate::doorbell`] (a doorbell per published job, and
//! a scan every [`SCAN_INTERVAL`]: a count by the consumers, and a listing of the subjects
//! when some job has none).
//!
//! Lanes are opened idempotently (`create_consumer` with the same configuration); the server
//! deletes a lane's consumer after [`LANE_INACTIVE_THRESHOLD`] without pulls.
//!
//! A lane's consumer keeps its state in memory, not on file: its state (which jobs were
//! delivered) is worth nothing that MongoDB does not already hold, since a prediction's status
//! decides whether a delivery runs (a job delivered again to a new consumer finds its
//! prediction running or ended, [`crate::execute`]), and with one lane per model, route,
//! account and level there can be tens of thousands of them, each writing its acks to disk on
//! every server. It keeps the stream's replicas: NATS refuses a consumer of a work-queue
//! stream with fewer (error 10134), so on a cluster each lane is still a Raft group, a cost
//! docs/queue.md counts. A lane whose consumer lost its state or its servers answers no
//! fetch: [`Lanes::reset`] deletes it, and the next doorbell or scan opens it again.

use std::{collections::HashMap, time::Duration};

use anyhow::Context;
use async_nats::jetstream::{
    consumer::{AckPolicy, PullConsumer, pull},
    stream::Stream,
};
use common::{domain::ModelRef, lane::Lane, subjects::Subjects};
use futures::TryStreamExt;

/// How often the jobs stream is scanned for lanes no doorbell announced (a count by its
/// consumers, [`Lanes::census`]).
pub const SCAN_INTERVAL: Duration = Duration::from_secs(10);
/// How often at most a scan lists the jobs stream's subjects although every job is held by a
/// consumer (a count taken while jobs come and go can miss a lane without one; this bounds
/// how long).
pub const LIST_INTERVAL: Duration = Duration::from_secs(60);
/// A lane's consumer is deleted by the server after this long without pulls (longer than any
/// prediction may run, so a job in flight never loses its consumer).
pub const LANE_INACTIVE_THRESHOLD: Duration = Duration::from_secs(24 * 3600);

/// How long [`Lanes::reset`] waits for a consumer's info, and for its delete.
const RESET_CHECK: Duration = Duration::from_secs(2);

/// What a [`Lanes::census`] counted.
#[derive(Debug, Default)]
pub struct Census {
    /// Per model, the lanes whose consumers hold jobs, and how many.
    pub models: HashMap<ModelRef, LaneCount>,
    /// Jobs in the stream that no consumer holds: waiting in a lane that has no consumer (jobs
    /// published while no runner served it, or whose consumer was deleted), or given up on
    /// by their consumer; only a listing of the subjects finds their lanes.
    pub uncovered: u64,
}

/// One model's lanes with jobs, as their consumers count them.
#[derive(Debug, Default)]
pub struct LaneCount {
    /// The lanes whose consumers hold a job, waiting or running.
    pub lanes: Vec<Lane>,
    /// Jobs not yet delivered.
    pub waiting: usize,
    /// Jobs taken by a runner and not yet settled.
    pub running: usize,
}

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
    pub async fn open(&self, key: &Lane) -> anyhow::Result<PullConsumer> {
        let name = key.consumer(&self.subjects);
        let filter = key.subject(&self.subjects);
        let config = pull::Config {
            durable_name: Some(name.clone()),
            filter_subject: filter,
            ack_policy: AckPolicy::Explicit,
            ack_wait: self.ack_wait,
            max_deliver: self.max_deliver,
            inactive_threshold: LANE_INACTIVE_THRESHOLD,
            memory_storage: true,
            ..Default::default()
        };
        self.stream.create_consumer(config).await.with_context(|| format!("creating consumer {name}"))
    }

    /// After a fetch from the lane failed: if its consumer does not answer (its server is
    /// gone, or restarted and lost it), deletes it, so the lane is opened again where a server
    /// answers. A consumer that answers is left as it is (the fetch failed for another cause).
    pub async fn reset(&self, key: &Lane) {
        let name = key.consumer(&self.subjects);
        let info = tokio::time::timeout(RESET_CHECK, self.stream.consumer_info(&name)).await;
        if matches!(info, Ok(Ok(_))) {
            return;
        }
        match tokio::time::timeout(RESET_CHECK, self.stream.delete_consumer(&name)).await {
            Ok(Ok(_)) => {
                tracing::warn!(consumer = %name, "a lane's consumer did not answer; deleted, to be opened again")
            }
            Ok(Err(e)) => tracing::debug!(consumer = %name, error = %e, "a silent lane consumer not deleted"),
            Err(_) => tracing::debug!(consumer = %name, "a silent lane consumer's delete not answered"),
        }
    }

    /// The lanes of `model` that hold a job (waiting or running), and how many jobs they hold.
    pub async fn with_jobs(&self, model: &ModelRef) -> anyhow::Result<(Vec<Lane>, usize)> {
        let subjects = self.stream.info_with_subjects(self.subjects.model_jobs(model)).await?;
        let subjects: Vec<(String, usize)> = subjects.try_collect().await?;
        let jobs = subjects.iter().map(|(_, count)| count).sum();
        let mut lanes: Vec<Lane> = subjects.iter().filter_map(|(subject, _)| self.lane_of(model, subject)).collect();
        lanes.sort_by(|a, b| {
            let version = |k: &Lane| (k.route.version.clone(), k.route.pool.clone());
            version(a)
                .cmp(&version(b))
                .then_with(|| a.account.cmp(&b.account))
                .then(a.level.rank().cmp(&b.level.rank()))
        });
        lanes.dedup();
        Ok((lanes, jobs))
    }

    /// One count of the jobs stream by its consumers (a request per 256 of them, and one for
    /// the stream's size), not by its subjects: each lane consumer of `models` says how many
    /// of its jobs wait (`num_pending`) and run (`num_ack_pending`: taken by a runner and not
    /// yet settled), and the stream's size less every consumer's jobs is what no consumer
    /// holds (a lane no runner opened yet). With 10,000 accounts waiting, a request per lane
    /// every scan was 1,000 requests a second; a listing of the subjects is one entry per job.
    pub async fn census(&self, models: &[ModelRef]) -> anyhow::Result<Census> {
        let prefixes: Vec<(String, &ModelRef)> =
            models.iter().map(|m| (self.subjects.model_jobs(m).trim_end_matches('>').to_owned(), m)).collect();
        // The size first: a job published while the consumers are listed is then counted by
        // its consumer, if any, and never makes a lane look uncovered that is not (a job
        // acked meanwhile can, which costs one listing of the subjects).
        let messages = self.stream.get_info().await.context("reading the jobs stream's size")?.state.messages;
        let mut census = Census::default();
        let mut covered: u64 = 0;
        let mut consumers = self.stream.consumers();
        while let Some(info) = consumers.try_next().await.context("listing the jobs stream's consumers")? {
            let running = info.num_ack_pending;
            let held = info.num_pending.saturating_add(running as u64);
            covered = covered.saturating_add(held);
            let filters = std::iter::once(&info.config.filter_subject).chain(&info.config.filter_subjects);
            let lane = filters.filter(|f| !f.is_empty()).find_map(|f| {
                let (_, model) = prefixes.iter().find(|(prefix, _)| f.starts_with(prefix.as_str()))?;
                Some(((*model).clone(), self.lane_of(model, f)))
            });
            if let Some((model, lane)) = lane {
                let count = census.models.entry(model).or_default();
                count.waiting += usize::try_from(info.num_pending).unwrap_or(usize::MAX);
                count.running += running;
                if let Some(lane) = lane.filter(|_| held > 0) {
                    count.lanes.push(lane);
                }
            }
        }
        census.uncovered = messages.saturating_sub(covered);
        Ok(census)
    }

    /// The lane a job subject of `model` belongs to (`None` for a subject of no known
    /// format).
    pub fn lane_of(&self, model: &ModelRef, subject: &str) -> Option<Lane> {
        Lane::from_subject(&self.subjects, model, subject)
    }
}
