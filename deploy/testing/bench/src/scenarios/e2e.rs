//! End to end through the three services as processes, under an open loop: predictions of
//! demo/echo are created at a fixed rate whatever the answers take (each with `Prefer: wait`
//! and a webhook for `completed` only). Each sample is timed from the start of its create
//! request to the client seeing `succeeded` (in the create answer, or by polling when the wait
//! ran out) and to the signed `completed` webhook arriving at the local receiver.
//!
//! After the fixed rates, the rate doubles for shorter phases until p99 passes one second,
//! anything fails, or `max_rate` is reached; then a few shorter phases bisect between the
//! highest rate that held and the lowest above it that did not (a fixed rate or the last
//! doubling), each once the backlog of the rate before it is worked off. The highest rate
//! that held is the sustainable rate (measured on the data the earlier phases left). Around each fixed phase the services' CPU, memory and MongoDB
//! commands are read, so the same run yields the cost per prediction.

use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};
use tokio::{task::JoinSet, time::Instant};

use harness::cluster::{Cluster, cost};
use harness::receiver::Receiver;
use harness::stats::{Samples, ms};

/// The highest rate a search for the sustained rate tries (doubling from 200/s); a search
/// that holds it reports it as "at least" this rate.
pub const SUSTAINED_SEARCH_CEILING: u64 = 3200;

/// The api's caps on held `Prefer: wait` creates, per replica and per key, for the open loop:
/// the load has one key standing for many clients, and each of its predictions waits in its
/// create rather than polling (at the defaults, 1,000 and 100, a stall of a few tens of
/// milliseconds at 2,000 a second sent the predictions past the per-key cap to poll every
/// 20 ms, and the polls' load kept the stall going).
pub const ENV: &[(&str, &str)] = &[("API_MAX_WAITS", "8000"), ("API_MAX_WAITS_PER_KEY", "8000")];

/// How long a client waits in `Prefer`, and in all, for its prediction to finish.
const PREFER_WAIT: &str = "wait=10";
pub const FINISH_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a client polls a prediction that has not ended.
const POLL_EVERY: Duration = Duration::from_millis(20);
/// How long the webhooks of a phase may trail its last answer.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(15);
/// How many rates are tried between the highest fixed rate that held and one that did not.
const BISECT_STEPS: usize = 3;
/// How long the search waits for the backlog of a rate that did not hold to be worked off.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(120);
/// The p99 above which a rate is not sustained.
const SUSTAINED_P99: Duration = Duration::from_secs(1);

/// Options of `bench sustained`.
#[derive(clap::Args)]
pub struct Options {
    /// How many searches, each on a fresh system.
    #[arg(long, default_value_t = 3)]
    searches: usize,
}

/// `bench sustained`: the standard set's searches for the sustained rate alone, each on a
/// fresh system, with every phase of each (the standard set keeps the first search's).
pub async fn run(options: Options) -> anyhow::Result<Value> {
    let mut searches = Vec::new();
    let mut rates = Vec::new();
    for n in 0..options.searches {
        let phases =
            super::on_fresh_system(ENV, async |cluster, receiver| measure(cluster, receiver, &search_plan()).await)
                .await?;
        let held = sustainable(&phases);
        println!("search {}: {}", n + 1, held.map_or("none held".into(), |r| format!("{r}/s")));
        for p in &phases {
            println!(
                "  {:>5}/s: {} failed ({}), p99 {:.1} ms to succeeded, {:.1} ms to the webhook, {} webhooks missing",
                p.rate,
                p.failed,
                p.first_error.as_deref().unwrap_or("-"),
                ms(p.client.percentile(99.0)),
                ms(p.webhook.percentile(99.0)),
                p.missing_webhooks
            );
        }
        rates.push(held);
        searches.push(
            json!({"highest_sustained_rate": held, "phases": phases.iter().map(Phase::json).collect::<Vec<_>>()}),
        );
    }
    Ok(
        json!({"scenario": "sustained", "highest_sustained_rate_of_each_search": rates, "median": median(&rates), "searches": searches}),
    )
}

/// A search for the sustained rate: 200/s, then doubling up to [`SUSTAINED_SEARCH_CEILING`]
/// and bisecting, 10 s a phase.
pub fn search_plan() -> Plan {
    Plan { fixed: vec![(200, 10)], ramp_seconds: 10, max_rate: SUSTAINED_SEARCH_CEILING }
}

/// The open-loop settings.
pub struct Plan {
    /// Fixed phases: (predictions per second, seconds); their costs are measured.
    pub fixed: Vec<(u64, u64)>,
    /// Seconds of each phase of the ramp after the fixed ones.
    pub ramp_seconds: u64,
    /// The ramp stops after this rate.
    pub max_rate: u64,
}

/// One phase's outcome.
pub struct Phase {
    rate: u64,
    seconds: u64,
    offered: usize,
    failed: usize,
    first_error: Option<String>,
    missing_webhooks: usize,
    client: Samples,
    webhook: Samples,
    cost: Option<Value>,
}

impl Phase {
    /// Whether every prediction succeeded and was announced within a p99 of one second.
    pub fn sustained(&self) -> bool {
        self.failed == 0
            && self.missing_webhooks == 0
            && self.client.percentile(99.0) <= SUSTAINED_P99
            && self.webhook.percentile(99.0) <= SUSTAINED_P99
    }

    /// The phase as JSON.
    pub fn json(&self) -> Value {
        let p = |s: &Samples| json!({"p50_ms": ms(s.percentile(50.0)), "p95_ms": ms(s.percentile(95.0)), "p99_ms": ms(s.percentile(99.0))});
        json!({
            "rate_per_second": self.rate, "seconds": self.seconds, "offered": self.offered,
            "failed": self.failed, "first_error": self.first_error, "missing_webhooks": self.missing_webhooks,
            "create_to_succeeded": p(&self.client), "create_to_webhook": p(&self.webhook),
            "sustained": self.sustained(), "cost": self.cost,
        })
    }

    /// Offered rate, and the p50/p95/p99 of both latencies in milliseconds.
    pub fn row(&self) -> (u64, [f64; 3], [f64; 3]) {
        let p = |s: &Samples| [ms(s.percentile(50.0)), ms(s.percentile(95.0)), ms(s.percentile(99.0))];
        (self.rate, p(&self.client), p(&self.webhook))
    }

    /// The measured cost, for fixed phases.
    pub fn cost(&self) -> Option<&Value> {
        self.cost.as_ref()
    }

    /// Takes the MongoDB commands of `counted`, the same phase run with the services' command
    /// monitoring on, into this phase's cost, measured as deployed: the CPU stays this run's
    /// (monitoring copies every command and reply, which is CPU a deployment does not spend),
    /// and the counted run's CPU is kept beside it for comparison.
    pub fn take_commands_from(&mut self, counted: &Phase) {
        let (Some(cost), Some(other)) = (self.cost.as_mut(), counted.cost.as_ref()) else { return };
        const COMMANDS: [&str; 3] =
            ["mongodb_writes_per_prediction", "mongodb_reads_per_prediction", "mongodb_commands_per_prediction"];
        for key in &COMMANDS[..2] {
            cost[*key] = other[*key].clone();
        }
        if let (Some(services), Some(others)) = (cost["services"].as_object_mut(), other["services"].as_object()) {
            for (name, service) in services.iter_mut() {
                for key in COMMANDS {
                    service[key] = others.get(name).map_or(Value::Null, |o| o[key].clone());
                }
            }
        }
        cost["commands_counted_in_another_run"] = json!(true);
        cost["cpu_us_per_prediction_with_commands_counted"] = other["cpu_us_per_prediction"].clone();
    }

    /// Predictions that failed or whose webhook did not arrive.
    pub fn lost(&self) -> usize {
        self.failed + self.missing_webhooks
    }
}

/// Runs the plan against `cluster` (api, notifier and at least one runner of demo/echo).
pub async fn measure(cluster: &mut Cluster, receiver: &Receiver, plan: &Plan) -> anyhow::Result<Vec<Phase>> {
    let http = reqwest::Client::builder().timeout(FINISH_TIMEOUT).build()?;
    // Warm up connections, caches and the runner's consumer.
    phase(cluster, &http, receiver, 20, 1).await?;
    let mut phases = Vec::new();
    for &(rate, seconds) in &plan.fixed {
        let before = cluster.snapshot().await?;
        let mut measured = phase(cluster, &http, receiver, rate, seconds).await?;
        tokio::time::sleep(Duration::from_secs(1)).await; // the last attempt records
        measured.cost = Some(cost(&before, &cluster.snapshot().await?, measured.offered));
        phases.push(measured);
    }
    let mut rate = plan.fixed.iter().map(|&(r, _)| r).max().unwrap_or(50);
    while phases.last().is_some_and(Phase::sustained) && rate * 2 <= plan.max_rate {
        rate *= 2;
        phases.push(phase(cluster, &http, receiver, rate, plan.ramp_seconds).await?);
    }
    // A rate that did not hold leaves a backlog; the next phase starts once it is worked off,
    // or it measures the backlog (before, every bisecting phase after an overload lost all
    // of its predictions to the earlier phases' queue).
    // Narrow down between the highest rate that held and the lowest above it that did not
    // (a fixed rate or the last of the doubling).
    if let Some(mut held) = sustainable(&phases)
        && let Some(mut failed) = lowest_failed_above(&phases, held)
    {
        for _ in 0..BISECT_STEPS {
            let Some(middle) = between(held, failed) else { break };
            if !cluster.drained(DRAIN_TIMEOUT).await? {
                println!("the backlog of {failed}/s was not worked off within {DRAIN_TIMEOUT:?}; search ended");
                break;
            }
            let measured = phase(cluster, &http, receiver, middle, plan.ramp_seconds).await?;
            if measured.sustained() {
                held = middle;
            } else {
                failed = middle;
            }
            phases.push(measured);
        }
    }
    Ok(phases)
}

/// The rate halfway between one that held and a higher one that did not, if there is one.
fn between(held: u64, failed: u64) -> Option<u64> {
    let middle = held + failed.saturating_sub(held) / 2;
    (middle > held).then_some(middle)
}

/// The lowest rate above `held` that did not hold, if one was tried.
fn lowest_failed_above(phases: &[Phase], held: u64) -> Option<u64> {
    phases.iter().filter(|p| !p.sustained() && p.rate > held).map(|p| p.rate).min()
}

/// The median of several searches' highest sustained rates (a search where none held counts
/// as 0); `None` without a search.
pub fn median(repeats: &[Option<u64>]) -> Option<u64> {
    let mut rates: Vec<u64> = repeats.iter().map(|r| r.unwrap_or(0)).collect();
    rates.sort_unstable();
    rates.get(rates.len() / 2).copied()
}

/// The highest rate that held, if any did.
pub fn sustainable(phases: &[Phase]) -> Option<u64> {
    phases.iter().filter(|p| p.sustained()).map(|p| p.rate).max()
}

async fn phase(
    cluster: &Cluster,
    http: &reqwest::Client,
    receiver: &Receiver,
    rate: u64,
    seconds: u64,
) -> anyhow::Result<Phase> {
    let total = (rate * seconds) as usize;
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = JoinSet::new();
    for n in 0..total {
        ticker.tick().await;
        let create = CreateRequest {
            http: http.clone(),
            base: cluster.base.clone(),
            key: cluster.key.clone(),
            hook: receiver.url.clone(),
        };
        tasks.spawn(create.run_to_completion(n));
    }
    let (mut succeeded, mut failed, mut first_error) = (Vec::new(), 0, None);
    while let Some(outcome) = tasks.join_next().await {
        match outcome? {
            Ok(done) => succeeded.push(done),
            Err(e) => {
                failed += 1;
                first_error.get_or_insert_with(|| format!("{e:#}"));
            }
        }
    }
    let deadline = Instant::now() + WEBHOOK_TIMEOUT;
    while Instant::now() < deadline && succeeded.iter().any(|(id, _, _)| receiver.completed_at(id).is_none()) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let webhooks: Vec<Duration> = succeeded
        .iter()
        .filter_map(|(id, started, _)| receiver.completed_at(id).map(|at| at.saturating_duration_since(*started)))
        .collect();
    Ok(Phase {
        rate,
        seconds,
        offered: total,
        failed,
        first_error,
        missing_webhooks: succeeded.len() - webhooks.len(),
        client: Samples::new(succeeded.iter().map(|(_, _, latency)| *latency).collect()),
        webhook: Samples::new(webhooks),
        cost: None,
    })
}

/// One client's create, then its wait for the outcome.
struct CreateRequest {
    http: reqwest::Client,
    base: String,
    key: String,
    hook: String,
}

impl CreateRequest {
    /// The prediction's id, when its request started, and how long until it was seen succeeded.
    async fn run_to_completion(self, n: usize) -> anyhow::Result<(String, Instant, Duration)> {
        let started = Instant::now();
        let response = send_create(&self.http, &self.base, &self.key, &self.hook, &format!("e2e {n}")).await?;
        anyhow::ensure!(response.status().is_success(), "create answered {}", response.status());
        let (id, elapsed) = follow(&self.http, &self.base, &self.key, response.json().await?, started).await?;
        Ok((id, started, elapsed))
    }
}

/// The end-to-end client's create: demo/echo with `prompt`, `Prefer: wait`, and a webhook to
/// `hook` for `completed` only.
pub async fn send_create(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    hook: &str,
    prompt: &str,
) -> reqwest::Result<reqwest::Response> {
    let body = json!({"input": {"prompt": prompt}, "webhook": hook, "webhook_events_filter": ["completed"]});
    http.post(format!("{base}/v1/models/demo/echo/predictions"))
        .bearer_auth(key)
        .header("prefer", PREFER_WAIT)
        .json(&body)
        .send()
        .await
}

/// Polls the prediction a create answered with until it ends (every 20 ms; after a 503 or
/// 429, after its `Retry-After`, as a well-behaved client does); its id and how long after
/// `started` it was seen `succeeded`.
pub async fn follow(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    mut prediction: Value,
    started: Instant,
) -> anyhow::Result<(String, Duration)> {
    let id = prediction["id"].as_str().context("the answer has no id")?.to_owned();
    let mut pause = POLL_EVERY;
    while matches!(prediction["status"].as_str(), Some("starting" | "processing")) {
        anyhow::ensure!(started.elapsed() < FINISH_TIMEOUT, "{id} did not finish within {FINISH_TIMEOUT:?}");
        tokio::time::sleep(pause).await;
        let read = http.get(format!("{base}/v1/predictions/{id}")).bearer_auth(key).send().await?;
        if matches!(read.status().as_u16(), 429 | 503) {
            let seconds = read.headers().get("retry-after").and_then(|v| v.to_str().ok()?.parse().ok()).unwrap_or(1);
            pause = Duration::from_secs(seconds);
            continue;
        }
        pause = POLL_EVERY;
        prediction = read.error_for_status()?.json().await?;
    }
    anyhow::ensure!(prediction["status"] == "succeeded", "{id} ended {}", prediction["status"]);
    Ok((id, started.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_tries_halfway_between_a_rate_that_held_and_one_that_did_not() {
        assert_eq!(between(50, 200), Some(125));
        assert_eq!(between(125, 200), Some(162));
        assert_eq!(between(50, 51), None, "nothing left between them");
        assert_eq!(between(200, 50), None, "a failed rate below the held one ends the search");
    }

    fn phase_at(rate: u64, p99: Duration) -> Phase {
        let samples = || Samples::new(vec![p99; 10]);
        Phase {
            rate,
            seconds: 10,
            offered: 10,
            failed: 0,
            first_error: None,
            missing_webhooks: 0,
            client: samples(),
            webhook: samples(),
            cost: None,
        }
    }

    #[test]
    fn the_search_narrows_below_the_lowest_failure_above_the_best_rate_that_held() {
        let (fast, slow) = (Duration::from_millis(20), Duration::from_secs(3));
        // 50 and 200 held, the doubling to 400 did not: bisect 200..400.
        let ramp = [phase_at(50, fast), phase_at(200, fast), phase_at(400, slow)];
        assert_eq!(sustainable(&ramp), Some(200));
        assert_eq!(lowest_failed_above(&ramp, 200), Some(400));
        // 200 failed at once: bisect 50..200, ignoring failures below what held.
        let fixed = [phase_at(50, fast), phase_at(200, slow), phase_at(125, fast), phase_at(162, slow)];
        assert_eq!(sustainable(&fixed), Some(125));
        assert_eq!(lowest_failed_above(&fixed, 125), Some(162));
        assert_eq!(lowest_failed_above(&[phase_at(50, fast)], 50), None, "nothing failed: no search");
    }
}
