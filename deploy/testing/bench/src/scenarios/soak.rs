//! `bench soak`: a day of real use against what `deploy/local/up` starts (the embedded
//! default: the MongoDB stand-in on its H2 file, NATS, S3Proxy, the three services as `up`
//! builds them and its Cog models). `deploy/testing/bench/soak` starts such an `up` with a state
//! directory of its own, runs this, then stops `up` and times its restart on what the day left.
//!
//! Three kinds of prediction, each spread evenly over `--seconds` and all three at once, each
//! with a webhook for its `completed` event to a receiver that checks signatures:
//! - 20,000 `demo/echo` of a 10 KB prompt (10 KB in, 10 KB out);
//! - 2,000 `demo/echo` of a 900 KB prompt (900 KB in, 900 KB out: both kept in the file store);
//! - 200 `acme/images` of one 20 MB file (a real Cog model, the file streamed to the store).
//!
//! The soak makes its own key of the account with room for the day's pace (a service key; a
//! new key's default of 600 creates a minute is below it). Every create is followed by a read of what it made. Measured: each kind's create and read
//! latency (p50, p99), refusals of creates and reads (429/503, sent again after `Retry-After`), `/ready` every half
//! second from the first create to the end (any answer but 200 within 2 s counts), the
//! stand-in's resident memory every second, and at the end every prediction read once more:
//! succeeded, its output whole (the echo's length; every tenth 20 MB file downloaded).
//! `--scale` shrinks the day for a quick try.

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use anyhow::Context;
use futures::{StreamExt, stream::FuturesUnordered};
use serde_json::{Value, json};
use tokio::time::{Instant, MissedTickBehavior, interval, sleep, timeout};
use tokio_util::sync::CancellationToken;

use harness::receiver::Receiver;
use harness::stats::{Samples, ms};

/// Options of `bench soak`.
#[derive(clap::Args)]
pub struct Options {
    /// The state directory of the running `up` (`UP_STATE_DIR`): its `env` file names the
    /// base URL and admin key, its `data/mongo.h2` the stand-in's file.
    #[arg(long)]
    state: PathBuf,
    /// The share of the day to run: 1.0 is 20,000 + 2,000 + 200 predictions.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Seconds over which each kind's creates are spread.
    #[arg(long, default_value_t = 600)]
    seconds: u64,
    /// Seconds to wait, after the last create, for the last `completed` webhook.
    #[arg(long, default_value_t = 600)]
    drain: u64,
    /// The kinds to run (`10kb`, `900kb`, `20mb`; all three when not given), to tell which
    /// one a figure of the day comes from.
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<String>,
}

/// The targets of the day (create p99, read p99, the stand-in's memory).
const CREATE_P99: Duration = Duration::from_millis(50);
const GET_P99: Duration = Duration::from_millis(10);
const STANDIN_RSS_MAX_MIB: f64 = 1536.0;

/// Creates a minute the soak's key may make (the day's pace is about 2,200).
const SERVICE_KEY_RPM: u32 = 100_000;

/// One kind of prediction of the day.
struct Kind {
    name: &'static str,
    /// Its name in `--kinds`.
    key: &'static str,
    count: u64,
    path: &'static str,
    input: Value,
    /// The length of the output on `/v1` (a string), when known: the echo's.
    output_len: Option<usize>,
    /// The size of the file the output names, for a file output.
    file_bytes: Option<u64>,
}

fn kinds(scale: f64) -> Vec<Kind> {
    let count = |n: f64| ((n * scale).round() as u64).max(1);
    let text = |bytes: usize| "soak ".repeat(bytes / 5);
    vec![
        Kind {
            name: "10 KB echo",
            key: "10kb",
            count: count(20_000.0),
            path: "/v1/models/demo/echo/predictions",
            input: json!({"prompt": text(10_000)}),
            output_len: Some(10_000),
            file_bytes: None,
        },
        Kind {
            name: "900 KB echo",
            key: "900kb",
            count: count(2_000.0),
            path: "/v1/models/demo/echo/predictions",
            input: json!({"prompt": text(900_000)}),
            output_len: Some(900_000),
            file_bytes: None,
        },
        Kind {
            name: "20 MB file",
            key: "20mb",
            count: count(200.0),
            path: "/v1/models/acme/images/predictions",
            input: json!({"count": 1, "kib": 20 * 1024}),
            output_len: None,
            file_bytes: Some(20 * 1024 * 1024),
        },
    ]
}

/// What one kind measured.
#[derive(Default)]
struct Measured {
    creates: Vec<Duration>,
    /// Each read: how long it took, and when it was sent (from the start of the day).
    gets: Vec<(Duration, Duration)>,
    refused: u64,
    reads_refused: u64,
    ids: Vec<String>,
}

/// The running system's address and key, from `up`'s env file.
struct System {
    base: String,
    key: String,
    http: reqwest::Client,
}

impl System {
    fn read(state: &Path) -> anyhow::Result<Self> {
        let env = std::fs::read_to_string(state.join("env")).context("no env file: is `up` running there?")?;
        let value = |name: &str| {
            env.lines()
                .find_map(|line| line.strip_prefix(&format!("{name}=")))
                .map(str::to_owned)
                .with_context(|| format!("{name} is not in the env file"))
        };
        let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).pool_max_idle_per_host(64).build()?;
        Ok(Self { base: value("BASE_URL")?, key: value("ADMIN_KEY")?, http })
    }

    /// The same system through a new key of the account with room for the day's rate (a
    /// team's service key: the default 600 creates a minute is below it).
    async fn with_service_key(self) -> anyhow::Result<Self> {
        let created: Value = self
            .http
            .post(format!("{}/v1/account/api-keys", self.base))
            .bearer_auth(&self.key)
            .json(&json!({"name": "soak", "rate_limit_rpm": SERVICE_KEY_RPM}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let key = created["key"].as_str().context("the new key's value")?.to_owned();
        Ok(Self { key, ..self })
    }

    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.get(format!("{}{path}", self.base)).bearer_auth(&self.key)
    }
}

/// Creates one prediction (sent again after `Retry-After` when refused) and reads it back.
async fn create_and_read(
    system: &System,
    kind: &Kind,
    body: &[u8],
    day: Instant,
    measured: &Mutex<Measured>,
) -> anyhow::Result<()> {
    let mut tries = 0;
    let id = loop {
        tries += 1;
        let started = Instant::now();
        let response = system
            .http
            .post(format!("{}{}", system.base, kind.path))
            .bearer_auth(&system.key)
            .header("content-type", "application/json")
            .body(body.to_vec())
            .send()
            .await?;
        let status = response.status().as_u16();
        let retry_after = retry_after(&response);
        let answer: Value = response.json().await.unwrap_or_default();
        let took = started.elapsed();
        lock(measured).creates.push(took);
        match status {
            201 => break answer["id"].as_str().context("a create answered no id")?.to_owned(),
            429 | 503 if tries < 20 => {
                lock(measured).refused += 1;
                sleep(Duration::from_secs(retry_after)).await;
            }
            _ => anyhow::bail!("a {} create answered {status}: {answer}", kind.name),
        }
    };
    let mut tries = 0;
    loop {
        tries += 1;
        let started = Instant::now();
        let response = system.get(&format!("/v1/predictions/{id}")).send().await?;
        let status = response.status().as_u16();
        let retry_after = retry_after(&response);
        response.bytes().await?;
        lock(measured).gets.push((started.elapsed(), started - day));
        match status {
            200 => break,
            429 | 503 if tries < 20 => {
                lock(measured).reads_refused += 1;
                sleep(Duration::from_secs(retry_after)).await;
            }
            _ => anyhow::bail!("reading {id} answered {status}"),
        }
    }
    lock(measured).ids.push(id);
    Ok(())
}

/// The seconds a refusal asks to wait (1 when it does not say).
fn retry_after(response: &reqwest::Response) -> u64 {
    response.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok()).unwrap_or(1)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `kind`'s creates spread evenly over `over`, each on schedule whether or not the ones
/// before have answered.
async fn run_kind(
    system: &System,
    kind: &Kind,
    webhook: &str,
    day: Instant,
    over: Duration,
) -> anyhow::Result<Measured> {
    let body =
        serde_json::to_vec(&json!({"input": kind.input, "webhook": webhook, "webhook_events_filter": ["completed"]}))?;
    let measured = Mutex::new(Measured::default());
    let mut ticks = interval(over / u32::try_from(kind.count)?);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let mut in_flight = FuturesUnordered::new();
    let mut issued = 0;
    while issued < kind.count || !in_flight.is_empty() {
        tokio::select! {
            _ = ticks.tick(), if issued < kind.count => {
                in_flight.push(create_and_read(system, kind, &body, day, &measured));
                issued += 1;
            }
            Some(done) = in_flight.next() => done?,
        }
    }
    drop(in_flight);
    Ok(measured.into_inner().unwrap_or_else(|e| e.into_inner()))
}

/// How long each of `reads` (see [`Measured::gets`]) took.
fn took(reads: &[(Duration, Duration)]) -> Vec<Duration> {
    reads.iter().map(|(took, _)| *took).collect()
}

/// The p99 of the reads sent in each minute of the day, in ms (`reads`: how long each took,
/// and when it was sent): tells a tail spread over the day from one that a part of it makes
/// (the first minute's warm-up, a burst).
fn p99_by_minute(reads: &[(Duration, Duration)]) -> Vec<f64> {
    let minutes = reads.iter().map(|(_, at)| at.as_secs() / 60 + 1).max().unwrap_or(0);
    (0..minutes)
        .map(|minute| {
            let in_it = reads.iter().filter(|(_, at)| at.as_secs() / 60 == minute).map(|(took, _)| *took).collect();
            (ms(Samples::new(in_it).percentile(99.0)) * 10.0).round() / 10.0
        })
        .collect()
}

/// `/ready` every half second until `stop`: (checks, failures, the first failure's answer).
async fn watch_ready(system: &System, stop: CancellationToken) -> (u64, u64, Option<String>) {
    let (mut checks, mut failures, mut first) = (0, 0, None);
    let mut ticks = interval(Duration::from_millis(500));
    while !stop.is_cancelled() {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.cancelled() => break,
        }
        checks += 1;
        let answer = timeout(Duration::from_secs(2), system.http.get(format!("{}/ready", system.base)).send()).await;
        let failed = match answer {
            Ok(Ok(response)) if response.status() == 200 => None,
            Ok(Ok(response)) => Some(format!("{}", response.status())),
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some("no answer within 2 s".into()),
        };
        if let Some(failed) = failed {
            failures += 1;
            first.get_or_insert(failed);
        }
    }
    (checks, failures, first)
}

/// The pid of the stand-in serving `h2` (its command line names the file).
fn standin_pid(h2: &Path) -> Option<u32> {
    let needle = h2.to_string_lossy().into_owned();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
        let cmdline = String::from_utf8_lossy(&cmdline);
        (cmdline.contains("mongo-standin") && cmdline.contains(&needle)).then_some(pid)
    })
}

/// Resident memory of `pid` in MiB.
fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.split_whitespace().next()?.parse().ok()?;
    Some(kib / 1024.0)
}

/// The stand-in's highest resident memory (MiB), sampled every second until `stop`.
async fn watch_rss(pid: u32, peak: Arc<AtomicU64>, stop: CancellationToken) {
    let mut ticks = interval(Duration::from_secs(1));
    while !stop.is_cancelled() {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.cancelled() => break,
        }
        if let Some(mib) = rss_mib(pid) {
            peak.fetch_max(mib.round() as u64, Ordering::Relaxed);
        }
    }
}

/// Every prediction of `kind` read once more: how many succeeded whole.
async fn verify(system: &System, kind: &Kind, ids: &[String]) -> anyhow::Result<(u64, Vec<String>)> {
    let checks = futures::stream::iter(ids.iter().enumerate())
        .map(|(n, id)| async move {
            let prediction: Value = system.get(&format!("/v1/predictions/{id}")).send().await?.json().await?;
            let status = prediction["status"].as_str().unwrap_or_default();
            let output = prediction["output"].as_str().unwrap_or_default();
            let whole = match (kind.output_len, kind.file_bytes) {
                (Some(len), _) => output.len() == len,
                (None, Some(bytes)) if n % 10 == 0 => {
                    // A list of one file: on `/v1`, its JSON text.
                    let urls: Vec<String> = serde_json::from_str(output).unwrap_or_default();
                    let url = urls.first().context("no file in the output")?;
                    let file = system.http.get(url).bearer_auth(&system.key).send().await?;
                    file.status() == 200 && file.bytes().await?.len() as u64 == bytes
                }
                _ => output.starts_with("[\"http"),
            };
            anyhow::Ok(if status == "succeeded" && whole { None } else { Some(format!("{id}: {status}")) })
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
    let mut bad = Vec::new();
    for check in checks {
        if let Some(b) = check? {
            bad.push(b);
        }
    }
    Ok((ids.len() as u64 - bad.len() as u64, bad))
}

/// The api's own timing of the day's reads (`GET /v1/predictions/{id}` answered 200, all three
/// kinds), from its `http_request_duration_seconds` histogram: each bucket's bound in ms and the
/// share of the reads that took longer. Beside the client's p99 it tells time spent in the api
/// (and the database behind it) from time spent on the way to it.
async fn server_reads(system: &System) -> anyhow::Result<Vec<(f64, f64)>> {
    let text = system.http.get(format!("{}/metrics", system.base)).send().await?.error_for_status()?.text().await?;
    let shares = read_shares(&text);
    anyhow::ensure!(!shares.is_empty(), "the api's /metrics timed no read of a prediction");
    Ok(shares)
}

/// From an OpenMetrics page, the bounds (ms) of the buckets of the api's successful reads of a
/// prediction, each with the share of the reads that took longer.
fn read_shares(metrics: &str) -> Vec<(f64, f64)> {
    let reads = [r#"method="GET""#, r#"route="/v1/predictions/{id}""#, r#"status="200""#];
    let buckets: Vec<(f64, f64)> = harness::cluster::series(metrics)
        .filter_map(|(name, count)| Some((name.strip_prefix("http_request_duration_seconds_bucket{")?, count)))
        .filter(|(labels, _)| reads.iter().all(|label| labels.contains(label)))
        .filter_map(|(labels, count)| {
            let le = labels.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse::<f64>().ok()? * 1000.0 };
            Some((le, count))
        })
        .collect();
    let total = buckets.iter().map(|(_, n)| *n).fold(0.0, f64::max);
    if total == 0.0 {
        return Vec::new();
    }
    buckets.into_iter().filter(|(le, _)| le.is_finite()).map(|(le, n)| (le, 1.0 - n / total)).collect()
}

/// `bench soak`
pub async fn run(options: Options) -> anyhow::Result<Value> {
    let system = System::read(&options.state)?;
    // The signing secret is the admin key's to read.
    let secret: Value = system.get("/v1/webhooks/default/secret").send().await?.error_for_status()?.json().await?;
    let system = system.with_service_key().await?;
    let secret = common::domain::WebhookSecret::parse(secret["key"].as_str().context("no signing secret")?)?;
    let stop = CancellationToken::new();
    let receiver = Receiver::start(secret, stop.clone()).await?;
    let h2 = options.state.join("data/mongo.h2");
    let pid = standin_pid(&h2).context("no MongoDB stand-in serves the state's data/mongo.h2")?;
    let peak = Arc::new(AtomicU64::new(rss_mib(pid).unwrap_or_default().round() as u64));
    let watching = CancellationToken::new();
    let rss = tokio::spawn(watch_rss(pid, peak.clone(), watching.clone()));
    let mut kinds = kinds(options.scale);
    if !options.kinds.is_empty() {
        anyhow::ensure!(
            options.kinds.iter().all(|chosen| kinds.iter().any(|k| k.key == chosen)),
            "--kinds takes 10kb, 900kb and 20mb"
        );
        kinds.retain(|k| options.kinds.iter().any(|chosen| chosen == k.key));
    }
    let total: u64 = kinds.iter().map(|k| k.count).sum();
    println!("soak: {total} predictions over {} s ({} of the day)", options.seconds, options.scale);
    let started = Instant::now();
    let over = Duration::from_secs(options.seconds);
    let (ready, measured) = tokio::join!(watch_ready(&system, watching.clone()), async {
        let measured = futures::future::try_join_all(
            kinds.iter().map(|kind| run_kind(&system, kind, &receiver.url, started, over)),
        )
        .await;
        let created = started.elapsed();
        let deadline = Instant::now() + Duration::from_secs(if measured.is_ok() { options.drain } else { 0 });
        while receiver.completed_count() < total as usize && Instant::now() < deadline {
            sleep(Duration::from_millis(500)).await;
        }
        let drained = started.elapsed();
        watching.cancel();
        measured.map(|m| (m, created, drained))
    });
    rss.await?;
    let (measured, created, drained) = measured?;
    let (ready_checks, ready_failures, first_failure) = ready;
    // A diagnosis beside the figures: the day stands without it.
    let server = server_reads(&system).await.unwrap_or_else(|e| {
        println!("  the api's own timing of the reads is not known: {e:#}");
        Vec::new()
    });
    let mut rows = Vec::new();
    let mut all_creates = Vec::new();
    let mut small_gets = Vec::new();
    for (kind, measured) in kinds.iter().zip(&measured) {
        let (whole, bad) = verify(&system, kind, &measured.ids).await?;
        let (creates, gets) = (Samples::new(measured.creates.clone()), Samples::new(took(&measured.gets)));
        println!(
            "  {:12} {:6} made, {:4} refused, {} reads refused; create p50 {:7.2} ms p99 {:7.2} ms; read p50 {:7.2} ms p99 {:7.2} ms; {whole} succeeded whole{}",
            kind.name,
            measured.ids.len(),
            measured.refused,
            measured.reads_refused,
            ms(creates.percentile(50.0)),
            ms(creates.percentile(99.0)),
            ms(gets.percentile(50.0)),
            ms(gets.percentile(99.0)),
            bad.first().map(|b| format!(" (not: {b}, ...)")).unwrap_or_default()
        );
        rows.push(json!({"kind": kind.name, "predictions": measured.ids.len(), "refused": measured.refused, "reads_refused": measured.reads_refused,
            "create_p50_ms": ms(creates.percentile(50.0)), "create_p99_ms": ms(creates.percentile(99.0)),
            "get_p50_ms": ms(gets.percentile(50.0)), "get_p99_ms": ms(gets.percentile(99.0)),
            "succeeded_whole": whole, "not_whole": bad.iter().take(5).collect::<Vec<_>>()}));
        all_creates.extend(measured.creates.iter().copied());
        if kind.file_bytes.is_none() && kind.output_len.is_some_and(|l| l < 100_000) {
            small_gets.extend(measured.gets.iter().copied());
        }
    }
    stop.cancel();
    let (creates, gets) = (Samples::new(all_creates), Samples::new(took(&small_gets)));
    let by_minute = p99_by_minute(&small_gets);
    let peak_mib = peak.load(Ordering::Relaxed) as f64;
    let h2_bytes = std::fs::metadata(&h2).map(|m| m.len()).unwrap_or_default();
    let webhooks = receiver.completed_count();
    println!(
        "  all creates p99 {:.2} ms (target {} ms); reads of 10 KB predictions p99 {} (target {} ms)",
        ms(creates.percentile(99.0)),
        CREATE_P99.as_millis(),
        match gets.len() {
            0 => "none (--kinds left them out)".to_owned(),
            _ => format!("{:.2} ms", ms(gets.percentile(99.0))),
        },
        GET_P99.as_millis()
    );
    let minutes: Vec<String> = by_minute.iter().map(|p| format!("{p:.1}")).collect();
    let shares: Vec<String> = server
        .iter()
        .filter(|(le, _)| (2.0..=64.0).contains(le))
        .map(|(le, over)| format!("{:.2} % over {le} ms", over * 100.0))
        .collect();
    println!("  the api's own timing of the day's reads (all kinds): {}", shares.join(", "));
    println!("  reads of 10 KB predictions p99 by minute of the day (ms): {}", minutes.join(" "));
    println!(
        "  /ready: {ready_failures} of {ready_checks} checks not 200{}; stand-in RSS peak {peak_mib:.0} MiB (target {STANDIN_RSS_MAX_MIB:.0}); H2 file {:.1} MiB; {webhooks} of {total} completed webhooks; creates done in {:.0} s, webhooks in {:.0} s",
        first_failure.as_deref().map(|f| format!(" (first: {f})")).unwrap_or_default(),
        h2_bytes as f64 / 1048576.0,
        created.as_secs_f64(),
        drained.as_secs_f64()
    );
    Ok(json!({
        "scenario": "soak",
        "scale": options.scale,
        "seconds": options.seconds,
        "predictions": total,
        "kinds": rows,
        "create_p99_ms": ms(creates.percentile(99.0)),
        "create_p99_target_ms": CREATE_P99.as_millis(),
        "get_p99_ms": ms(gets.percentile(99.0)),
        "get_p99_target_ms": GET_P99.as_millis(),
        "get_p99_by_minute_ms": by_minute,
        "server_reads_over_ms": server.iter().map(|(le, over)| json!({"ms": le, "share": (over * 1e4).round() / 1e4})).collect::<Vec<_>>(),
        "ready_checks": ready_checks,
        "ready_not_200": ready_failures,
        "ready_first_failure": first_failure,
        "standin_rss_peak_mib": peak_mib,
        "standin_rss_target_mib": STANDIN_RSS_MAX_MIB,
        "h2_file_mib": (h2_bytes as f64 / 1048576.0 * 10.0).round() / 10.0,
        "completed_webhooks": webhooks,
        "bad_signatures": receiver.bad_signatures(),
        "creates_seconds": created.as_secs(),
        "webhooks_seconds": drained.as_secs(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_of_reads_over_each_bound_comes_from_the_api_histogram() {
        let page = r#"http_request_duration_seconds_bucket{le="0.004",method="GET",route="/v1/predictions/{id}",status="200"} 90
http_request_duration_seconds_bucket{le="0.008",method="GET",route="/v1/predictions/{id}",status="200"} 99
http_request_duration_seconds_bucket{le="+Inf",method="GET",route="/v1/predictions/{id}",status="200"} 100
http_request_duration_seconds_bucket{le="0.004",method="GET",route="/v1/predictions/{id}",status="404"} 1
http_request_duration_seconds_bucket{le="+Inf",method="GET",route="/v1/predictions/{id}",status="404"} 7
"#;
        let shares = read_shares(page);
        assert_eq!(shares.len(), 2);
        assert_eq!(shares[0].0, 4.0);
        assert!((shares[0].1 - 0.10).abs() < 1e-9 && (shares[1].1 - 0.01).abs() < 1e-9, "{shares:?}");
        assert!(read_shares("# EOF\n").is_empty());
    }
}
