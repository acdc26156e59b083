//! Whether a service can do its work: MongoDB answers a `ping` and NATS JetStream answers for
//! every stream, each within [`CHECK_TIMEOUT`]. The api's `GET /ready` and the runner's and
//! notifier's `GET /ready` (see [`crate::telemetry::serve_operations`]) all answer from it, so
//! an orchestrator takes any replica that cannot reach either out of rotation.
//!
//! An election of a MongoDB replica set leaves it without a primary for up to about 12 s, and
//! every replica's ping fails at the same moment: turned unready together, they would all leave
//! the load balancer while their requests were only waiting for the new primary (each waits up
//! to its server-selection timeout, 30 s). So a [`Readiness`] stays ready for
//! [`ELECTION_GRACE`] after MongoDB last answered; only a longer silence makes it unready.
//! NATS has no such grace.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::time::Instant;

use crate::{bus::Bus, store::Store};

/// The bound on each check.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// What does not answer.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct NotReady {
    /// MongoDB's failure, if it failed.
    pub mongodb: Option<String>,
    /// NATS's failure, if it failed.
    pub nats: Option<String>,
}

/// Checks MongoDB and NATS at once.
pub async fn check(store: &Store, bus: &Bus) -> Result<(), NotReady> {
    // The ping runs in its own task: a timed-out ping is left to finish, not dropped halfway
    // (dropping a driver operation can cost the pool a connection).
    let pinging = store.clone();
    let ping = tokio::spawn(async move { pinging.ping().await.map_err(|e| e.to_string()) });
    let (db, nats) = tokio::join!(tokio::time::timeout(CHECK_TIMEOUT, ping), bus.ping());
    let mongodb = match db {
        Ok(Ok(Ok(()))) => None,
        Ok(Ok(Err(e))) => Some(e),
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some(format!("no answer within {CHECK_TIMEOUT:?}")),
    };
    let nats = nats.err().map(|e| e.to_string());
    if mongodb.is_none() && nats.is_none() { Ok(()) } else { Err(NotReady { mongodb, nats }) }
}

/// How long a replica stays ready while MongoDB does not answer, after it last did: longer
/// than an election (about 12 s), shorter than the requests' server-selection timeout (30 s).
pub const ELECTION_GRACE: Duration = Duration::from_secs(15);

/// A replica's readiness over time: [`check`], with MongoDB forgiven for [`ELECTION_GRACE`]
/// after it last answered.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    /// When MongoDB last answered a check.
    mongodb_answered: Arc<Mutex<Option<Instant>>>,
}

impl Readiness {
    /// Checks MongoDB and NATS; a MongoDB silence shorter than [`ELECTION_GRACE`] since it last
    /// answered still counts as ready (logged).
    pub async fn check(&self, store: &Store, bus: &Bus) -> Result<(), NotReady> {
        let checked = check(store, bus).await;
        self.judge(checked, Instant::now())
    }

    fn judge(&self, checked: Result<(), NotReady>, now: Instant) -> Result<(), NotReady> {
        let mut answered = self.mongodb_answered.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match checked {
            Ok(()) => {
                *answered = Some(now);
                Ok(())
            }
            Err(not_ready) if not_ready.mongodb.is_none() => {
                *answered = Some(now);
                Err(not_ready)
            }
            Err(not_ready) => {
                let within = answered.is_some_and(|at| now.duration_since(at) < ELECTION_GRACE);
                if within && not_ready.nats.is_none() {
                    tracing::warn!(mongodb = ?not_ready.mongodb, "MongoDB does not answer; still ready within the election grace");
                    return Ok(());
                }
                Err(not_ready)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mongodb_silent() -> Result<(), NotReady> {
        Err(NotReady { mongodb: Some("no answer within 2s".into()), nats: None })
    }

    #[tokio::test]
    async fn a_mongodb_silence_shorter_than_an_election_keeps_a_replica_ready_and_a_longer_one_does_not() {
        let readiness = Readiness::default();
        let start = Instant::now();
        assert!(readiness.judge(mongodb_silent(), start).is_err(), "never answered: not ready");
        assert!(readiness.judge(Ok(()), start).is_ok());
        assert!(readiness.judge(mongodb_silent(), start + Duration::from_secs(12)).is_ok(), "an election");
        assert!(readiness.judge(mongodb_silent(), start + ELECTION_GRACE).is_err(), "past the grace");
        let nats_too = Err(NotReady { mongodb: Some("down".into()), nats: Some("down".into()) });
        assert!(readiness.judge(Ok(()), start + ELECTION_GRACE).is_ok());
        assert!(readiness.judge(nats_too, start + ELECTION_GRACE).is_err(), "NATS has no grace");
    }
}
