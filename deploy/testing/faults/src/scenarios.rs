//! The fault-injection suite's scenarios, and the run of each. Each scenario starts the three
//! services as separate processes on real servers this run owns (nats-server, and the MongoDB stand-in on
//! its H2 file backend so data survives its restart), puts them under steady load (20
//! predictions a second of `demo/sleep` 1 s, each with a webhook to a local [`crate::recorder`]),
//! injects one fault a few seconds in, drains, and reports what [`report`] checks: nothing
//! stuck, no `completed` webhook missing, no duplicates where none are allowed, no 5xx outside
//! the fault.
//!
//! The rows themselves, and what each checks beyond that, are [`crate::rows`].
//!
//! Run by `deploy/local/fault-tests` (which `deploy/local/test` calls): the table goes to
//! stdout and to the `--out` file's name with `.md`; any failing scenario fails the run.

use std::{collections::HashMap, path::Path, time::Duration};

use anyhow::Context;
use common::domain::WebhookSecret;
use futures::{StreamExt, TryStreamExt};
use serde_json::{Value, json};
use tokio::{sync::Mutex, time::Instant};
use tokio_util::sync::CancellationToken;

use harness::servers::{Mongo, Nats, S3Standin};

use crate::{
    budget, capped, cog_crashes, dead_receiver, flood, leaders, levels, load, lost_replies, outputs, poison,
    recorder::{Behaviour, Recorder},
    report,
    report::{Evidence, Outcome, SETTLE, Window},
    rollout,
    rows::{
        CREATE_FLOOD, DELIVERY_TIMEOUT_SECONDS, FLOOD_BOUND, FLOOD_CLIENTS, FLOOD_SECONDS, Fault, HANGING_PER_TARGET,
        QUEUE_BOUND, SCENARIOS, Scenario,
    },
    topology::{Role, Topology},
    trainings, upgrade, uploads,
};

/// The fault suite's settings.
#[derive(clap::Args, Clone, Debug)]
pub struct Options {
    /// Predictions created per second in each scenario.
    #[arg(long, default_value_t = 20)]
    rate: u64,
    /// Seconds of load in each scenario.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Seconds into the load at which the fault begins.
    #[arg(long, default_value_t = 3)]
    fault_at: u64,
    /// Seconds a killed or stopped part stays down.
    #[arg(long, default_value_t = 3)]
    down: u64,
    /// Run only the scenarios whose name contains this text (all when unset).
    #[arg(long)]
    only: Option<String>,
    /// How many rows that may share the machine run at once (see `scenarios::lanes`).
    #[arg(long)]
    lanes: Option<usize>,
}

/// How long predictions and webhooks may take to settle after the load, and how long the
/// deliveries must stay quiet before duplicates are counted.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(120);
const QUIET: Duration = Duration::from_secs(3);

/// Runs the scenarios; fails when any fails. Writes the table to `table`.
///
/// The rows that may share the machine ([`Scenario::alone`] says which may not) run
/// [`lanes`] at a time, each on its own database and NATS prefix on the shared servers; then
/// the others one by one. The table keeps [`SCENARIOS`]' order.
pub async fn run(options: Options, table: &mut String) -> anyhow::Result<Value> {
    let dir = std::env::temp_dir().join(format!("faults-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mongo = Mongo::start(&dir).await?;
    println!("MongoDB: {}", mongo.kind());
    let (chosen, skipped): (Vec<(usize, &Scenario)>, Vec<_>) = SCENARIOS
        .iter()
        .enumerate()
        .filter(|(_, s)| options.only.as_ref().is_none_or(|only| s.name.contains(only.as_str())))
        .partition(|(_, s)| mongo.restartable() || !s.restarts_mongo());
    for (_, scenario) in &skipped {
        println!("not run: {:?} restarts MongoDB, and the suite restarts only a stand-in of its own", scenario.name);
    }
    let mongo = Mutex::new(mongo);
    let nats = Mutex::new(Nats::single(&dir.join("single")).await?);
    let s3 = match chosen.iter().any(|(_, s)| s.s3) {
        true => Some(Mutex::new(S3Standin::start(&dir).await?)),
        false => None,
    };
    let servers = Servers { mongo: &mongo, nats: &nats, s3: s3.as_ref() };
    let (alone, beside): (Vec<_>, Vec<_>) = chosen.into_iter().partition(|(_, s)| s.alone());
    let lanes = lanes(options.lanes);
    println!("{} rows {lanes} at a time, then {} alone", beside.len(), alone.len());
    let (options_ref, dir_ref) = (&options, dir.as_path());
    let mut outcomes: Vec<(usize, Outcome)> = futures::stream::iter(beside)
        .map(|(i, scenario)| async move {
            Ok::<_, anyhow::Error>((i, run_row(scenario, options_ref, servers, dir_ref).await?))
        })
        .buffer_unordered(lanes)
        .try_collect()
        .await?;
    for (i, scenario) in alone {
        outcomes.push((i, run_row(scenario, &options, servers, &dir).await?));
    }
    outcomes.sort_by_key(|(i, _)| *i);
    let outcomes: Vec<Outcome> = outcomes.into_iter().map(|(_, outcome)| outcome).collect();
    nats.into_inner().shutdown().await?;
    mongo.into_inner().stop(false).await?;
    if let Some(s3) = s3 {
        s3.into_inner().stop(false).await?;
    }
    table.push_str(&report::table(&outcomes));
    let failed: Vec<&str> = outcomes.iter().filter(|o| !o.failures().is_empty()).map(|o| o.scenario.as_str()).collect();
    if failed.is_empty() {
        std::fs::remove_dir_all(&dir).ok();
    } else {
        println!("{table}");
        anyhow::bail!("failing scenarios: {} (service logs kept in {})", failed.join(", "), dir.display());
    }
    Ok(
        json!({"rate_per_second": options.rate, "seconds": options.seconds, "scenarios": outcomes.iter().map(Outcome::json).collect::<Vec<_>>()}),
    )
}

/// How many rows run at once: `asked` when given, else two where the process may use two
/// cores or more, one on a single core (`taskset -c 0`), where a second row would only take
/// the first one's CPU.
fn lanes(asked: Option<usize>) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    asked.unwrap_or(if cores >= 2 { 2 } else { 1 }).max(1)
}

/// One row on the shared servers, or on a cluster of its own where it asks for several NATS
/// nodes; its services' logs go under `dir`.
async fn run_row(scenario: &Scenario, options: &Options, shared: Servers<'_>, dir: &Path) -> anyhow::Result<Outcome> {
    println!("scenario: {}", scenario.name);
    let began = Instant::now();
    let logs = dir.join(slug(scenario.name));
    let outcome = if scenario.nats_nodes > 1 {
        let cluster = Mutex::new(Nats::cluster(&logs, scenario.nats_nodes).await?);
        let outcome = run_scenario(scenario, options, Servers { nats: &cluster, ..shared }, &logs).await;
        cluster.into_inner().shutdown().await?;
        outcome
    } else {
        run_scenario(scenario, options, shared, &logs).await
    }
    .with_context(|| format!("scenario {:?} (logs in {})", scenario.name, logs.display()))?;
    println!("  {} ({:.0} s)", outcome.json(), began.elapsed().as_secs_f64());
    Ok(outcome)
}

/// A bucket of this run for scenario `name` (S3 names: lowercase, digits and single hyphens).
fn bucket(name: &str) -> String {
    let words: Vec<String> = slug(name).split('-').filter(|w| !w.is_empty()).map(str::to_owned).collect();
    let mut bucket = format!("faults-{}-{}", std::process::id(), words.join("-"));
    bucket.truncate(63);
    bucket.trim_end_matches('-').to_owned()
}

fn slug(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect()
}

/// The settings of every service in a scenario.
fn service_vars(mongo: &Mongo, nats: &Nats, replicas: usize) -> Vec<(&'static str, String)> {
    vec![
        ("MONGODB_URI", mongo.uri()),
        ("NATS_URL", nats.url()),
        ("NATS_STREAM_REPLICAS", replicas.to_string()),
        ("NOTIFIER_ALLOW_PRIVATE_TARGETS", "true".into()),
        ("NOTIFIER_RETRY_SCHEDULE", "1,2,4,8,15,30".into()),
        ("NOTIFIER_TIMEOUT_SECONDS", DELIVERY_TIMEOUT_SECONDS.to_string()),
        ("RUNNER_CONCURRENCY", "48".into()),
        // The sweep that counts the usage a killed runner left, soon after it is due.
        ("RUNNER_RETENTION_SWEEP_SECONDS", "2".into()),
        ("DEFAULT_RATE_LIMIT_RPM", "1000000".into()),
        ("MONGODB_COMMAND_METRICS", "false".into()),
        ("TOKIO_WORKER_THREADS", "1".into()),
        ("RUST_LOG", std::env::var("FAULTS_SERVICE_LOG").unwrap_or_else(|_| "info".into())),
    ]
}

/// The servers a scenario runs on, and may restart (only a row that runs alone does: the
/// locks are held for a restart, or to read an address).
#[derive(Clone, Copy)]
struct Servers<'a> {
    mongo: &'a Mutex<Mongo>,
    nats: &'a Mutex<Nats>,
    /// Started when a chosen scenario keeps files in S3.
    s3: Option<&'a Mutex<S3Standin>>,
}

async fn run_scenario(
    scenario: &Scenario,
    options: &Options,
    servers: Servers<'_>,
    logs: &Path,
) -> anyhow::Result<Outcome> {
    let mut vars = service_vars(&*servers.mongo.lock().await, &*servers.nats.lock().await, scenario.nats_nodes);
    if scenario.s3 {
        let s3 = servers.s3.context("an S3 scenario without the S3 stand-in")?;
        vars.extend(s3.lock().await.env(&bucket(scenario.name)));
    }
    let rolling = matches!(scenario.fault, Fault::Rollout);
    if rolling {
        vars.extend(rollout::V1_RUNNER.iter().map(|(k, v)| (*k, (*v).to_owned())));
    }
    if matches!(scenario.behaviour, Behaviour::HangFirst(_)) {
        vars.push(("NOTIFIER_PER_TARGET", HANGING_PER_TARGET.to_string()));
    }
    match scenario.fault {
        Fault::Overload => vars.push(("API_MAX_IN_FLIGHT", FLOOD_BOUND.to_string())),
        Fault::CreateFlood => vars.push(("API_MAX_QUEUE_SECONDS", QUEUE_BOUND.to_owned())),
        _ => {}
    }
    let trainers = match scenario.trainings {
        true => Some(trainings::Trainers::start().await?),
        false => None,
    };
    if let Some(trainers) = &trainers {
        vars.extend(trainers.vars());
    }
    let cog = match scenario.cog_crashes {
        true => Some(cog_crashes::CogProject::prepare()?),
        false => None,
    };
    if let Some(cog) = &cog {
        vars.extend(cog.vars()?);
    }
    let uploader = match scenario.outputs {
        true => Some(outputs::Uploader::start().await?),
        false => None,
    };
    if let Some(uploader) = &uploader {
        vars.extend(uploader.vars());
    }
    // Every service reaches MongoDB through the proxy that loses answers.
    let losing = match scenario.fault {
        Fault::LoseReplies | Fault::UnconfirmWrites => {
            let fault = match scenario.fault {
                Fault::LoseReplies => mongo_faults::Fault::LoseReply,
                _ => mongo_faults::Fault::Unconfirmed,
            };
            let uri = servers.mongo.lock().await.uri();
            let (losing, proxied) = lost_replies::LostReplies::start(&uri, fault).await?;
            vars.retain(|(name, _)| *name != "MONGODB_URI");
            vars.push(("MONGODB_URI", proxied));
            Some(losing)
        }
        _ => None,
    };
    let previous = match scenario.fault {
        Fault::Upgrade => Some(upgrade::previous_release()?),
        _ => None,
    };
    let mut topology = Topology::start(scenario.shape, &vars, logs.to_path_buf(), previous.as_deref()).await?;
    let pinned = rollout::Pinned::new();
    if rolling {
        rollout::prepare(&topology).await?;
    }
    if scenario.capped {
        capped::cap(&topology.setup.store).await?;
    }
    if matches!(scenario.fault, Fault::KillOnEveryDelivery) {
        poison::prepare(&mut topology).await?;
    }
    if scenario.levels {
        levels::allow_high(&topology.setup.store).await?;
    }
    let budgeted = match scenario.budget {
        true => Some(budget::prepare(&topology.setup).await?),
        false => None,
    };
    let dead = match scenario.dead_receiver {
        true => Some(dead_receiver::prepare(&topology).await?),
        false => None,
    };
    let stop = CancellationToken::new();
    let sampling = scenario.capped.then(|| tokio::spawn(capped::sample(topology.runner_metrics(), stop.clone())));
    let recorder = Recorder::start(topology.secret.clone(), scenario.behaviour, stop.clone()).await?;
    // The load's instants by the wall clock the services stamp predictions with.
    let anchor = (Instant::now(), chrono::Utc::now());
    let load = tokio::spawn({
        let (apis, key, url) = (topology.apis.clone(), topology.key.clone(), recorder.url.clone());
        // The budget row's load lasts twice as long: its crossing comes only once the killed
        // runner is back and has run jobs again, and refusals must be seen after it.
        // So does the upgrade's: it lasts through the roll of every replica.
        let upgrading = matches!(scenario.fault, Fault::Upgrade);
        let seconds = match (scenario.budget, scenario.cog_crashes) {
            (true, _) => options.seconds * 2,
            _ if upgrading => options.seconds * 2,
            (_, true) => cog_crashes::LOAD_SECONDS,
            _ => options.seconds,
        };
        let rate = if scenario.cog_crashes { cog_crashes::RATE } else { options.rate };
        let keyed = losing.is_some();
        let poisoning = matches!(scenario.fault, Fault::KillOnEveryDelivery);
        let target = match (rolling, scenario.levels, scenario.cog_crashes) {
            _ if poisoning => Some(poison::target(url.clone())),
            (true, _, _) => Some(rollout::target(pinned.clone(), url.clone())),
            (_, true, _) => Some(levels::target(url.clone())),
            (_, _, true) => Some(cog_crashes::target(url.clone())),
            _ => None,
        };
        async move {
            match target {
                Some(target) => load::run_with(&apis, &key, rate, seconds, target).await,
                None if keyed => load::run_keyed(&apis, &key, &url, rate, seconds).await,
                None => load::run(&apis, &key, &url, rate, seconds).await,
            }
        }
    });
    let file_bytes = if scenario.s3 { uploads::S3_FILE_BYTES } else { uploads::FILE_BYTES };
    let uploading = scenario.uploads.then(|| {
        let (api, key, seconds) = (topology.apis[0].clone(), topology.key.clone(), options.seconds);
        tokio::spawn(async move { uploads::run(&api, &key, seconds, file_bytes).await })
    });
    // The trainings start a second before the fault: the first is training when it comes.
    let fault_at = Duration::from_secs(options.fault_at);
    let (training_ids, output_ids) = match (scenario.trainings, scenario.outputs) {
        (true, _) => {
            tokio::time::sleep(fault_at.saturating_sub(Duration::from_secs(1))).await;
            let ids = trainings::start(&topology.apis[0], &topology.key, &recorder.url).await?;
            tokio::time::sleep(Duration::from_secs(1)).await;
            (ids, Vec::new())
        }
        // The predictions with file outputs start before the fault (see `outputs::LEAD`):
        // the first is uploading its files when it comes.
        (_, true) => {
            tokio::time::sleep(fault_at.saturating_sub(outputs::LEAD)).await;
            let ids = outputs::start(&topology.apis[0], &topology.key, &recorder.url).await?;
            tokio::time::sleep(outputs::LEAD).await;
            (Vec::new(), ids)
        }
        // The fault comes when the usage ledger is about to count the crossing of the budget.
        _ if budgeted.is_some() => {
            let account = budgeted.as_ref().context("the budgeted account")?;
            budget::wait_for_the_crossing(&topology.setup.store, account).await?;
            (Vec::new(), Vec::new())
        }
        _ => {
            tokio::time::sleep(fault_at).await;
            (Vec::new(), Vec::new())
        }
    };
    let mut killed = None;
    let mut poisoned = None;
    let mut upgraded = None;
    let (window, flooded, lost) = match (&losing, &cog) {
        _ if matches!(scenario.fault, Fault::Upgrade) => {
            let from = Instant::now();
            upgraded = Some(upgrade::roll(&mut topology).await?);
            (Some(Window { from, until: Instant::now() + SETTLE, back: chrono::Utc::now() }), None, 0)
        }
        _ if matches!(scenario.fault, Fault::KillOnEveryDelivery) => {
            let from = Instant::now();
            poisoned = Some(poison::inject(&mut topology, &recorder.url).await?);
            (Some(Window { from, until: Instant::now() + SETTLE, back: chrono::Utc::now() }), None, 0)
        }
        (_, Some(cog)) => {
            let from = Instant::now();
            killed = Some(cog.kill_at_random().await);
            (Some(Window { from, until: Instant::now() + SETTLE, back: chrono::Utc::now() }), None, 0)
        }
        (Some(losing), _) => {
            let from = Instant::now();
            losing.begin();
            tokio::time::sleep(Duration::from_secs(options.down)).await;
            let lost = losing.end();
            (Some(Window { from, until: Instant::now() + SETTLE, back: chrono::Utc::now() }), None, lost)
        }
        (None, None) => {
            let (window, flooded) = inject(scenario.fault, options, &mut topology, servers, &recorder, &pinned).await?;
            (window, flooded, 0)
        }
    };
    let attempts = load.await??;
    // Every create not answered 201 is sent again with its key (its prediction is then drained
    // with the others), and every one answered 201 once more.
    let keys = match &losing {
        Some(_) => Some(lost_replies::settle_keys(&topology.apis[0], &topology.key, &recorder.url, &attempts).await?),
        None => None,
    };
    let (statuses, started) = drain(&topology, &recorder).await?;
    let usage = usage_against(&topology, &statuses).await?;
    let files = match uploading {
        Some(task) => {
            let (sent, accepted) = task.await??;
            let mut tally = uploads::check(&topology.apis[0], &topology.key, &sent, &accepted, file_bytes).await?;
            if scenario.s3 {
                tally.orphans = Some(uploads::orphans_after_sweep(&topology.setup).await?);
            }
            Some(tally)
        }
        None => None,
    };
    stop.cancel();
    let cap = match sampling {
        Some(task) => Some(capped::tally(&task.await??, window.map(|w| w.until))),
        None => None,
    };
    let deliveries = recorder.deliveries();
    let evidence =
        Evidence { attempts: &attempts, statuses: &statuses, deliveries: &deliveries, window, started: &started };
    let mut outcome = Outcome::of(scenario.name, &evidence, recorder.tally(), scenario.fault.may_duplicate());
    outcome.latency_bound = scenario.latency_bound;
    outcome.start_bound = scenario.fault.start_bound();
    outcome.crashed = topology.crashed();
    outcome.uploads = files;
    outcome.cap = cap;
    outcome.overload = flooded;
    outcome.usage = Some(usage);
    outcome.levels = scenario.levels.then(|| levels::LevelsTally::of(&attempts));
    if scenario.trainings {
        let down = Duration::from_secs(options.down);
        let interrupting = matches!(scenario.fault, Fault::Kill(_));
        let (api, key) = (&topology.apis[0], &topology.key);
        outcome.trainings = Some(trainings::check(api, key, &training_ids, down, interrupting).await?);
    }
    if scenario.outputs {
        let down = Duration::from_secs(options.down);
        let mut tally = outputs::check(&topology.apis[0], &topology.key, &output_ids, down).await?;
        if scenario.s3 {
            // A runner killed mid-`PutObject` leaves S3Proxy a temporary file that fails every
            // listing of the bucket until S3Proxy starts again (its start removes it; S3 never
            // shows an unfinished write): restarted before the bucket is listed.
            let mut s3 = servers.s3.context("an S3 scenario without the S3 stand-in")?.lock().await;
            s3.stop(false).await?;
            s3.restart().await?;
            tally.unnamed_objects = Some(uploads::orphans_after_sweep(&topology.setup).await?);
        }
        outcome.outputs = Some(tally);
    }
    if let Some(mut keys) = keys {
        keys.lost = lost;
        keys.lagged = losing.as_ref().map_or(0, lost_replies::LostReplies::lagged);
        keys.runs = lost_replies::runs(&topology.runner_metrics()[0]).await?;
        keys.predictions = statuses.len();
        keys.made = accepted_ids(&topology).await?.len();
        outcome.lost = Some(keys);
    }
    if scenario.counts_runs {
        let mut runs = 0;
        for metrics in topology.runner_metrics() {
            runs += lost_replies::runs(&metrics).await?;
        }
        outcome.runs = Some((runs, statuses.len()));
    }
    if let Some(dead) = &dead {
        outcome.dead = Some(dead_receiver::check(&topology, dead, &deliveries, anchor).await?);
    }
    outcome.upgrade = upgraded;
    if let Some((id, kills)) = &poisoned {
        outcome.poison = Some(poison::check(&topology, id, *kills).await?);
    }
    if let Some((kills, last)) = killed {
        outcome.cog = Some(cog_crashes::check(&topology.setup.store, kills, last).await?);
    }
    if let Some(account) = &budgeted {
        let (api, key) = (&topology.apis[0], &topology.key);
        let back = window.map(|w| w.back);
        outcome.budget = Some(budget::check(&topology.setup, api, key, account, &attempts, anchor, back).await?);
    }
    if rolling {
        outcome.rollout = Some(rollout::check(&topology, &accepted_ids(&topology).await?).await?);
    }
    topology.stop().await?;
    Ok(outcome)
}

/// Does `fault`; returns its window, and what an overload's flood got.
async fn inject(
    fault: Fault,
    options: &Options,
    topology: &mut Topology,
    servers: Servers<'_>,
    recorder: &Recorder,
    pinned: &rollout::Pinned,
) -> anyhow::Result<(Option<Window>, Option<flood::FloodTally>)> {
    let down = Duration::from_secs(options.down);
    let from = Instant::now();
    let mut flooded = None;
    match fault {
        // Injected by the row itself (it holds the proxy).
        Fault::None
        | Fault::LoseReplies
        | Fault::UnconfirmWrites
        | Fault::KillCogServers
        | Fault::KillOnEveryDelivery
        | Fault::Upgrade => {
            return Ok((None, None));
        }
        Fault::Rotate => {
            rotate(topology, recorder).await?;
            return Ok((None, None));
        }
        Fault::Rollout => {
            rollout::roll(topology, pinned).await?;
            return Ok((None, None));
        }
        Fault::Kill(role) => {
            topology.kill(role, 0).await?;
            tokio::time::sleep(down).await;
            topology.restart(role, 0).await?;
        }
        Fault::RestartNats => {
            let mut nats = servers.nats.lock().await;
            nats.stop(0, false).await?;
            tokio::time::sleep(down).await;
            nats.start(0).await?;
        }
        Fault::RestartMongo => {
            let mut mongo = servers.mongo.lock().await;
            mongo.stop(false).await?;
            tokio::time::sleep(down).await;
            mongo.restart().await?;
        }
        Fault::RestartS3 => {
            let mut s3 = servers.s3.context("an S3 fault without the S3 stand-in")?.lock().await;
            s3.stop(false).await?;
            tokio::time::sleep(down).await;
            s3.restart().await?;
        }
        Fault::Overload => {
            let length = Duration::from_secs(FLOOD_SECONDS);
            flooded = Some(flood::run(&topology.apis[0], &topology.key, FLOOD_CLIENTS, length).await?);
        }
        Fault::CreateFlood => {
            let (api, key) = (&topology.apis[0], &topology.key);
            flooded = Some(flood::creates(api, key, &recorder.url, CREATE_FLOOD, FLOOD_SECONDS).await?);
        }
        Fault::MoveLeaders => {
            let moved = leaders::step_down_all(&topology.setup.bus).await?;
            println!("  {moved} stream and consumer leaders stepped down");
            // A runner whose acknowledgements stop past the ack wait, as through a long
            // election: its jobs are delivered again to the other while it still runs them.
            topology.signal(Role::Runner, 0, "STOP").await?;
            tokio::time::sleep(leaders::FROZEN_FOR).await;
            topology.signal(Role::Runner, 0, "CONT").await?;
            println!("  runner 0 frozen for {} s", leaders::FROZEN_FOR.as_secs());
            let leader = leaders::jobs_stream_leader(&topology.setup.bus).await?;
            println!("  killing {leader}, the jobs stream's new leader");
            let node: usize = leader.trim_start_matches("node-").parse().context("a node name")?;
            servers.nats.lock().await.stop(node, true).await?;
        }
    }
    Ok((Some(Window { from, until: Instant::now() + SETTLE, back: chrono::Utc::now() }), flooded))
}

/// How long the account's usage may take to count every ended prediction: a prediction whose
/// runner was killed before counting it is counted by a sweep 30 s after it ended.
const USAGE_TIMEOUT: Duration = Duration::from_secs(60);

/// The account's usage by status (`GET /v1/usage`), once it counts as many predictions as
/// ended (or [`USAGE_TIMEOUT`] passed), beside the ended predictions by status.
async fn usage_against(
    topology: &Topology,
    statuses: &HashMap<String, String>,
) -> anyhow::Result<([i64; 3], [i64; 3])> {
    let count = |status: &str| statuses.values().filter(|s| s.as_str() == status).count() as i64;
    let ended = [count("succeeded"), count("failed"), count("canceled")];
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
    let deadline = Instant::now() + USAGE_TIMEOUT;
    loop {
        let body: Value = http
            .get(format!("{}/v1/usage?bucket=hour", topology.apis[0]))
            .bearer_auth(&topology.key)
            .send()
            .await?
            .json()
            .await?;
        let totals = &body["totals"]["count"];
        let counted = ["succeeded", "failed", "canceled"].map(|s| totals[s].as_i64().unwrap_or(0));
        if counted == ended || Instant::now() > deadline {
            return Ok((counted, ended));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Rotates the account's secret through the api, and tells the recorder.
async fn rotate(topology: &Topology, recorder: &Recorder) -> anyhow::Result<()> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let answer: Value = http
        .post(format!("{}/v1/account/webhooks/secret/rotate", topology.apis[0]))
        .bearer_auth(&topology.key)
        .json(&json!({"transition_hours": 1}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let key = answer["key"].as_str().context("the rotation answered no key")?;
    recorder.rotated(WebhookSecret::parse(key).context("the new secret")?);
    Ok(())
}

/// Waits until every accepted prediction has ended and has its `completed` webhook (or the
/// drain times out), then until deliveries stay quiet; returns each prediction's last status,
/// and when each that started was created and started.
async fn drain(
    topology: &Topology,
    recorder: &Recorder,
) -> anyhow::Result<(HashMap<String, String>, HashMap<String, report::Started>)> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    let mut statuses: HashMap<String, String> = HashMap::new();
    let mut started: HashMap<String, report::Started> = HashMap::new();
    let time = |v: &Value| v.as_str().and_then(|t| t.parse::<chrono::DateTime<chrono::Utc>>().ok());
    // Predictions and trainings alike: each is read where its kind is.
    let mut ids: Vec<(String, &str)> =
        accepted_ids(topology).await?.into_iter().map(|id| (id, "predictions")).collect();
    ids.extend(training_ids(topology).await?.into_iter().map(|id| (id, "trainings")));
    loop {
        for (id, kind) in &ids {
            if statuses.get(id).is_some_and(|s| matches!(s.as_str(), "succeeded" | "failed" | "canceled")) {
                continue;
            }
            let url = format!("{}/v1/{kind}/{id}", topology.apis[0]);
            if let Ok(response) = http.get(url).bearer_auth(&topology.key).send().await
                && let Ok(prediction) = response.json::<Value>().await
                && let Some(status) = prediction["status"].as_str()
            {
                statuses.insert(id.clone(), status.to_owned());
                if let (Some(created), Some(began)) = (time(&prediction["created_at"]), time(&prediction["started_at"]))
                {
                    started.insert(id.clone(), (created, began));
                }
            }
        }
        let completed: std::collections::HashSet<String> = recorder
            .deliveries()
            .into_iter()
            .filter(|d| d.accepted && d.event == "completed")
            .map(|d| d.prediction)
            .collect();
        let settled = ids.iter().all(|(id, _)| {
            statuses.get(id).is_some_and(|s| matches!(s.as_str(), "succeeded" | "failed" | "canceled"))
                && completed.contains(id)
        });
        if settled || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let quiet_deadline = Instant::now() + DRAIN_TIMEOUT / 4;
    while recorder.tally().quiet_for < QUIET && Instant::now() < quiet_deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok((statuses, started))
}

/// Every prediction of the scenario's account, from the database: the drain checks them all,
/// including any a create stored but whose answer was lost.
async fn accepted_ids(topology: &Topology) -> anyhow::Result<Vec<String>> {
    jobs(topology, bson::doc! { "kind": null }).await
}

/// Every training of the scenario's account.
async fn training_ids(topology: &Topology) -> anyhow::Result<Vec<String>> {
    jobs(topology, bson::doc! { "kind": "training" }).await
}

async fn jobs(topology: &Topology, mut filter: bson::Document) -> anyhow::Result<Vec<String>> {
    // The scenario's account only: a row may run another account beside it.
    let account = topology.setup.store.accounts().find_by_name("faults").await?.context("the account faults")?;
    filter.insert("account_id", account.id.as_str());
    let predictions = topology.setup.store.database().collection::<bson::Document>("predictions");
    let ids = predictions.distinct("_id", filter).await.context("listing the predictions")?;
    Ok(ids.into_iter().filter_map(|id| id.as_str().map(str::to_owned)).collect())
}
