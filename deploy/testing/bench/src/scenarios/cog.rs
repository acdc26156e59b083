//! `bench cog`: the latency the service adds to a Cog model, and how soon a streaming user
//! sees a prediction move.
//!
//! - **Cog overhead**: the Cog echo fixture (`deploy/testing/bench/fixtures/cog/echo_async`, coglet
//!   0.23.1, 8 slots) is called (a) directly, a sync `POST /predictions`, and (b) through the
//!   whole system, a create with `Prefer: wait` to the api, answered when the prediction has
//!   ended (api, runner and notifier as processes). Each at 1 and 8 in flight, in alternating
//!   rounds so drift on the shared machine falls on both paths alike. What the service adds
//!   is the median over the rounds of each round's difference of the percentiles
//!   ([`added_by_rounds`]): one round's hiccup, on either path, moves one difference, not the
//!   figure (pooled, a 56 ms stall of the Cog server in one direct round once put the direct
//!   p99 above the service's and the added p99 at zero). At 1 in flight also (c) direct calls with a pause
//!   of [`IDLE_BETWEEN_CALLS`] after each: how much slower an idle Cog server answers, which
//!   is part of what the service adds (its model sits idle while the service does its part).
//!   Beside each path, how busy the machine's cores were while it ran ([`CpuTimes`]) and whose
//!   CPU it was, per prediction ([`ProcessCpu`]: services, MongoDB and NATS servers, the Cog
//!   server, the load tool). With more in flight than cores, the cores are the queue, and
//!   [`cpu_queue`] turns the CPU the service's path adds into the latency it explains.
//! - **First signs of life** for `demo/echo`, one at a time: create to the signed `start`
//!   webhook arriving, and create to the first `output` event of the prediction's SSE stream
//!   (`stream: true`, the stream opened as soon as the create answers).
//! - With `--traces`, where the time of a create with `Prefer: wait` goes: the same creates
//!   one at a time on a system that exports its spans to a sink here (see
//!   [`otlp_sink::waterfall`]), each span's median start and length.

use std::{collections::BTreeMap, path::Path, time::Duration};

use anyhow::Context;
use futures::future::try_join_all;
use http::Method;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::measure::machine_cpu::{CpuTimes, ProcessCpu, Role};
use harness::cluster::Cluster;
use harness::cog_server::CogServer;
use harness::load_client::{Connection, Template};
use harness::otlp_sink::{self, OtlpSink};
use harness::receiver::Receiver;
use harness::stats::{Samples, ms};

/// The overhead targets: p50 and p99 added over a direct call.
pub const TARGET_ADDED_P50: Duration = Duration::from_millis(2);
/// See [`TARGET_ADDED_P50`].
pub const TARGET_ADDED_P99: Duration = Duration::from_millis(5);
/// Concurrency levels measured.
const LEVELS: [usize; 2] = [1, 8];
/// Alternating rounds per level (odd, so the median of their differences is one of them).
const ROUNDS: usize = 5;
/// The pause between the direct calls of the idle path: about what the service spends around
/// each model call, during which a Cog server called through it sits idle.
const IDLE_BETWEEN_CALLS: Duration = Duration::from_millis(4);
/// Predictions per client of the warm-up both paths get at 8 in flight before anything is
/// measured: the MongoDB stand-in is a JVM, and a standalone `bench cog` on fresh servers
/// measured its JIT compiler (the stand-in's CPU per prediction 3-5 ms at 1 in flight, against
/// about 1 ms once warm); inside the standard set earlier steps warm it.
const WARM_UP_PER_CLIENT: usize = 100;
/// The Cog echo fixture of the benchmarks.
const FIXTURE: &str = "deploy/testing/bench/fixtures/cog/echo_async";
/// The Cog model's input.
const INPUT: &str = r#"{"input":{"prompt":"hello","repeat":2}}"#;

/// Options of `bench cog`.
#[derive(clap::Args)]
pub struct Options {
    /// Predictions per path and level.
    #[arg(long, default_value_t = 400)]
    samples: usize,
    /// Also break one create down by the spans the services export.
    #[arg(long)]
    traces: bool,
}

/// `bench cog`
pub async fn run(options: Options) -> anyhow::Result<Value> {
    let mut measured = measure(options.samples).await?;
    if options.traces {
        measured["phases"] = phases(options.samples / 2).await?;
    }
    println!("{}", table(&measured));
    Ok(measured)
}

/// Starts a system with a Cog echo model and measures; the JSON has `levels` and `first_signs`.
pub async fn measure(samples: usize) -> anyhow::Result<Value> {
    let cog = CogServer::start(Path::new(FIXTURE), 8).await?;
    on_system(&cog, &[], async |cluster, stop| {
        warm_up(cluster, &cog.base).await?;
        let mut levels = Vec::new();
        for in_flight in LEVELS {
            levels.push(overhead(cluster, &cog.base, in_flight, samples).await?);
        }
        let receiver = Receiver::start(cluster.secret.clone(), stop).await?;
        let first_signs = first_signs(cluster, &receiver, samples / 2).await?;
        anyhow::ensure!(receiver.bad_signatures() == 0, "webhooks with bad signatures");
        Ok(json!({"fixture": "echo_async (coglet 0.23.1, 8 slots)", "levels": levels, "first_signs": first_signs}))
    })
    .await
}

/// The median start and length of every span of a create with `Prefer: wait` to the Cog
/// model, one at a time, `samples` of them, on a system that exports its spans.
pub async fn phases(samples: usize) -> anyhow::Result<Value> {
    let cog = CogServer::start(Path::new(FIXTURE), 8).await?;
    let stop = CancellationToken::new();
    let sink = OtlpSink::keeping_spans(stop.clone()).await?;
    // `RUST_LOG` filters spans as well as logs: the services' spans are at `info`.
    let export = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", sink.endpoint.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("RUST_LOG", "info"),
    ];
    let traced = on_system(&cog, &export, async |cluster, _| {
        let (_, through) = paths(cluster, &cog.base)?;
        closed_loop(&cluster.base, &through, 1, samples, Expect::Service, Duration::ZERO).await
    })
    .await;
    // The services flush their spans as they stop, which `on_system` waits for.
    let spans = sink.spans();
    stop.cancel();
    let (latencies, _) = traced?;
    let phases = otlp_sink::waterfall(&spans, "request", "model_call");
    let p50 = ms(Samples::new(latencies).percentile(50.0));
    let spans: Vec<Value> = phases
        .iter()
        .map(|p| json!({"span": p.name, "start_us": p.start_us.round(), "length_us": p.length_us.round(), "traces": p.traces}))
        .collect();
    Ok(json!({"samples": samples, "p50_ms_while_traced": p50, "spans": spans}))
}

/// Runs `measure` on a fresh system (api, notifier, a runner serving `demo/echo` and the Cog
/// model at `cog`, with `extra` settings) and stops it whatever the outcome.
async fn on_system<T>(
    cog: &CogServer,
    extra: &[(&str, &str)],
    measure: impl AsyncFnOnce(&Cluster, CancellationToken) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let mut cluster = Cluster::start(extra, true).await?;
    let stop = CancellationToken::new();
    let outcome = async {
        let models = format!("acme/echo={}", cog.base);
        let runner =
            [("RUNNER_MODELS", "demo/echo,acme/echo"), ("RUNNER_COG", models.as_str()), ("RUNNER_CONCURRENCY", "8")];
        cluster.add_runners(1, &runner).await?;
        measure(&cluster, stop.clone()).await
    }
    .await;
    stop.cancel();
    cluster.stop().await?;
    outcome
}

/// The two paths' requests: a sync `POST /predictions` to the Cog server, and a create with
/// `Prefer: wait` to the api.
fn paths(cluster: &Cluster, cog: &str) -> anyhow::Result<(Template, Template)> {
    let direct = Template::new(Method::POST, cog, "/predictions", "unused")?.json(INPUT);
    let through = Template::new(Method::POST, &cluster.base, "/v1/models/acme/echo/predictions", &cluster.key)?
        .json(INPUT)
        .header("prefer", "wait=30")?;
    Ok((direct, through))
}

/// Both paths at 8 in flight, [`WARM_UP_PER_CLIENT`] predictions per client, not counted.
async fn warm_up(cluster: &Cluster, cog: &str) -> anyhow::Result<()> {
    let (direct, through) = paths(cluster, cog)?;
    closed_loop(cog, &direct, 8, WARM_UP_PER_CLIENT, Expect::Cog, Duration::ZERO).await?;
    closed_loop(&cluster.base, &through, 8, WARM_UP_PER_CLIENT, Expect::Service, Duration::ZERO).await?;
    Ok(())
}

/// Direct and through-the-service latencies at `in_flight`, `samples` of each.
async fn overhead(cluster: &Cluster, cog: &str, in_flight: usize, samples: usize) -> anyhow::Result<Value> {
    let (direct, through) = paths(cluster, cog)?;
    let per_round = (samples / ROUNDS / in_flight).max(1);
    let (mut direct_rounds, mut through_rounds, mut idle_samples, mut conflicts) =
        (Vec::new(), Vec::new(), Vec::new(), 0);
    // A warm-up round of each, not counted.
    closed_loop(cog, &direct, in_flight, 5, Expect::Cog, Duration::ZERO).await?;
    closed_loop(&cluster.base, &through, in_flight, 5, Expect::Service, Duration::ZERO).await?;
    let (mut direct_cpu, mut through_cpu) = (CpuTimes::default(), CpuTimes::default());
    let (mut direct_by_role, mut through_by_role) = (BTreeMap::new(), BTreeMap::new());
    for _ in 0..ROUNDS {
        let (start, start_by_role) = (CpuTimes::now()?, ProcessCpu::now()?);
        let (d, c) = closed_loop(cog, &direct, in_flight, per_round, Expect::Cog, Duration::ZERO).await?;
        let (middle, middle_by_role) = (CpuTimes::now()?, ProcessCpu::now()?);
        direct_rounds.push(d);
        conflicts += c;
        let (t, _) =
            closed_loop(&cluster.base, &through, in_flight, per_round, Expect::Service, Duration::ZERO).await?;
        through_cpu = through_cpu.plus(CpuTimes::now()?.since(middle));
        direct_cpu = direct_cpu.plus(middle.since(start));
        add_seconds(&mut through_by_role, ProcessCpu::now()?.since(&middle_by_role));
        add_seconds(&mut direct_by_role, middle_by_role.since(&start_by_role));
        through_rounds.push(t);
        if in_flight == 1 {
            let (i, c) = closed_loop(cog, &direct, 1, per_round, Expect::Cog, IDLE_BETWEEN_CALLS).await?;
            idle_samples.extend(i);
            conflicts += c;
        }
    }
    let added = |p: f64| added_by_rounds(&direct_rounds, &through_rounds, p);
    let (direct, through) = (Samples::new(direct_rounds.concat()), Samples::new(through_rounds.concat()));
    let idle = (!idle_samples.is_empty()).then(|| {
        let idle = Samples::new(idle_samples);
        json!({"pause_ms": ms(IDLE_BETWEEN_CALLS), "p50_ms": ms(idle.percentile(50.0)), "p99_ms": ms(idle.percentile(99.0))})
    });
    Ok(json!({
        "direct_after_idle": idle,
        "in_flight": in_flight,
        "samples": direct.len(),
        "direct": {"p50_ms": ms(direct.percentile(50.0)), "p99_ms": ms(direct.percentile(99.0))},
        "through_service": {"p50_ms": ms(through.percentile(50.0)), "p99_ms": ms(through.percentile(99.0))},
        "rounds": ROUNDS,
        "added_p50_ms": added(50.0),
        "added_p99_ms": added(99.0),
        "direct_409s": conflicts,
        "machine_cpu_busy": {"direct": direct_cpu.busy_share(), "through_service": through_cpu.busy_share()},
        "machine_cpu_ms_per_prediction": {
            "direct": per_prediction(direct_cpu, direct.len()),
            "through_service": per_prediction(through_cpu, through.len()),
        },
        "cpu_ms_per_prediction_by_process": {
            "direct": by_process(&direct_by_role, direct.len()),
            "through_service": by_process(&through_by_role, through.len()),
        },
        "cpu_queue": cpu_queue(
            in_flight,
            per_prediction(direct_cpu, direct.len()),
            per_prediction(through_cpu, through.len()),
            &by_process(&through_by_role, through.len()),
        ),
    }))
}

/// What the service adds at the `p`-th percentile, in milliseconds: the median over the rounds
/// of the round's through-the-service percentile minus its direct one (signed: a round whose
/// direct calls stalled counts as the negative difference it is, and is outvoted).
fn added_by_rounds(direct: &[Vec<Duration>], through: &[Vec<Duration>], p: f64) -> f64 {
    let mut differences: Vec<f64> = direct
        .iter()
        .zip(through)
        .map(|(d, t)| {
            let at = |samples: &Vec<Duration>| ms(Samples::new(samples.clone()).percentile(p));
            at(t) - at(d)
        })
        .collect();
    if differences.is_empty() {
        return 0.0;
    }
    differences.sort_by(f64::total_cmp);
    let n = differences.len();
    let median = if n % 2 == 1 { differences[n / 2] } else { (differences[n / 2 - 1] + differences[n / 2]) / 2.0 };
    (median * 1000.0).round() / 1000.0
}

/// With more predictions in flight than cores, the cores are the queue: each prediction's
/// turn comes after `in_flight / cores` others' CPU, so every millisecond of CPU a path adds
/// per prediction adds about `in_flight / cores` ms to its latency. What that model makes of
/// the CPU the service's path adds, and of the MongoDB and NATS servers' part of it alone
/// (the calls the contract requires, whatever the services do); `null` at lower levels.
fn cpu_queue(in_flight: usize, direct_ms: Option<f64>, through_ms: Option<f64>, through_by_process: &Value) -> Value {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let (Some(direct_ms), Some(through_ms)) = (direct_ms, through_ms) else { return Value::Null };
    if in_flight <= cores {
        return Value::Null;
    }
    let part = |roles: &[&str]| roles.iter().filter_map(|r| through_by_process[*r].as_f64()).sum::<f64>();
    let (services, servers) = (part(&["api", "runner", "notifier"]), part(&["mongodb", "nats"]));
    let queue = in_flight as f64 / cores as f64;
    let round = |v: f64| (v * 100.0).round() / 100.0;
    json!({
        "cores": cores,
        "added_cpu_ms_per_prediction": round(through_ms - direct_ms),
        "services_cpu_ms_per_prediction": round(services),
        "servers_cpu_ms_per_prediction": round(servers),
        "added_p50_explained_ms": round(queue * (through_ms - direct_ms)),
        "added_p50_from_servers_alone_ms": round(queue * servers),
    })
}

/// Adds one span's CPU seconds per role to a running total.
fn add_seconds(total: &mut BTreeMap<Role, f64>, span: BTreeMap<Role, f64>) {
    for (role, seconds) in span {
        *total.entry(role).or_insert(0.0) += seconds;
    }
}

/// Each role's CPU per prediction, in milliseconds.
fn by_process(seconds: &BTreeMap<Role, f64>, predictions: usize) -> Value {
    let per = |s: f64| (1000.0 * s / predictions.max(1) as f64 * 100.0).round() / 100.0;
    seconds.iter().map(|(role, s)| (role.name().to_owned(), json!(per(*s)))).collect::<serde_json::Map<_, _>>().into()
}

/// The machine's busy CPU time per prediction of a path, in milliseconds (every process, the
/// load tool's share included).
fn per_prediction(cpu: CpuTimes, predictions: usize) -> Option<f64> {
    (predictions > 0).then(|| (1000.0 * cpu.busy_seconds() / predictions as f64 * 100.0).round() / 100.0)
}

/// What a successful answer looks like on each path.
#[derive(Clone, Copy)]
enum Expect {
    /// The Cog server: 200 (a 409 is retried at once and counted).
    Cog,
    /// The api: 201 with the prediction succeeded.
    Service,
}

/// `clients` closed-loop clients sending `template` `each` times, each pausing `pause` after
/// every answer; the latencies, and 409s.
async fn closed_loop(
    base: &str,
    template: &Template,
    clients: usize,
    each: usize,
    expect: Expect,
    pause: Duration,
) -> anyhow::Result<(Vec<Duration>, usize)> {
    let client = async |mut connection: Connection| {
        let (mut latencies, mut conflicts) = (Vec::with_capacity(each), 0);
        for _ in 0..each {
            let started = Instant::now();
            loop {
                let (status, body) = connection.send(template).await?;
                match expect {
                    Expect::Cog if status == 409 => conflicts += 1,
                    Expect::Cog => {
                        anyhow::ensure!(status == 200, "the Cog server answered {status}");
                        break;
                    }
                    Expect::Service => {
                        anyhow::ensure!(status == 201, "the create answered {status}");
                        let prediction: Value = serde_json::from_slice(&body)?;
                        anyhow::ensure!(prediction["status"] == "succeeded", "not ended in the wait: {prediction}");
                        break;
                    }
                }
            }
            latencies.push(started.elapsed());
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
        anyhow::Ok((latencies, conflicts))
    };
    let connections = try_join_all((0..clients).map(|_| Connection::open(base))).await?;
    let results = try_join_all(connections.into_iter().map(client)).await?;
    Ok(results.into_iter().fold((Vec::new(), 0), |(mut all, c), (l, n)| {
        all.extend(l);
        (all, c + n)
    }))
}

/// Create-to-`start`-webhook and create-to-first-SSE-`output` of `demo/echo`, one at a time.
async fn first_signs(cluster: &Cluster, receiver: &Receiver, samples: usize) -> anyhow::Result<Value> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let create_url = format!("{}/v1/models/demo/echo/predictions", cluster.base);
    let (mut to_start, mut to_output) = (Vec::new(), Vec::new());
    for n in 0..samples + 10 {
        let body = json!({"input": {"prompt": "first", "repeat": 3}, "webhook": receiver.url,
                          "webhook_events_filter": ["start"], "stream": true});
        let started = Instant::now();
        let created: Value = http
            .post(&create_url)
            .bearer_auth(&cluster.key)
            .json(&body)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let id = created["id"].as_str().context("the create has no id")?.to_owned();
        let stream = created["urls"]["stream"].as_str().context("no urls.stream")?;
        let mut events = http.get(stream).header("accept", "text/event-stream").send().await?.error_for_status()?;
        let mut seen = String::new();
        let first_output = loop {
            let chunk = tokio::time::timeout(Duration::from_secs(10), events.chunk())
                .await
                .context("no SSE event within 10 s")??
                .context("the stream ended before any output")?;
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains("event: output") {
                break started.elapsed();
            }
        };
        drop(events);
        let start_webhook = async {
            loop {
                if let Some(at) = receiver.started_at(&id) {
                    return at;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        };
        let at = tokio::time::timeout(Duration::from_secs(10), start_webhook).await.context("no start webhook")?;
        if n >= 10 {
            to_output.push(first_output);
            to_start.push(at.duration_since(started));
        }
    }
    let (to_start, to_output) = (Samples::new(to_start), Samples::new(to_output));
    Ok(json!({
        "samples": to_start.len(),
        "create_to_start_webhook": {"p50_ms": ms(to_start.percentile(50.0)), "p99_ms": ms(to_start.percentile(99.0))},
        "create_to_first_sse_output": {"p50_ms": ms(to_output.percentile(50.0)), "p99_ms": ms(to_output.percentile(99.0))},
    }))
}

/// The Markdown table of a measurement.
pub fn table(measured: &Value) -> String {
    let mut out = format!(
        "Cog overhead ({}): direct sync `POST /predictions` against a create with `Prefer: wait` through api, runner and notifier\n\n\
         | in flight | direct p50 | p99 | through the service p50 | p99 | added p50 (target < {} ms) | added p99 (target < {} ms) |\n|---|---|---|---|---|---|---|\n",
        measured["fixture"].as_str().unwrap_or_default(),
        ms(TARGET_ADDED_P50),
        ms(TARGET_ADDED_P99),
    );
    for level in measured["levels"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "| {} | {} ms | {} ms | {} ms | {} ms | {} ms | {} ms |\n",
            level["in_flight"],
            level["direct"]["p50_ms"],
            level["direct"]["p99_ms"],
            level["through_service"]["p50_ms"],
            level["through_service"]["p99_ms"],
            level["added_p50_ms"],
            level["added_p99_ms"],
        ));
    }
    out.push_str(&format!(
        "\nThe paths' percentiles pool {} alternating rounds; what the service adds is the median over the rounds of each round's difference.\n",
        measured["levels"][0]["rounds"]
    ));
    out.push_str("\nThe machine's CPUs busy (all processes, all cores) while each path ran:");
    for level in measured["levels"].as_array().into_iter().flatten() {
        let (busy, each) = (&level["machine_cpu_busy"], &level["machine_cpu_ms_per_prediction"]);
        let share = |path: &str| match (busy[path].as_f64(), each[path].as_f64()) {
            (Some(share), Some(each)) => format!("{:.0} % ({each} ms of CPU per prediction)", 100.0 * share),
            _ => "-".to_owned(),
        };
        out.push_str(&format!(
            " {} in flight: direct {}, through the service {};",
            level["in_flight"],
            share("direct"),
            share("through_service")
        ));
    }
    out.push('\n');
    out.push_str(&by_process_table(measured));
    for level in measured["levels"].as_array().into_iter().flatten() {
        let queue = &level["cpu_queue"];
        if queue.is_object() {
            out.push_str(&format!(
                "\nAt {} in flight on {} cores the cores are the queue: each ms of CPU per prediction adds about {} / {} ms of latency. \
                 The service's path adds {} ms of CPU per prediction (services {} ms, MongoDB and NATS servers {} ms), \
                 which explains +{} ms at p50; the servers' part alone, +{} ms.\n",
                level["in_flight"], queue["cores"], level["in_flight"], queue["cores"],
                queue["added_cpu_ms_per_prediction"], queue["services_cpu_ms_per_prediction"], queue["servers_cpu_ms_per_prediction"],
                queue["added_p50_explained_ms"], queue["added_p50_from_servers_alone_ms"],
            ));
        }
    }
    for level in measured["levels"].as_array().into_iter().flatten() {
        let idle = &level["direct_after_idle"];
        if idle.is_object() {
            out.push_str(&format!(
                "\nDirect calls {} ms apart ({} in flight; the Cog server idle between them, as it is while the service does its part): p50 {} ms, p99 {} ms\n",
                idle["pause_ms"], level["in_flight"], idle["p50_ms"], idle["p99_ms"]
            ));
        }
    }
    let first = &measured["first_signs"];
    out.push_str(&format!(
        "\nFirst signs of life, demo/echo, one at a time ({} samples)\n\n| from the create to | p50 | p99 |\n|---|---|---|\n\
         | the signed `start` webhook | {} ms | {} ms |\n| the first SSE `output` event | {} ms | {} ms |\n",
        first["samples"],
        first["create_to_start_webhook"]["p50_ms"],
        first["create_to_start_webhook"]["p99_ms"],
        first["create_to_first_sse_output"]["p50_ms"],
        first["create_to_first_sse_output"]["p99_ms"],
    ));
    if let Some(spans) = measured["phases"]["spans"].as_array() {
        out.push_str(&format!(
            "\nWhere a create with `Prefer: wait` goes (one at a time, {} traced, p50 {} ms while traced): each span's median start after the api's `request` span began, and its median length\n\n| service / span | starts at | lasts |\n|---|---|---|\n",
            measured["phases"]["samples"], measured["phases"]["p50_ms_while_traced"]
        ));
        for span in spans {
            out.push_str(&format!(
                "| {} | {} µs | {} µs |\n",
                span["span"].as_str().unwrap_or_default(),
                span["start_us"],
                span["length_us"]
            ));
        }
    }
    out
}

/// Whose CPU each path used, per prediction, at each level.
fn by_process_table(measured: &Value) -> String {
    let levels: Vec<&Value> = measured["levels"].as_array().into_iter().flatten().collect();
    let roles = ["api", "runner", "notifier", "mongodb", "nats", "cog", "load_tool", "other"];
    let mut out = String::from(
        "\nCPU per prediction by process (ms; `mongodb` is the server, the stand-in's JVM when local)\n\n| path | in flight |",
    );
    roles.iter().for_each(|r| out.push_str(&format!(" {r} |")));
    out.push_str(&format!("\n|---|---|{}\n", "---|".repeat(roles.len())));
    for path in ["direct", "through_service"] {
        for level in &levels {
            let cpu = &level["cpu_ms_per_prediction_by_process"][path];
            out.push_str(&format!("| {path} | {} |", level["in_flight"]));
            roles.iter().for_each(|r| out.push_str(&format!(" {} |", cpu[r].as_f64().unwrap_or(0.0))));
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_queue_scales_added_cpu_by_predictions_per_core() {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let in_flight = 4 * cores;
        let by_process = json!({"api": 0.2, "runner": 0.3, "notifier": 0.1, "mongodb": 0.4, "nats": 0.5, "cog": 1.0});
        let queue = cpu_queue(in_flight, Some(1.0), Some(2.5), &by_process);
        assert_eq!(queue["added_cpu_ms_per_prediction"], 1.5);
        assert_eq!(queue["services_cpu_ms_per_prediction"], 0.6);
        assert_eq!(queue["servers_cpu_ms_per_prediction"], 0.9);
        assert_eq!(queue["added_p50_explained_ms"], 6.0, "1.5 ms of CPU behind 4 others' per core");
        assert_eq!(queue["added_p50_from_servers_alone_ms"], 3.6);
        assert!(cpu_queue(cores, Some(1.0), Some(2.5), &by_process).is_null(), "no queue for CPU");
        assert!(cpu_queue(in_flight, None, Some(2.5), &by_process).is_null(), "nothing measured");
    }

    #[test]
    fn one_rounds_stall_on_either_path_does_not_move_what_the_service_adds() {
        let round = |base: u64, stall: u64| -> Vec<Duration> {
            (0..100).map(|i| Duration::from_micros(if i >= 98 { stall } else { base + i })).collect()
        };
        let direct = vec![round(1000, 1500), round(1000, 56_000), round(1000, 1500)];
        let through = vec![round(3000, 3500), round(3000, 3500), round(3000, 40_000)];
        assert_eq!(added_by_rounds(&direct, &through, 50.0), 2.0);
        assert_eq!(added_by_rounds(&direct, &through, 99.0), 2.0, "the stalled rounds are outvoted");
        assert_eq!(added_by_rounds(&direct[..2], &through[..2], 99.0), -25.25, "even rounds: the middle two");
        assert_eq!(added_by_rounds(&[], &[], 50.0), 0.0);
    }

    #[test]
    fn cpu_by_process_is_per_prediction_in_milliseconds() {
        let seconds = BTreeMap::from([(Role::Mongodb, 0.5), (Role::Api, 0.25)]);
        assert_eq!(by_process(&seconds, 1000), json!({"api": 0.25, "mongodb": 0.5}));
    }
}
