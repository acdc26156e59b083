//! The whole system as separate processes, as operators run it: one api, one notifier and any
//! number of runners, on a scenario's own database and NATS prefix, each with a `/metrics`
//! page (MongoDB commands counted by the driver) and its CPU time and peak memory in `/proc`.
//! Logs go to files in a scratch directory that is removed when the run ends.

use std::{collections::BTreeMap, net::SocketAddr, path::PathBuf, time::Duration};

use anyhow::Context;
use common::domain::WebhookSecret;
use serde_json::{Value, json};

use crate::{
    processes::{ServiceProcess, Usage},
    setup::Setup,
};

/// How long a service may take to become ready, and to stop.
const START_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_GRACE: Duration = Duration::from_secs(20);

/// A service process with the address of its metrics page.
struct Member {
    process: ServiceProcess,
    metrics: String,
}

/// The running system.
pub struct Cluster {
    /// The scenario environment the processes were started with.
    pub setup: Setup,
    /// The api's base URL.
    pub base: String,
    /// An admin key of the account `bench`.
    pub key: String,
    /// The signing secret of the account `bench`.
    pub secret: WebhookSecret,
    api: Member,
    more_apis: Vec<Member>,
    notifier: Option<Member>,
    runners: Vec<Member>,
    logs: PathBuf,
    http: reqwest::Client,
}

/// One service's resource use and MongoDB commands at a moment.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// CPU seconds and peak memory, by service (runners summed, their peak the largest).
    pub usage: BTreeMap<&'static str, Usage>,
    /// `mongodb_commands_total` by service and command.
    pub commands: BTreeMap<&'static str, BTreeMap<String, f64>>,
}

fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(SocketAddr::from(([127, 0, 0, 1], super::servers::free_port()?)))
}

/// Two free addresses (distinct: [`super::servers::free_port`] never hands out a port twice).
fn free_addr_pair() -> anyhow::Result<(SocketAddr, SocketAddr)> {
    Ok((free_addr()?, free_addr()?))
}

impl Cluster {
    /// Starts an api (and a notifier when `notifier` is set) on a fresh database and prefix
    /// with `extra` settings, and creates the account `bench` with an admin key.
    pub async fn start(extra: &[(&str, &str)], notifier: bool) -> anyhow::Result<Self> {
        let (api_addr, api_metrics) = free_addr_pair()?;
        let base = format!("http://{api_addr}");
        let mut vars = vec![
            ("API_BIND", api_addr.to_string()),
            // As the shipped kits have it: /metrics on a port of its own, not the public one.
            ("API_METRICS_BIND", api_metrics.to_string()),
            ("PUBLIC_BASE_URL", base.clone()),
            ("NOTIFIER_ALLOW_PRIVATE_TARGETS", "true".into()),
            ("DEFAULT_RATE_LIMIT_RPM", "100000000".into()),
            ("RUST_LOG", std::env::var("BENCH_SERVICE_LOG").unwrap_or_else(|_| "warn".into())),
        ];
        // The cost tables need the services' MongoDB command counts (monitoring on; it costs
        // CPU, which `BENCH_COMMAND_METRICS=false` leaves out to compare; scenarios that report no
        // counts turn it off in `extra`).
        vars.push((
            "MONGODB_COMMAND_METRICS",
            std::env::var("BENCH_COMMAND_METRICS").unwrap_or_else(|_| "true".into()),
        ));
        // Services start with a clean environment: their runtime size is passed on explicitly.
        if let Some(threads) = service_worker_threads() {
            vars.push(("TOKIO_WORKER_THREADS", threads));
        }
        vars.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
        let setup = Setup::new(&vars.iter().map(|(k, v)| (*k, v.as_str())).collect::<Vec<_>>()).await?;
        runner::registry::register(&setup.store, &runner::models::builtin::all(), &Default::default()).await?;
        let config = api::config::ApiConfig::from_env(&setup.env())?;
        let bootstrapped = api::admin::bootstrap(&config, "bench").await?;
        let (key, secret) = (bootstrapped.key.expose().to_owned(), bootstrapped.secret);
        let logs = std::env::temp_dir().join(format!("bench-logs-{}", setup.common.mongodb_database));
        std::fs::create_dir_all(&logs)?;
        let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
        let api = Member {
            process: ServiceProcess::spawn("api", &setup.vars, &logs.join("api.log"))?,
            metrics: format!("http://{api_metrics}/metrics"),
        };
        let mut cluster = Self {
            setup,
            base,
            key,
            secret,
            api,
            more_apis: Vec::new(),
            notifier: None,
            runners: Vec::new(),
            logs,
            http,
        };
        cluster.await_ready(&format!("{}/ready", cluster.base)).await.context("the api did not become ready")?;
        if notifier {
            let member = cluster.spawn_with_metrics("notifier", "NOTIFIER_METRICS_BIND", &[])?;
            cluster.await_ready(&member.metrics.replace("/metrics", "/health")).await?;
            cluster.notifier = Some(member);
        }
        Ok(cluster)
    }

    /// Starts `count` more runners, each with `extra` settings, and waits until they serve.
    pub async fn add_runners(&mut self, count: usize, extra: &[(&str, &str)]) -> anyhow::Result<()> {
        for _ in 0..count {
            let member = self.spawn_with_metrics("runner", "RUNNER_METRICS_BIND", extra)?;
            self.await_ready(&member.metrics.replace("/metrics", "/health")).await.context("a runner did not start")?;
            self.runners.push(member);
        }
        Ok(())
    }

    /// Starts one more api process on the same database and prefix; returns its base URL.
    pub async fn add_api(&mut self) -> anyhow::Result<String> {
        let (addr, metrics) = free_addr_pair()?;
        let base = format!("http://{addr}");
        let mut vars = self.setup.vars.clone();
        vars.insert("API_BIND".into(), addr.to_string());
        vars.insert("API_METRICS_BIND".into(), metrics.to_string());
        let log = self.logs.join(format!("api-{}.log", self.more_apis.len() + 1));
        let member = Member {
            process: ServiceProcess::spawn("api", &vars, &log)?,
            metrics: format!("http://{metrics}/metrics"),
        };
        self.await_ready(&format!("{base}/ready")).await.context("the added api did not become ready")?;
        self.more_apis.push(member);
        Ok(base)
    }

    /// Every service process: its name and process id.
    pub fn pids(&self) -> Vec<(&'static str, u32)> {
        std::iter::once(&self.api)
            .chain(&self.more_apis)
            .chain(&self.notifier)
            .chain(&self.runners)
            .map(|m| (m.process.name, m.process.pid()))
            .collect()
    }

    /// Stops every runner gracefully.
    pub async fn stop_runners(&mut self) -> anyhow::Result<()> {
        for member in self.runners.drain(..) {
            member.process.stop(STOP_GRACE).await?;
        }
        Ok(())
    }

    /// How many runners are up.
    pub fn runner_count(&self) -> usize {
        self.runners.len()
    }

    fn spawn_with_metrics(&self, name: &'static str, bind_var: &str, extra: &[(&str, &str)]) -> anyhow::Result<Member> {
        let bind = free_addr()?;
        let mut vars = self.setup.vars.clone();
        vars.insert(bind_var.into(), bind.to_string());
        vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let log = self.logs.join(format!("{name}-{}.log", self.runners.len()));
        Ok(Member { process: ServiceProcess::spawn(name, &vars, &log)?, metrics: format!("http://{bind}/metrics") })
    }

    async fn await_ready(&self, url: &str) -> anyhow::Result<()> {
        let poll = async {
            loop {
                if let Ok(r) = self.http.get(url).send().await
                    && r.status().is_success()
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        tokio::time::timeout(START_TIMEOUT, poll).await.with_context(|| format!("{url} did not answer 200"))
    }

    /// Resource use and MongoDB commands of every process now.
    pub async fn snapshot(&mut self) -> anyhow::Result<Snapshot> {
        let mut snapshot = Snapshot::default();
        let members = std::iter::once(&mut self.api)
            .chain(self.more_apis.iter_mut())
            .chain(self.notifier.as_mut())
            .chain(self.runners.iter_mut());
        for member in members {
            let name = member.process.name;
            anyhow::ensure!(
                !member.process.exited(),
                "the {name} process exited; run with BENCH_KEEP_LOGS=1 for its log"
            );
            let usage = member.process.usage()?;
            let total = snapshot.usage.entry(member.process.name).or_default();
            total.cpu_seconds += usage.cpu_seconds;
            total.kernel_seconds += usage.kernel_seconds;
            total.peak_rss_kib = total.peak_rss_kib.max(usage.peak_rss_kib);
            total.context_switches += usage.context_switches;
            let counts = commands(&self.http, &member.metrics).await?;
            let sums = snapshot.commands.entry(member.process.name).or_default();
            for (command, n) in counts {
                *sums.entry(command).or_default() += n;
            }
        }
        Ok(snapshot)
    }

    /// The sum over the runners of the unlabelled metric `name` (a counter's or a histogram's
    /// `_sum` or `_count` line).
    pub async fn runners_metric(&self, name: &str) -> anyhow::Result<f64> {
        let mut total = 0.0;
        for member in &self.runners {
            let text = self.http.get(&member.metrics).send().await?.text().await?;
            total += series(&text).filter(|(s, _)| *s == name).map(|(_, v)| v).sum::<f64>();
        }
        Ok(total)
    }

    /// Waits until the system has worked off what it was given: no job left in the jobs
    /// stream and no event waiting for the notifier, twice in a row 250 ms apart. `false` if
    /// that did not happen within `within`.
    pub async fn drained(&self, within: Duration) -> anyhow::Result<bool> {
        let (js, subjects) = (self.setup.bus.jetstream(), self.setup.bus.subjects());
        let deadline = tokio::time::Instant::now() + within;
        let mut idle_polls = 0;
        while tokio::time::Instant::now() < deadline {
            let jobs = js.get_stream(subjects.jobs_stream()).await?.info().await?.state.messages;
            let notifier = js
                .get_consumer_from_stream::<async_nats::jetstream::consumer::pull::Config, _, _>(
                    subjects.notifier_consumer(),
                    subjects.events_stream(),
                )
                .await;
            let events = match notifier {
                Ok(mut consumer) => {
                    let info = consumer.info().await?;
                    info.num_pending + info.num_ack_pending as u64
                }
                Err(_) => 0, // no notifier in this system
            };
            idle_polls = if jobs == 0 && events == 0 { idle_polls + 1 } else { 0 };
            if idle_polls == 2 {
                return Ok(true);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Ok(false)
    }

    /// Stops everything; keeps the logs only when `BENCH_KEEP_LOGS` is set.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.stop_runners().await?;
        if let Some(member) = self.notifier.take() {
            member.process.stop(STOP_GRACE).await?;
        }
        for member in self.more_apis.drain(..) {
            member.process.stop(STOP_GRACE).await?;
        }
        self.api.process.stop(STOP_GRACE).await?;
        self.setup.forget().await;
        if std::env::var_os("BENCH_KEEP_LOGS").is_none() {
            std::fs::remove_dir_all(&self.logs).ok();
        } else {
            println!("service logs kept in {}", self.logs.display());
        }
        Ok(())
    }
}

/// Services as deployed: MongoDB command monitoring off (its default; the baselines' client
/// has none either). With it on, the driver copies every command and reply into an owned
/// document for its event: 8 % of the runner's CPU in its profile. CPU targets are measured
/// as deployed; the commands are counted in a separate run.
pub const AS_DEPLOYED: [(&str, &str); 1] = [("MONGODB_COMMAND_METRICS", "false")];

/// The tokio worker threads of every service process: `BENCH_SERVICE_WORKER_THREADS`, by
/// default 1, as `deploy/local/up` runs them; `default` leaves tokio's own (one per core).
pub fn service_worker_threads() -> Option<String> {
    match std::env::var("BENCH_SERVICE_WORKER_THREADS") {
        Ok(threads) if threads == "default" => None,
        Ok(threads) => Some(threads),
        Err(_) => Some("1".into()),
    }
}

/// The worker threads tokio gives a process by default here: one per core.
pub fn cores() -> String {
    std::thread::available_parallelism().map(usize::from).unwrap_or(1).to_string()
}

/// `mongodb_commands_total` by command, from a `/metrics` page.
pub async fn commands(http: &reqwest::Client, url: &str) -> anyhow::Result<BTreeMap<String, f64>> {
    let text = http.get(url).send().await?.text().await?;
    Ok(series(&text)
        .filter_map(|(s, n)| Some((s.strip_prefix("mongodb_commands_total{command=\"")?.strip_suffix("\"}")?, n)))
        .map(|(c, n)| (c.to_owned(), n))
        .collect())
}

/// The samples of a `/metrics` page: each series (its name and labels, as written) and its
/// value; comments and lines that are not a sample are left out.
pub fn series(text: &str) -> impl Iterator<Item = (&str, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter_map(|(s, v)| Some((s, v.trim().parse().ok()?)))
}

/// What each service used between two snapshots, per prediction: CPU microseconds (and the
/// kernel's share of them: the loopback TCP path is charged to the sending process), MongoDB
/// writes and reads (and each command), context switches, and its peak memory at the end.
pub fn cost(before: &Snapshot, after: &Snapshot, predictions: usize) -> Value {
    let n = predictions.max(1) as f64;
    // Services without command monitoring report none: their commands were not counted.
    let counted = after.commands.values().any(|c| !c.is_empty());
    let or_uncounted = |x: f64| if counted { json!(round(x, 3)) } else { Value::Null };
    let mut services = serde_json::Map::new();
    let (mut cpu_total, mut kernel_total, mut writes_total, mut reads_total) = (0.0, 0.0, 0.0, 0.0);
    let mut switches_total = 0.0;
    for (service, usage) in &after.usage {
        let earlier = before.usage.get(service).copied().unwrap_or_default();
        let cpu = usage.cpu_seconds - earlier.cpu_seconds;
        let kernel = usage.kernel_seconds - earlier.kernel_seconds;
        // Threads that exited take their counts with them: never below zero.
        let switches = usage.context_switches.saturating_sub(earlier.context_switches) as f64 / n;
        switches_total += switches;
        let mut per_command = serde_json::Map::new();
        let (mut writes, mut reads) = (0.0, 0.0);
        for (command, total) in after.commands.get(service).into_iter().flatten() {
            let delta = (total - before.commands.get(service).and_then(|c| c.get(command)).copied().unwrap_or(0.0)) / n;
            if delta > 0.0 {
                per_command.insert(command.clone(), json!(round(delta, 3)));
                match command.as_str() {
                    "insert" | "update" | "delete" | "findAndModify" => writes += delta,
                    "find" | "count" | "aggregate" | "getMore" => reads += delta,
                    _ => {}
                }
            }
        }
        cpu_total += cpu;
        kernel_total += kernel;
        writes_total += writes;
        reads_total += reads;
        services.insert(
            (*service).to_owned(),
            json!({
                "cpu_seconds_per_1000": round(cpu * 1000.0 / n, 3),
                "kernel_share_of_cpu": round(kernel / cpu.max(f64::EPSILON), 2),
                "peak_rss_mib": round(usage.peak_rss_kib as f64 / 1024.0, 1),
                "mongodb_writes_per_prediction": or_uncounted(writes),
                "mongodb_reads_per_prediction": or_uncounted(reads),
                "mongodb_commands_per_prediction": per_command,
                "context_switches_per_prediction": round(switches, 1),
            }),
        );
    }
    json!({
        "predictions": predictions,
        "services": services,
        "cpu_us_per_prediction": round(cpu_total * 1e6 / n, 1),
        "kernel_share_of_cpu": round(kernel_total / cpu_total.max(f64::EPSILON), 2),
        "mongodb_writes_per_prediction": or_uncounted(writes_total),
        "mongodb_reads_per_prediction": or_uncounted(reads_total),
        "context_switches_per_prediction": round(switches_total, 1),
    })
}

/// `x` rounded to `places` decimals.
pub fn round(x: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (x * f).round() / f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_metrics_page_reads_as_its_series_and_values() {
        let page = "# HELP runner_output_upload_seconds Uploads\n# TYPE runner_output_upload_seconds histogram\n\
                    runner_output_upload_seconds_sum 12.5\nrunner_output_upload_seconds_count 2\n\
                    mongodb_commands_total{command=\"find\"} 7\n# EOF\n";
        let all: Vec<(&str, f64)> = series(page).collect();
        assert_eq!(
            all,
            [
                ("runner_output_upload_seconds_sum", 12.5),
                ("runner_output_upload_seconds_count", 2.0),
                ("mongodb_commands_total{command=\"find\"}", 7.0)
            ]
        );
    }
}
