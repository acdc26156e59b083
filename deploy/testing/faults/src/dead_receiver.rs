//! One account's receiver is dead while another's is healthy (docs/webhooks.md,
//! "Isolation"). Before the load, a second account, `dead`, runs [`DEAD_EVENTS`] quick
//! predictions whose `completed` webhooks go to a receiver that answers 503 to everything, and
//! the row waits until each has had its first attempt: every one of them then waits for its
//! retries, more than JetStream's default window of unacknowledged messages (1,000), which once
//! held them all and stopped every account's webhooks. Then the suite's load runs on the
//! account `faults`, whose receiver is healthy.
//!
//! What must hold ([`DeadTally::failures`]):
//! - every `completed` webhook of the healthy account arrives within [`DELIVERY_BOUND`] of its
//!   prediction's `completed_at`;
//! - the dead receiver's events keep their retries: each is attempted a second time no later
//!   than [`RETRY_SLACK`] after the latest the schedule's first step allows, and no two
//!   attempts of one event come closer than that step less its 20 % jitter (none sooner than
//!   the schedule, none made twice at once). The tally waits for a second attempt until that
//!   latest time: the events whose first attempts came last are not counted missing while
//!   they are still on time.

use std::{collections::HashMap, time::Duration};

use anyhow::Context;
use bson::doc;
use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt};
use receiver::{Answer, Receiver};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::{recorder::Delivery, topology::Topology};

/// The dead receiver's events.
pub const DEAD_EVENTS: usize = 1_500;
/// The contract's bound on a healthy receiver's delivery.
pub const DELIVERY_BOUND: Duration = Duration::from_secs(5);
/// The schedule's first step in the suite (`NOTIFIER_RETRY_SCHEDULE` starts with 1 s).
const FIRST_STEP: Duration = Duration::from_secs(1);
/// How late a second attempt may come past its step's latest time. The 1,500 events fall due
/// within the same seconds at one receiver, whose retries go through its own slots
/// (`NOTIFIER_PER_TARGET`, 8), each attempt with its writes: about 100 a second on the 2-core
/// reference machine, so the last comes up to 16-20 s after its first attempt there (with 15 s
/// two runs had second attempts 1.0 and 3.5 s past it). 45 s leaves room for a machine twice
/// as slow as that; the failure this row guards against (retries held behind a window every
/// receiver shares) keeps them waiting for minutes, or for ever.
pub const RETRY_SLACK: Duration = Duration::from_secs(45);
/// Creates of the dead account's predictions in flight at once.
const IN_FLIGHT: usize = 32;
/// How long their first attempts may take to arrive, all of them.
const FIRST_ATTEMPTS_WAIT: Duration = Duration::from_secs(180);

/// The dead account's receiver, its events all waiting for a retry.
pub struct DeadReceiver {
    receiver: Receiver,
}

/// What the row saw.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeadTally {
    /// Healthy `completed` webhooks checked.
    pub healthy: usize,
    /// Of those, the ones that arrived later than [`DELIVERY_BOUND`] (or never).
    pub late: usize,
    /// The slowest of them, in seconds.
    pub slowest_s: f64,
    /// Dead events attempted a second time.
    pub retried: usize,
    /// Events with two attempts in a row sooner than the schedule allows.
    pub early: usize,
    /// Second attempts later than the schedule allows, past [`RETRY_SLACK`].
    pub overdue: usize,
    /// The longest time from a first attempt to the second, in seconds.
    pub longest_gap_s: f64,
}

impl DeadTally {
    /// Why the row fails, if it does.
    pub fn failures(&self) -> Vec<String> {
        let mut why = Vec::new();
        if self.healthy == 0 {
            why.push("no healthy webhook was checked".into());
        }
        if self.late > 0 {
            why.push(format!(
                "{} of {} healthy webhooks later than {} s (slowest {:.1} s)",
                self.late,
                self.healthy,
                DELIVERY_BOUND.as_secs(),
                self.slowest_s
            ));
        }
        if self.retried < DEAD_EVENTS {
            why.push(format!("only {} of {DEAD_EVENTS} dead events were retried", self.retried));
        }
        if self.early > 0 {
            why.push(format!("{} retries sooner than the schedule", self.early));
        }
        if self.overdue > 0 {
            why.push(format!(
                "{} retries later than the schedule (longest gap {:.1} s)",
                self.overdue, self.longest_gap_s
            ));
        }
        why
    }

    /// The tally as JSON.
    pub fn json(&self) -> Value {
        json!({"healthy": self.healthy, "late": self.late, "slowest_s": self.slowest_s, "retried": self.retried,
               "early": self.early, "overdue": self.overdue, "longest_gap_s": self.longest_gap_s})
    }
}

/// Makes the account `dead`, runs its predictions and waits for every first attempt.
pub async fn prepare(topology: &Topology) -> anyhow::Result<DeadReceiver> {
    let config = api::config::ApiConfig::from_env(&topology.setup.env())?;
    let dead = api::admin::bootstrap(&config, "dead").await?;
    let receiver = Receiver::always(Answer::Status(503)).await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
    let (api, key, url) = (&topology.apis[0], dead.key.expose().to_owned(), receiver.url());
    let body = json!({"input": {"prompt": "dead"}, "webhook": url, "webhook_events_filter": ["completed"]});
    let created: Vec<anyhow::Result<()>> = futures::stream::iter(0..DEAD_EVENTS)
        .map(|_| {
            let (http, key, body) = (&http, &key, &body);
            async move {
                let answer = http
                    .post(format!("{api}/v1/models/demo/echo/predictions"))
                    .bearer_auth(key)
                    .json(body)
                    .send()
                    .await?;
                anyhow::ensure!(answer.status() == 201, "a dead account's create answered {}", answer.status());
                Ok(())
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    created.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    let deadline = Instant::now() + FIRST_ATTEMPTS_WAIT;
    while receiver.with_deliveries(|d| d.len()) < DEAD_EVENTS {
        anyhow::ensure!(Instant::now() < deadline, "the dead receiver's first attempts did not all arrive");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(DeadReceiver { receiver })
}

/// Checks the healthy account's `completed` webhooks (`deliveries`, with `anchor` pairing the
/// instants with the wall clock the services stamp) and the dead receiver's retries.
pub async fn check(
    topology: &Topology,
    dead: &DeadReceiver,
    deliveries: &[Delivery],
    anchor: (Instant, DateTime<Utc>),
) -> anyhow::Result<DeadTally> {
    let account = topology.setup.store.accounts().find_by_name("faults").await?.context("the account faults")?;
    let predictions = topology.setup.store.database().collection::<bson::Document>("predictions");
    let ended: Vec<bson::Document> = predictions
        .find(doc! { "account_id": account.id.as_str(), "completed_at": { "$ne": null } })
        .projection(doc! { "_id": 1, "completed_at": 1 })
        .await?
        .try_collect()
        .await?;
    let mut arrived: HashMap<&str, Instant> = HashMap::new();
    for d in deliveries.iter().filter(|d| d.accepted && d.event == "completed") {
        arrived.entry(d.prediction.as_str()).or_insert(d.at);
    }
    let mut tally = DeadTally { healthy: ended.len(), ..DeadTally::default() };
    for p in &ended {
        let (Ok(id), Ok(completed)) = (p.get_str("_id"), p.get_datetime("completed_at")) else { continue };
        let lag = match arrived.get(id) {
            Some(at) => {
                let at = anchor.1 + chrono::Duration::from_std(at.duration_since(anchor.0)).unwrap_or_default();
                (at - completed.to_chrono()).to_std().unwrap_or_default()
            }
            None => Duration::MAX,
        };
        tally.slowest_s = tally.slowest_s.max(lag.min(Duration::from_secs(3600)).as_secs_f64());
        tally.late += usize::from(lag > DELIVERY_BOUND);
    }
    // An event whose first attempt came last may still be within its step and the slack: its
    // second attempt is waited for until the latest time the schedule allows it, so the tally
    // never races a retry that is on time.
    let latest_first = dead.receiver.with_deliveries(latest_first_attempt);
    let retries_due_by = latest_first.map(|at| at + FIRST_STEP.mul_f64(1.2) + RETRY_SLACK);
    while dead.receiver.with_deliveries(receiver::retry_gaps).len() < DEAD_EVENTS
        && retries_due_by.is_some_and(|by| Instant::now() < by)
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let gaps = dead.receiver.with_deliveries(receiver::retry_gaps);
    tally.retried = gaps.len();
    // Every step of the schedule is at least its first, so no two attempts in a row may be
    // closer than it allows; the first retry comes within its step and the slack.
    tally.early = gaps.iter().filter(|g| g.iter().any(|g| *g < FIRST_STEP.mul_f64(0.8))).count();
    let first_gaps: Vec<Duration> = gaps.iter().filter_map(|g| g.first().copied()).collect();
    tally.overdue = first_gaps.iter().filter(|g| **g > FIRST_STEP.mul_f64(1.2) + RETRY_SLACK).count();
    tally.longest_gap_s = first_gaps.iter().max().copied().unwrap_or_default().as_secs_f64();
    Ok(tally)
}

/// When the last of the events' first attempts arrived (`None` before any did).
fn latest_first_attempt(deliveries: &[receiver::Delivery]) -> Option<Instant> {
    let mut first: HashMap<&str, Instant> = HashMap::new();
    for d in deliveries {
        first.entry(d.header("webhook-id")).or_insert(d.at);
    }
    first.into_values().max()
}
