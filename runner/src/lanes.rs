//! Lanes: each model's jobs are split by account, `jobs.<owner>.<model>.<account>.<id>`, and
//! each (model, account) is a durable consumer of its own, `<P>_runner_<model>_<account>`,
//! shared by every runner serving the model. Operators still scale runners per model: a runner
//! serves a model by serving all of its lanes. The scheduler ([`crate::scheduler`]) takes turns
//! between the lanes of a model, so one account's backlog cannot hold up another account's job
//! by more than about one slot turnover, and the queue itself stays in JetStream: nothing a
//! restart could lose.
//!
//! How a runner learns about lanes: see [`crate::doorbell`] (a doorbell per published job, and
//! a scan of the jobs stream's subjects every [`SCAN_INTERVAL`]).
//!
//! Lanes are opened idempotently (`create_consumer` with the same configuration); the server
//! deletes a lane's consumer after [`LANE_INACTIVE_THRESHOLD`] without pulls. Jobs published
//! before lanes existed (one subject token after the model) drain through the model's former
//! consumer, which the scan opens as the lane of no account.

use std::time::Duration;

use anyhow::Context;
use async_nats::jetstream::{
    consumer::{AckPolicy, PullConsumer, pull},
    stream::Stream,
};
use common::{
    domain::{AccountId, ModelRef},
    subjects::Subjects,
};
use futures::TryStreamExt;

/// Which jobs a lane holds: one model's, of one account (`None`: jobs published before
/// accounts had lanes).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LaneKey {
    /// The model.
    pub model: ModelRef,
    /// The account.
    pub account: Option<AccountId>,
}

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

    /// How many of the jobs of `lanes` a runner has taken and not yet settled (their consumers'
    /// unacknowledged deliveries: the jobs running on any runner). A lane whose consumer does
    /// not exist yet has none.
    pub async fn running(&self, lanes: &[LaneKey]) -> anyhow::Result<usize> {
        let mut running = 0;
        for key in lanes {
            let name = match &key.account {
                Some(account) => self.subjects.lane_consumer(&key.model, account),
                None => self.subjects.runner_consumer(&key.model),
            };
            match self.stream.consumer_info(&name).await {
                Ok(info) => running += info.num_ack_pending,
                Err(e) if e.kind() == async_nats::jetstream::context::ConsumerInfoErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| format!("reading consumer {name}")),
            }
        }
        Ok(running)
    }

    /// The lane a job subject of `model` belongs to.
    pub fn lane_of(&self, model: &ModelRef, subject: &str) -> LaneKey {
        LaneKey { model: model.clone(), account: self.subjects.account_of_job(model, subject) }
    }
}
