//! The fault suite's rows ([`SCENARIOS`], run by [`crate::scenarios`]), each a [`Fault`] with
//! its settings: no fault; SIGKILL of the runner, the notifier and the api, each restarted
//! after a few seconds; nats-server restarted; the stand-in restarted; a receiver
//! that hangs past the delivery timeout on each event's first attempt; one that answers 503
//! with `Retry-After`; the api killed while files are being uploaded (no partial file may
//! become visible, no accepted one may be lost), with files in GridFS and in S3 (S3Proxy),
//! and the object store restarted during uploads (no partial file, no accepted one lost, and
//! after the sweep of unfinished uploads no object in the bucket that no file names); an account capped at 8 running predictions
//! while one of two runners is killed (the cap must hold throughout, and be reached again once
//! the dead runner's slots age out); a rolling update from one model version to the next under
//! pinned, latest and deployment traffic (nothing may fail or run on another version than the
//! one it names); a secret rotation under load; two api, three runner and two notifier
//! replicas; a three-node JetStream cluster (streams R3) whose stream and consumer leaders are
//! moved and which then loses the node that leads the jobs stream, with a capped account and
//! models whose runs are counted (none may run twice, the cap must hold: [`crate::leaders`]); an overload of twice as many clients as the api works on at once (it must shed the
//! rest at once with 503 and `Retry-After`, and lose nothing it accepted); creates at twice
//! the rate the runner starts them, with a bound on the queue (refused in part with 503 and
//! `Retry-After`, and everything accepted runs).
//!
//! A row whose creates take turns between the three priority levels has its runner killed:
//! every level's predictions must end, each at the level it asked for ([`crate::levels`]). A row has
//! its runner killed while a real Cog trainer trains: every training must end, run again or
//! failed with a message, never stuck ([`crate::trainings`]). A row has its runner killed while
//! a real Cog model uploads its output files to it: every prediction must end with its files
//! whole, and no file record may be left that no output names ([`crate::outputs`]); with
//! files in S3, no object either that no file names, once unfinished uploads are swept. A row
//! crosses the account's monthly budget and kills the runner whose usage ledger is counting
//! the crossing: creates must be refused (402) soon after, none accepted once refused, and the
//! usage's cost must equal the predictions' ([`crate::budget`]).
//!
//! A row runs its load on a Cog project the runner starts itself and kills its model servers
//! at random for a minute: every failure must carry a crash's code, and the model must come
//! back ([`crate::cog_crashes`]).
//!
//! A row has one job whose runner is killed on every delivery that runs its model, as a model
//! that takes its process down would: its prediction must fail with `JOB_DELIVERIES_EXHAUSTED`
//! within a minute, its job leave the stream, and the load on the other runner run as ever
//! ([`crate::poison`]).
//!
//! A row runs its load while another account's receiver answers 503 to everything, 1,500
//! events of that account waiting for their retries: every webhook of the load must arrive
//! within 5 s, and the dead receiver's retries must keep to the schedule
//! ([`crate::dead_receiver`]).
//!
//! A row loses MongoDB's answers to every fourth write for a few seconds, after the writes
//! applied, as a failover does: no model may run twice, no Idempotency-Key be left stuck
//! ([`crate::lost_replies`]). Another answers every fourth write with a write concern
//! error of code 64 instead (applied on the primary, its wait for the majority timed out),
//! with the same checks.
//!
//! A row starts every service from the previous release's build and upgrades them to this one
//! under load, replica by replica, after this build's `api admin migrate`: nothing may be
//! lost, stuck or sent twice, and every replica must end on this build ([`crate::upgrade`]).
//!
//! In every row, the account's usage (`GET /v1/usage`) must count each ended prediction once,
//! by how it ended, also where a runner was killed mid-run.

use std::time::Duration;

use crate::{
    recorder::Behaviour,
    topology::{Role, Shape},
};

/// What a scenario does to the system.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Fault {
    /// Nothing.
    None,
    /// SIGKILL of the first replica of a role, restarted after `down`.
    Kill(Role),
    /// nats-server stopped, started again after `down`.
    RestartNats,
    /// The MongoDB stand-in stopped, started again after `down`.
    RestartMongo,
    /// The S3 stand-in stopped, started again after `down`.
    RestartS3,
    /// Every leader of the services' streams and consumers stepped down, then SIGKILL of the
    /// cluster node that leads the jobs stream; it stays down (see [`crate::leaders`]).
    MoveLeaders,
    /// The webhook secret rotated.
    Rotate,
    /// A rolling update of a model version (see [`crate::rollout`]).
    Rollout,
    /// [`FLOOD_CLIENTS`] clients reading back to back for [`FLOOD_SECONDS`] (see [`crate::flood`]),
    /// twice the api's in-flight bound ([`FLOOD_BOUND`]).
    Overload,
    /// Every few writes' answers lost after they applied, for `down` (see
    /// [`crate::lost_replies`]).
    LoseReplies,
    /// Every few writes applied and answered with a `writeConcernError` code 64 (their wait
    /// for the majority timed out), for `down` (see [`crate::lost_replies`]).
    UnconfirmWrites,
    /// The model servers of a Cog project the runner started, killed at random for
    /// [`crate::cog_crashes::KILL_FOR`] (injected by the row itself, which holds the project).
    KillCogServers,
    /// The runner of one job's pool SIGKILLed on every delivery of that job that runs its model
    /// (see [`crate::poison`]).
    KillOnEveryDelivery,
    /// Creates at twice the rate the runner starts them ([`CREATE_FLOOD`]) for
    /// [`FLOOD_SECONDS`], with the queue bound at [`QUEUE_BOUND`] (see [`crate::flood::creates`]).
    CreateFlood,
    /// Every service started from the previous release's build, then migrated and upgraded
    /// to this one in place, replica by replica (see [`crate::upgrade`]).
    Upgrade,
}

impl Fault {
    /// Whether a part dies or restarts, so a delivery may be made twice (at least once).
    pub(crate) fn may_duplicate(self) -> bool {
        !matches!(
            self,
            Self::None
                | Self::Rotate
                | Self::Rollout
                // Each replica is stopped with SIGTERM, as a rolling update stops it.
                | Self::Upgrade
                | Self::Overload
                | Self::CreateFlood
                | Self::KillCogServers
                // The runner it kills runs only the poisonous job: the load's are never redelivered.
                | Self::KillOnEveryDelivery
        )
    }

    /// The longest an accepted prediction may wait to start: with NATS down for a few
    /// seconds, a job accepted meanwhile is published as soon as NATS is back.
    pub(crate) fn start_bound(self) -> Option<Duration> {
        matches!(self, Self::RestartNats).then_some(NATS_OUTAGE_START_BOUND)
    }
}

/// The api's in-flight bound in the overload scenario, the clients of its flood (twice as
/// many), and how long the flood lasts.
pub(crate) const FLOOD_BOUND: usize = 16;
pub(crate) const FLOOD_CLIENTS: usize = 2 * FLOOD_BOUND;
pub(crate) const FLOOD_SECONDS: u64 = 10;

/// The create flood: its rate and the seconds of each of its `demo/sleep` predictions. The
/// runner's 48 slots (`RUNNER_CONCURRENCY` in the suite's settings) start 48 one-second
/// predictions a second at most, and the steady load takes 20 of them; 96 a second is twice
/// what the runner starts.
pub(crate) const CREATE_FLOOD: (u64, f64) = (96, 1.0);
/// `API_MAX_QUEUE_SECONDS` in the create flood's scenario.
pub(crate) const QUEUE_BOUND: &str = "0.5";

/// See [`Fault::start_bound`] (NATS down for the default 3 s).
pub(crate) const NATS_OUTAGE_START_BOUND: Duration = Duration::from_secs(8);

/// One scenario.
pub(crate) struct Scenario {
    pub(crate) name: &'static str,
    pub(crate) shape: Shape,
    pub(crate) nats_nodes: usize,
    pub(crate) behaviour: Behaviour,
    pub(crate) fault: Fault,
    /// The p99 that creates and read-backs must stay under, where the scenario has one.
    pub(crate) latency_bound: Option<Duration>,
    /// Whether files are uploaded beside the predictions (see [`crate::uploads`]).
    pub(crate) uploads: bool,
    /// Whether the account is capped (see [`crate::capped`]).
    pub(crate) capped: bool,
    /// Whether files go to the S3 stand-in rather than GridFS (and are swept and compared
    /// with the bucket afterwards).
    pub(crate) s3: bool,
    /// Whether the creates take turns between the priority levels (see [`crate::levels`]).
    pub(crate) levels: bool,
    /// Whether trainings run beside the load (see [`crate::trainings`]).
    pub(crate) trainings: bool,
    /// Whether a real Cog model uploads file outputs to the runner (see [`crate::outputs`]).
    pub(crate) outputs: bool,
    /// Whether the account has a budget its load crosses, with the fault at the crossing (see
    /// [`crate::budget`]).
    pub(crate) budget: bool,
    /// Whether another account's receiver is dead, with its events waiting for retries, while
    /// the load runs (see [`crate::dead_receiver`]).
    pub(crate) dead_receiver: bool,
    /// Whether the load runs a Cog project whose servers are killed at random (see
    /// [`crate::cog_crashes`]; the fault is [`Fault::KillCogServers`]).
    pub(crate) cog_crashes: bool,
    /// Whether the runners' model runs must equal the predictions: no part dies, so none may
    /// run twice.
    pub(crate) counts_runs: bool,
}

impl Scenario {
    /// Whether the row must run with no other row beside it: it restarts a server the rows
    /// share (nats-server, the MongoDB stand-in, S3Proxy), floods the machine on purpose, or
    /// holds the system to a latency or a delivery time that a neighbour's load would move.
    /// The other rows run two at a time (see `scenarios::run`), each on a database and NATS
    /// prefix of its own.
    pub(crate) fn alone(&self) -> bool {
        matches!(self.fault, Fault::RestartNats | Fault::RestartMongo | Fault::RestartS3 | Fault::Overload | Fault::CreateFlood)
            // The S3 row with file outputs restarts S3Proxy before it lists the bucket.
            || (self.outputs && self.s3)
            || self.latency_bound.is_some()
            || self.dead_receiver
    }

    /// Whether the row stops and starts MongoDB itself: not run against a MongoDB that
    /// `MONGODB_URI` names, which the suite does not own.
    pub(crate) fn restarts_mongo(&self) -> bool {
        matches!(self.fault, Fault::RestartMongo)
    }
}

pub(crate) const ONE_EACH: Shape = Shape { apis: 1, runners: 1, notifiers: 1 };
/// The p99 of creates and reads in scenarios where nothing the api needs goes away for long
/// (on a three-node cluster, losing one node must not slow them past it either). It tells a
/// stall (a request held for a timeout, a lock, a dependency) from a busy machine: these
/// scenarios' p99s are 20 to 50 ms on the 2-core reference machine, and up to 115 ms with a
/// compile beside them; the bound leaves room for a machine twice as slow as that. The
/// latency targets themselves are the benchmarks' (docs/benchmarks.md).
pub(crate) const LATENCY_BOUND: Duration = Duration::from_millis(250);
/// The notifier's timeout in these runs: the hanging receiver holds each first attempt past it.
pub(crate) const DELIVERY_TIMEOUT_SECONDS: u64 = 2;
/// `NOTIFIER_PER_TARGET` against the hanging receiver: every event's first attempt holds one
/// of the target's slots for the whole timeout, so with the default 8 the row spent 100 s
/// working through them (the bound itself is the notifier tests' `isolation`).
pub(crate) const HANGING_PER_TARGET: usize = 48;

/// A scenario's settings where it says nothing else: one replica of each service on one NATS
/// node, a healthy receiver, no fault, no bound, none of the extra loads.
pub(crate) const PLAIN: Scenario = Scenario {
    name: "",
    shape: ONE_EACH,
    nats_nodes: 1,
    behaviour: Behaviour::Healthy,
    fault: Fault::None,
    latency_bound: None,
    uploads: false,
    capped: false,
    s3: false,
    levels: false,
    trainings: false,
    outputs: false,
    budget: false,
    dead_receiver: false,
    cog_crashes: false,
    counts_runs: false,
};

/// Every scenario, in the order they run.
pub(crate) const SCENARIOS: &[Scenario] = &[
    Scenario { name: "no fault", latency_bound: Some(LATENCY_BOUND), ..PLAIN },
    Scenario { name: "runner killed (SIGKILL)", fault: Fault::Kill(Role::Runner), ..PLAIN },
    Scenario {
        name: "capped account, runner killed",
        shape: Shape { apis: 1, runners: 2, notifiers: 1 },
        fault: Fault::Kill(Role::Runner),
        capped: true,
        ..PLAIN
    },
    Scenario { name: "three priority levels, runner killed", fault: Fault::Kill(Role::Runner), levels: true, ..PLAIN },
    Scenario { name: "runner killed mid-training", fault: Fault::Kill(Role::Runner), trainings: true, ..PLAIN },
    Scenario { name: "runner killed during output uploads", fault: Fault::Kill(Role::Runner), outputs: true, ..PLAIN },
    Scenario {
        name: "runner killed during output uploads (s3)",
        fault: Fault::Kill(Role::Runner),
        outputs: true,
        s3: true,
        ..PLAIN
    },
    Scenario {
        name: "budget crossed, the usage ledger's runner killed at the crossing",
        fault: Fault::Kill(Role::Runner),
        budget: true,
        ..PLAIN
    },
    Scenario {
        name: "Cog model servers killed at random for a minute",
        fault: Fault::KillCogServers,
        cog_crashes: true,
        ..PLAIN
    },
    Scenario { name: "a job whose runner is killed on every delivery", fault: Fault::KillOnEveryDelivery, ..PLAIN },
    Scenario { name: "notifier killed (SIGKILL)", fault: Fault::Kill(Role::Notifier), ..PLAIN },
    Scenario { name: "api killed (SIGKILL)", fault: Fault::Kill(Role::Api), ..PLAIN },
    Scenario { name: "api killed during uploads", fault: Fault::Kill(Role::Api), uploads: true, ..PLAIN },
    Scenario {
        name: "api killed during uploads (s3)",
        fault: Fault::Kill(Role::Api),
        uploads: true,
        s3: true,
        ..PLAIN
    },
    Scenario {
        name: "object store restarted during uploads (s3)",
        fault: Fault::RestartS3,
        uploads: true,
        s3: true,
        ..PLAIN
    },
    Scenario { name: "nats-server restarted", fault: Fault::RestartNats, ..PLAIN },
    Scenario { name: "MongoDB stand-in restarted", fault: Fault::RestartMongo, ..PLAIN },
    Scenario { name: "MongoDB answers lost after writes applied (failover)", fault: Fault::LoseReplies, ..PLAIN },
    Scenario {
        name: "MongoDB writes unconfirmed: majority wait timed out (code 64)",
        fault: Fault::UnconfirmWrites,
        ..PLAIN
    },
    Scenario {
        name: "MongoDB answers lost during trainings (failover)",
        fault: Fault::LoseReplies,
        trainings: true,
        ..PLAIN
    },
    Scenario {
        name: "receiver hangs on first attempts",
        behaviour: Behaviour::HangFirst(Duration::from_secs(DELIVERY_TIMEOUT_SECONDS + 1)),
        ..PLAIN
    },
    Scenario { name: "receiver answers 503 + Retry-After: 2", behaviour: Behaviour::UnavailableFirst(2), ..PLAIN },
    Scenario {
        name: "another account's receiver dead, 1,500 events waiting for retries",
        dead_receiver: true,
        ..PLAIN
    },
    Scenario {
        name: "rolling update v1 -> v2 (pinned, latest, deployment)",
        fault: Fault::Rollout,
        latency_bound: Some(LATENCY_BOUND),
        ..PLAIN
    },
    Scenario {
        name: "every service upgraded from the previous release, replica by replica",
        shape: Shape { apis: 2, runners: 2, notifiers: 2 },
        fault: Fault::Upgrade,
        ..PLAIN
    },
    Scenario { name: "secret rotated under load", fault: Fault::Rotate, latency_bound: Some(LATENCY_BOUND), ..PLAIN },
    Scenario {
        name: "2 api, 3 runner, 2 notifier replicas",
        shape: Shape { apis: 2, runners: 3, notifiers: 2 },
        latency_bound: Some(LATENCY_BOUND),
        ..PLAIN
    },
    Scenario { name: "overload: 2x the api's in-flight bound for 10 s", fault: Fault::Overload, ..PLAIN },
    Scenario {
        name: "overload: creates at 2x what the runner starts for 10 s, queue bound 0.5 s",
        fault: Fault::CreateFlood,
        ..PLAIN
    },
    Scenario {
        name: "3-node NATS cluster (R3), capped account, leaders moved, stream leader killed",
        shape: Shape { apis: 2, runners: 2, notifiers: 2 },
        nats_nodes: 3,
        fault: Fault::MoveLeaders,
        latency_bound: Some(LATENCY_BOUND),
        capped: true,
        counts_runs: true,
        ..PLAIN
    },
];
