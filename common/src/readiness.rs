//! Whether a service can do its work: MongoDB answers a `ping` and NATS JetStream answers for
//! every stream, each within [`CHECK_TIMEOUT`]. The api's `GET /ready` and the runner's and
//! notifier's `GET /ready` (see [`crate::telemetry::serve_operations`]) all answer from it, so
//! an orchestrator takes any replica that cannot reach either out of rotation.

use std::time::Duration;

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
