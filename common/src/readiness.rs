//! Whether a service can do its work: MongoDB answers a `ping` and NATS JetStream answers for
//! every stream. The api's `GET /ready` and the runner's and notifier's `GET /ready` (see
//! [`crate::telemetry::serve_operations`]) all answer from a [`Readiness`], so an orchestrator
//! takes any replica that cannot reach either out of rotation.
//!
//! **Checked apart from the work, answered at once.** A replica under load is busy, not
//! unreachable: checked on the connections its requests use, its ping waited behind them (a
//! MongoDB pool whose connections all carry large documents, a NATS connection whose outbound
//! buffer holds megabytes of publishes) and `/ready` answered 503 for seconds at a time while
//! every request succeeded, which would have moved its load onto the other replicas. So a
//! [`Readiness`] checks on connections of its own (a MongoDB client with a pool of one, a
//! second NATS connection), every [`CHECK_INTERVAL`], in a task of its own, and `/ready`
//! answers from the last checks without waiting for any I/O. What it does read at answer time
//! is the work's own NATS connection state: a replica whose connection is down is unready at
//! once, whatever the probe's connection says.
//!
//! **Graces.** An election of a MongoDB replica set leaves it without a primary for up to about
//! 12 s, and every replica's ping fails at the same moment: turned unready together, they would
//! all leave the load balancer while their requests were only waiting for the new primary
//! (each waits up to its server-selection timeout, 30 s). So MongoDB is forgiven for
//! [`ELECTION_GRACE`] after it last answered. NATS is forgiven a silence of [`NATS_GRACE`] (a
//! check that got no answer in time: a JetStream leader election, a starved machine), and no
//! refusal: an error answer, or a connection that is down, is unready at once.

use std::{
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use tokio::{task::JoinHandle, time::Instant};

use crate::{bus::Bus, store::Store};

/// The bound on each check.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// How often the dependencies are checked (and so how old an answer of `/ready` may be).
pub const CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// How long a replica stays ready while MongoDB does not answer, after it last did: longer
/// than an election (about 12 s), shorter than the requests' server-selection timeout (30 s).
pub const ELECTION_GRACE: Duration = Duration::from_secs(15);

/// How long a replica stays ready while JetStream is silent (answers nothing within
/// [`CHECK_TIMEOUT`]), after it last answered: as long as MongoDB's, for the same reason. A
/// JetStream leader election, or a nats-server starved of CPU by a burst of large messages,
/// keeps it silent for seconds while the work only waits; 6 s was measured too short (two
/// probes of 93 unready during the 900 KB predictions test on a loaded two-core machine),
/// and every replica would have left the load balancer at once. A refusal is never forgiven.
pub const NATS_GRACE: Duration = ELECTION_GRACE;

/// What does not answer.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct NotReady {
    /// MongoDB's failure, if it failed.
    pub mongodb: Option<String>,
    /// NATS's failure, if it failed.
    pub nats: Option<String>,
}

/// The connections readiness is checked on, none of them used by the work.
pub struct Probe {
    /// A MongoDB client of its own, with a pool of one connection.
    pub store: Store,
    /// A NATS connection of its own, for the same streams as the work's.
    pub bus: Bus,
}

/// Why one check of one dependency failed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Failure {
    /// No answer within [`CHECK_TIMEOUT`].
    Silent(String),
    /// An error answer, or no connection.
    Refused(String),
}

/// What the checks have seen of one dependency.
#[derive(Debug, Default)]
struct Seen {
    /// When it last answered.
    answered: Option<Instant>,
    /// The last check's failure, if it failed.
    failure: Option<Failure>,
}

impl Seen {
    /// Records one check at `at`; returns the new state when it differs in kind from the last
    /// (answering, silent, refusing), for one log line per change.
    fn record(&mut self, outcome: Result<(), Failure>, at: Instant) -> Option<Result<(), Failure>> {
        let kind = |f: &Option<Failure>| match f {
            None => 0,
            Some(Failure::Silent(_)) => 1,
            Some(Failure::Refused(_)) => 2,
        };
        let before = kind(&self.failure);
        match &outcome {
            Ok(()) => {
                self.answered = Some(at);
                self.failure = None;
            }
            Err(failure) => self.failure = Some(failure.clone()),
        }
        // A first check that answers is no change worth a line.
        (kind(&self.failure) != before).then_some(outcome)
    }

    /// Why this dependency makes the replica unready at `now`, if it does: it never answered,
    /// it last answered longer than `grace` ago, or it refused (unless `forgive_refusals`).
    fn unready(&self, now: Instant, grace: Duration, forgive_refusals: bool) -> Option<String> {
        let recent = self.answered.is_some_and(|at| now.duration_since(at) < grace);
        match &self.failure {
            None if recent => None,
            None => Some(match self.answered {
                None => "not checked yet".into(),
                Some(at) => format!("not checked for {:?}", now.duration_since(at)),
            }),
            Some(Failure::Silent(_)) if recent => None,
            Some(Failure::Refused(_)) if recent && forgive_refusals => None,
            Some(Failure::Silent(why) | Failure::Refused(why)) => Some(why.clone()),
        }
    }
}

#[derive(Debug, Default)]
struct Checks {
    mongodb: Seen,
    nats: Seen,
}

/// A replica's readiness: the last checks of MongoDB and NATS on the [`Probe`]'s connections,
/// judged with their graces, and the work's own NATS connection. Cheap to clone; the checks
/// stop once every clone is dropped.
#[derive(Clone, Debug)]
pub struct Readiness {
    checks: Arc<Mutex<Checks>>,
    work: Bus,
}

impl Readiness {
    /// Checks once (so a service that has just connected answers ready at once), then every
    /// [`CHECK_INTERVAL`] in a task of its own, on `probe`'s connections; `work` is the bus the
    /// service's work uses, whose connection state counts too.
    pub async fn start(probe: Probe, work: Bus) -> Self {
        let (checks, mut pinging) = (Arc::new(Mutex::new(Checks::default())), None);
        record(&checks, check(&probe, &mut pinging).await, Instant::now());
        tokio::spawn(keep_checking(Arc::downgrade(&checks), probe, pinging));
        Self { checks, work }
    }

    /// Ready, or what is not, now: answered from the last checks without I/O.
    pub fn now(&self) -> Result<(), NotReady> {
        let now = Instant::now();
        let checks = self.checks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mongodb = checks.mongodb.unready(now, ELECTION_GRACE, true);
        let nats = if self.work.is_connected() {
            checks.nats.unready(now, NATS_GRACE, false)
        } else {
            Some("the service's NATS connection is down".into())
        };
        if mongodb.is_none() && nats.is_none() { Ok(()) } else { Err(NotReady { mongodb, nats }) }
    }
}

async fn keep_checking(checks: Weak<Mutex<Checks>>, probe: Probe, mut pinging: Option<JoinHandle<Result<(), String>>>) {
    loop {
        tokio::time::sleep(CHECK_INTERVAL).await;
        let outcomes = check(&probe, &mut pinging).await;
        let Some(checks) = checks.upgrade() else { return };
        record(&checks, outcomes, Instant::now());
    }
}

/// Records one check of both, logging each change of a dependency's state once.
fn record(checks: &Mutex<Checks>, (mongodb, nats): Outcomes, at: Instant) {
    let mut checks = checks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let Checks { mongodb: seen_mongodb, nats: seen_nats } = &mut *checks;
    for (name, seen, outcome) in [("MongoDB", seen_mongodb, mongodb), ("NATS", seen_nats, nats)] {
        match seen.record(outcome, at) {
            Some(Ok(())) => tracing::info!(dependency = name, "answers the readiness check again"),
            Some(Err(Failure::Silent(why))) => tracing::warn!(dependency = name, %why, "silent to the readiness check"),
            Some(Err(Failure::Refused(why))) => tracing::warn!(dependency = name, %why, "refuses the readiness check"),
            None => {}
        }
    }
}

/// One check's outcome for MongoDB, then NATS.
type Outcomes = (Result<(), Failure>, Result<(), Failure>);

/// Checks MongoDB and NATS at once on `probe`'s connections, each within [`CHECK_TIMEOUT`].
///
/// The ping runs in a task of its own, `pinging`: a ping that timed out is left to finish, not
/// dropped halfway (dropping a driver operation can cost the pool its one connection), and no
/// second ping starts while it runs (a silence answered every check with one more waiting ping
/// would pile them up behind the pool's one connection).
async fn check(probe: &Probe, pinging: &mut Option<JoinHandle<Result<(), String>>>) -> Outcomes {
    let ping = match pinging.take() {
        Some(running) => running,
        None => {
            let store = probe.store.clone();
            tokio::spawn(async move { store.ping().await.map_err(|e| e.to_string()) })
        }
    };
    let mongodb = async {
        let mut ping = ping;
        match tokio::time::timeout(CHECK_TIMEOUT, &mut ping).await {
            Ok(Ok(Ok(()))) => (Ok(()), None),
            Ok(Ok(Err(e))) => (Err(Failure::Refused(e)), None),
            Ok(Err(e)) => (Err(Failure::Refused(e.to_string())), None),
            Err(_) => (Err(Failure::Silent(format!("no answer to a ping within {CHECK_TIMEOUT:?}"))), Some(ping)),
        }
    };
    let nats = async {
        if !probe.bus.is_connected() {
            return Err(Failure::Refused("not connected".into()));
        }
        match tokio::time::timeout(CHECK_TIMEOUT, probe.bus.ping()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Failure::Refused(e.to_string())),
            Err(_) => {
                Err(Failure::Silent(format!("JetStream did not answer for the streams within {CHECK_TIMEOUT:?}")))
            }
        }
    };
    let ((mongodb, still_pinging), nats) = tokio::join!(mongodb, nats);
    *pinging = still_pinging;
    (mongodb, nats)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[tokio::test]
    async fn a_mongodb_silence_or_refusal_shorter_than_an_election_is_forgiven_and_a_longer_one_is_not() {
        let (mut seen, start) = (Seen::default(), Instant::now());
        assert!(seen.unready(start, ELECTION_GRACE, true).is_some(), "never checked: not ready");
        seen.record(Err(Failure::Refused("no primary".into())), start);
        assert!(seen.unready(start, ELECTION_GRACE, true).is_some(), "never answered: not ready");
        seen.record(Ok(()), start);
        assert_eq!(seen.unready(start, ELECTION_GRACE, true), None);
        seen.record(Err(Failure::Refused("no primary".into())), start + 4 * SECOND);
        seen.record(Err(Failure::Silent("no answer".into())), start + 12 * SECOND);
        assert_eq!(seen.unready(start + 12 * SECOND, ELECTION_GRACE, true), None, "an election");
        assert!(seen.unready(start + ELECTION_GRACE, ELECTION_GRACE, true).is_some(), "past the grace");
        seen.record(Ok(()), start + ELECTION_GRACE);
        assert_eq!(seen.unready(start + ELECTION_GRACE, ELECTION_GRACE, true), None, "back");
    }

    #[tokio::test]
    async fn a_short_nats_silence_is_forgiven_and_a_refusal_never() {
        let (mut seen, start) = (Seen::default(), Instant::now());
        seen.record(Ok(()), start);
        seen.record(Err(Failure::Silent("no answer".into())), start + 3 * SECOND);
        assert_eq!(seen.unready(start + 5 * SECOND, NATS_GRACE, false), None, "a silence within the grace");
        assert!(seen.unready(start + NATS_GRACE, NATS_GRACE, false).is_some(), "past it");
        seen.record(Ok(()), start + 7 * SECOND);
        seen.record(Err(Failure::Refused("no responders".into())), start + 8 * SECOND);
        assert_eq!(
            seen.unready(start + 8 * SECOND, NATS_GRACE, false).as_deref(),
            Some("no responders"),
            "a refusal: unready at once"
        );
    }

    #[tokio::test]
    async fn checks_that_stopped_coming_make_a_replica_unready() {
        let (mut seen, start) = (Seen::default(), Instant::now());
        seen.record(Ok(()), start);
        assert_eq!(seen.unready(start + 5 * SECOND, NATS_GRACE, false), None);
        let stale = seen.unready(start + NATS_GRACE, NATS_GRACE, false);
        assert!(
            stale.is_some_and(|why| why.starts_with("not checked for")),
            "an answer older than the grace counts for nothing"
        );
    }

    #[tokio::test]
    async fn each_change_of_a_dependency_is_reported_once() {
        let (mut seen, start) = (Seen::default(), Instant::now());
        assert_eq!(seen.record(Ok(()), start), None, "answering from the first check is no change");
        assert!(seen.record(Err(Failure::Silent("a".into())), start).is_some());
        assert_eq!(seen.record(Err(Failure::Silent("b".into())), start), None, "still silent");
        assert!(seen.record(Err(Failure::Refused("c".into())), start).is_some());
        assert!(seen.record(Ok(()), start).is_some(), "back");
    }
}
