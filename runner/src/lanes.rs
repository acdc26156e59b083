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
//! a scan of the jobs stream's subjects every [`SCAN_INTERVAL`]).
//!
//! Lanes are opened idempotently (`create_consumer` with the same configuration); the server
//! deletes a lane's consumer after [`LANE_INACTIVE_THRESHOLD`] without pulls. Jobs published
//! in the formats of before drain after an upgrade through lanes of no route: those of before
//! versions were routed (`<account>.<id>` after the model) through each account's former lane,
//! those of before accounts had lanes (`<id>`) through the model's former consumer; any runner
//! of the model takes them.

use std::{collections::HashMap, time::Duration};

use anyhow::Context;
use async_nats::jetstream::{
    consumer::{AckPolicy, PullConsumer, pull},
    stream::Stream,
};
use common::{domain::ModelRef, lane::Lane, subjects::Subjects};
use futures::TryStreamExt;

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
    pub async fn open(&self, key: &Lane) -> anyhow::Result<PullConsumer> {
        let name = key.consumer(&self.subjects);
        let filter = key.subject(&self.subjects);
        // The model's legacy consumer was created without an inactivity limit.
        let inactive_threshold = if key.account.is_some() { LANE_INACTIVE_THRESHOLD } else { Duration::ZERO };
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
    pub async fn with_jobs(&self, model: &ModelRef) -> anyhow::Result<(Vec<Lane>, usize)> {
        let subjects = self.stream.info_with_subjects(self.subjects.model_jobs(model)).await?;
        let subjects: Vec<(String, usize)> = subjects.try_collect().await?;
        let jobs = subjects.iter().map(|(_, count)| count).sum();
        let mut lanes: Vec<Lane> = subjects.iter().filter_map(|(subject, _)| self.lane_of(model, subject)).collect();
        lanes.sort_by(|a, b| {
            let version = |k: &Lane| k.route.as_ref().map(|r| (r.version.clone(), r.pool.clone()));
            version(a)
                .cmp(&version(b))
                .then_with(|| a.account.cmp(&b.account))
                .then(a.level.rank().cmp(&b.level.rank()))
        });
        lanes.dedup();
        Ok((lanes, jobs))
    }

    /// How many jobs of each of `models` a runner has taken and not yet settled (their lanes'
    /// unacknowledged deliveries: the jobs running on any runner), read with one listing of
    /// the stream's consumers (a request per 256 of them), not a request per lane: with
    /// 10,000 accounts waiting, a request per lane every scan was 1,000 requests a second.
    pub async fn running(&self, models: &[ModelRef]) -> anyhow::Result<HashMap<ModelRef, usize>> {
        let prefixes: Vec<(String, &ModelRef)> =
            models.iter().map(|m| (self.subjects.model_jobs(m).trim_end_matches('>').to_owned(), m)).collect();
        let mut running: HashMap<ModelRef, usize> = HashMap::new();
        let mut consumers = self.stream.consumers();
        while let Some(info) = consumers.try_next().await.context("listing the jobs stream's consumers")? {
            let filters = std::iter::once(&info.config.filter_subject).chain(&info.config.filter_subjects);
            let model = filters
                .filter(|f| !f.is_empty())
                .find_map(|f| prefixes.iter().find(|(prefix, _)| f.starts_with(prefix.as_str())).map(|(_, m)| *m));
            if let Some(model) = model {
                *running.entry(model.clone()).or_default() += info.num_ack_pending;
            }
        }
        Ok(running)
    }

    /// The lane a job subject of `model` belongs to (`None` for a subject of no known
    /// format).
    pub fn lane_of(&self, model: &ModelRef, subject: &str) -> Option<Lane> {
        Lane::from_subject(&self.subjects, model, subject)
    }
}
