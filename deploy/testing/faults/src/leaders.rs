//! Leaders moved on a JetStream cluster, as an election moves them (a node restarted for an
//! upgrade, a lost heartbeat): every stream the services use (the jobs, the status events,
//! the account slots' bucket) and every consumer of them is asked to step down
//! (`$JS.API.STREAM.LEADER.STEPDOWN`, `$JS.API.CONSUMER.LEADER.STEPDOWN`, what `nats stream
//! cluster step-down` sends); then one runner is frozen (SIGSTOP) for [`FROZEN_FOR`], past the
//! ack wait, as a runner whose acknowledgements an election holds up longer (or one starved of
//! CPU), and then the node that leads the jobs stream is killed. The frozen runner's jobs are
//! delivered again to the other while it still runs them, and its account slots are not
//! rewritten: the row checks that no model runs twice ([`crate::report::Outcome::runs`]) and
//! that the capped account stays under its cap.

use std::time::Duration;

use common::bus::Bus;
use futures::StreamExt;
use serde_json::Value;

/// How long the runner is frozen: past the suite's ack wait (the default 6 s), short of the
/// account slots' lease (20 s).
pub const FROZEN_FOR: Duration = Duration::from_secs(9);

/// How long one step-down request may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// Asks every leader of the services' streams and their consumers to step down; returns how
/// many did (a group with one member, or one electing already, refuses).
pub async fn step_down_all(bus: &Bus) -> anyhow::Result<usize> {
    let subjects = bus.subjects();
    let streams = [subjects.jobs_stream(), subjects.events_stream(), format!("KV_{}", subjects.account_slots_bucket())];
    let mut moved = 0;
    for name in streams {
        let Ok(stream) = bus.jetstream().get_stream(&name).await else { continue };
        let consumers: Vec<String> = stream.consumer_names().filter_map(|n| async move { n.ok() }).collect().await;
        for consumer in consumers {
            moved += usize::from(ask(bus, format!("$JS.API.CONSUMER.LEADER.STEPDOWN.{name}.{consumer}")).await);
        }
        moved += usize::from(ask(bus, format!("$JS.API.STREAM.LEADER.STEPDOWN.{name}")).await);
    }
    Ok(moved)
}

/// One step-down request: whether the server says it stepped down (one that is not answered
/// in time, while an election runs, counts as not).
async fn ask(bus: &Bus, subject: String) -> bool {
    let request = bus.client().request(subject.clone(), "".into());
    let answer = match tokio::time::timeout(ASK_TIMEOUT, request).await {
        Ok(Ok(reply)) => serde_json::from_slice::<Value>(&reply.payload).unwrap_or_default(),
        Ok(Err(e)) => {
            println!("  {subject}: {e}");
            return false;
        }
        Err(_) => {
            println!("  {subject}: no answer within {} s", ASK_TIMEOUT.as_secs());
            return false;
        }
    };
    answer["success"].as_bool().unwrap_or(false)
}

/// The cluster node (`node-N`) that leads the jobs stream, once it has one again (within
/// [`ELECTED_WITHIN`]).
pub async fn jobs_stream_leader(bus: &Bus) -> anyhow::Result<String> {
    let deadline = tokio::time::Instant::now() + ELECTED_WITHIN;
    loop {
        let mut stream = bus.jetstream().get_stream(bus.subjects().jobs_stream()).await?;
        let info = stream.info().await?;
        if let Some(leader) = info.cluster.as_ref().and_then(|c| c.leader.clone()) {
            return Ok(leader);
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "the jobs stream has no leader");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How long a stream may take to elect its new leader after a step-down.
const ELECTED_WITHIN: Duration = Duration::from_secs(30);
