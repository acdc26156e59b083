//! The services of one fault scenario as separate processes: any number of api, runner and
//! notifier replicas on the scenario's own database and NATS prefix, each on fixed ports, so a
//! replica killed with SIGKILL comes back as the same member (same address, same settings).
//! Logs go to one file per replica in the run's directory, appended across restarts.
//!
//! The replicas run this build's binaries, or (for the upgrade row, [`crate::upgrade`]) the
//! previous release's until each is upgraded in place.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context;
use common::domain::WebhookSecret;

use harness::{processes::ServiceProcess, servers::free_port, setup::Setup};

/// How long a replica may take to serve, and to stop.
const START_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_GRACE: Duration = Duration::from_secs(20);

/// A service role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The HTTP API.
    Api,
    /// Runs the models.
    Runner,
    /// Delivers the webhooks.
    Notifier,
}

impl Role {
    pub(crate) fn binary(self) -> &'static str {
        match self {
            Self::Api => "api",
            Self::Runner => "runner",
            Self::Notifier => "notifier",
        }
    }
}

/// How many replicas of each role.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// api replicas.
    pub apis: usize,
    /// runner replicas.
    pub runners: usize,
    /// notifier replicas.
    pub notifiers: usize,
}

struct Replica {
    role: Role,
    vars: HashMap<String, String>,
    log: PathBuf,
    health: String,
    process: Option<ServiceProcess>,
    /// The previous release's binary it runs, until it is upgraded (see [`Topology::upgrade`]).
    previous: Option<PathBuf>,
}

/// The running services.
pub struct Topology {
    /// The scenario's database, prefix and settings.
    pub setup: Setup,
    /// Every api replica's base URL.
    pub apis: Vec<String>,
    /// An admin key of the account `faults`.
    pub key: String,
    /// Its webhook signing secret.
    pub secret: WebhookSecret,
    replicas: Vec<Replica>,
    logs: PathBuf,
    http: reqwest::Client,
}

impl Topology {
    /// Creates the account `faults` on a fresh database and prefix with `vars` (the servers
    /// and service settings), then starts `shape`'s replicas and waits until each serves.
    /// Every replica runs the binaries in `previous` (a directory holding `api`, `runner` and
    /// `notifier` of the previous release) where it is given, and the account is then made by
    /// that release's `api admin bootstrap`, as its operator did.
    pub async fn start(
        shape: Shape,
        vars: &[(&str, String)],
        logs: PathBuf,
        previous: Option<&Path>,
    ) -> anyhow::Result<Self> {
        let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        // A cluster just started elects its JetStream leader first: until then streams
        // cannot be created.
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        let setup = loop {
            match Setup::new(&pairs).await {
                Ok(setup) => break setup,
                Err(e) if tokio::time::Instant::now() < deadline => {
                    tracing::info!("servers not ready yet ({e:#}); trying again");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => return Err(e.context("the servers did not become ready")),
            }
        };
        let config = api::config::ApiConfig::from_env(&setup.env())?;
        let (key, secret) = match previous {
            None => {
                let bootstrapped = api::admin::bootstrap(&config, "faults").await?;
                (bootstrapped.key.expose().to_owned(), bootstrapped.secret)
            }
            Some(dir) => bootstrap_with(&dir.join(Role::Api.binary()), &setup, &config).await?,
        };
        let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
        let mut topology =
            Self { setup, apis: Vec::new(), key, secret, replicas: Vec::new(), logs: logs.clone(), http };
        std::fs::create_dir_all(&logs)?;
        for (role, count) in [(Role::Api, shape.apis), (Role::Runner, shape.runners), (Role::Notifier, shape.notifiers)]
        {
            for i in 0..count {
                topology.add(role, logs.join(format!("{}-{i}.log", role.binary())))?;
                let added = topology.replicas.len() - 1;
                topology.replicas[added].previous = previous.map(|dir| dir.join(role.binary()));
            }
        }
        for i in 0..topology.replicas.len() {
            topology.start_replica(i).await?;
        }
        Ok(topology)
    }

    fn add(&mut self, role: Role, log: PathBuf) -> anyhow::Result<()> {
        let address = format!("127.0.0.1:{}", free_port()?);
        let mut vars = self.setup.vars.clone();
        let health = match role {
            Role::Api => {
                let base = format!("http://{address}");
                vars.insert("API_BIND".into(), address);
                vars.insert("PUBLIC_BASE_URL".into(), base.clone());
                self.apis.push(base.clone());
                format!("{base}/health")
            }
            Role::Runner => {
                vars.insert("RUNNER_METRICS_BIND".into(), address.clone());
                // The public address every service hands out, as behind one load balancer:
                // the links a runner stores (its output files') are the api's.
                if let Some(api) = self.apis.first() {
                    vars.insert("PUBLIC_BASE_URL".into(), api.clone());
                }
                format!("http://{address}/health")
            }
            Role::Notifier => {
                vars.insert("NOTIFIER_METRICS_BIND".into(), address.clone());
                format!("http://{address}/health")
            }
        };
        self.replicas.push(Replica { role, vars, log, health, process: None, previous: None });
        Ok(())
    }

    /// The position of the `n`-th replica of `role`.
    fn find(&self, role: Role, n: usize) -> anyhow::Result<usize> {
        self.replicas
            .iter()
            .enumerate()
            .filter(|(_, r)| r.role == role)
            .nth(n)
            .map(|(i, _)| i)
            .with_context(|| format!("no {} replica {n}", role.binary()))
    }

    async fn start_replica(&mut self, i: usize) -> anyhow::Result<()> {
        let replica = &mut self.replicas[i];
        let process = match &replica.previous {
            Some(binary) => ServiceProcess::spawn_binary(replica.role.binary(), binary, &replica.vars, &replica.log)?,
            None => ServiceProcess::spawn(replica.role.binary(), &replica.vars, &replica.log)?,
        };
        replica.process = Some(process);
        let (url, http, log) = (replica.health.clone(), self.http.clone(), replica.log.clone());
        let process = replica.process.as_mut().expect("just started");
        // A replica that exits while it is waited for is reported at once, with how it ended
        // in its own words, rather than as one slow to answer.
        let poll = async {
            loop {
                if http.get(&url).send().await.is_ok_and(|r| r.status().is_success()) {
                    return Ok(());
                }
                if process.exited() {
                    anyhow::bail!("{} exited while starting; its log ends:\n{}", url, log_tail(&log, 20));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        match tokio::time::timeout(START_TIMEOUT, poll).await {
            Ok(started) => started,
            Err(_) => anyhow::bail!(
                "{url} did not answer 200 within {START_TIMEOUT:?}; its log ends:\n{}",
                log_tail(&log, 20)
            ),
        }
    }

    /// Adds a runner replica with the scenario's settings and `extra`, starts it and waits
    /// until it serves; returns its number among the runners.
    pub async fn add_runner(&mut self, extra: &[(&str, &str)]) -> anyhow::Result<usize> {
        let n = self.replicas.iter().filter(|r| r.role == Role::Runner).count();
        self.add(Role::Runner, self.logs.join(format!("runner-{n}.log")))?;
        let i = self.replicas.len() - 1;
        self.replicas[i].vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        self.start_replica(i).await?;
        Ok(n)
    }

    /// SIGTERM of the `n`-th replica of `role`, waiting for it to stop (a rolling update's
    /// last step); it stays down.
    pub async fn terminate(&mut self, role: Role, n: usize) -> anyhow::Result<()> {
        let i = self.find(role, n)?;
        match self.replicas[i].process.take() {
            Some(process) => process.stop(STOP_GRACE).await.map(|_| ()),
            None => Ok(()),
        }
    }

    /// The `/metrics` address of every runner replica.
    pub fn runner_metrics(&self) -> Vec<String> {
        self.replicas
            .iter()
            .filter(|r| r.role == Role::Runner)
            .map(|r| r.health.replace("/health", "/metrics"))
            .collect()
    }

    /// SIGKILL of the `n`-th replica of `role`.
    pub async fn kill(&mut self, role: Role, n: usize) -> anyhow::Result<()> {
        let i = self.find(role, n)?;
        match self.replicas[i].process.take() {
            Some(process) => process.kill().await,
            None => Ok(()),
        }
    }

    /// Sends `signal` (`STOP`, `CONT`) to the `n`-th replica of `role` (see
    /// [`ServiceProcess::signal`]).
    pub async fn signal(&mut self, role: Role, n: usize, signal: &str) -> anyhow::Result<()> {
        let i = self.find(role, n)?;
        self.replicas[i].process.as_ref().context("the replica is not running")?.signal(signal).await
    }

    /// Starts the `n`-th replica of `role` again and waits until it serves.
    pub async fn restart(&mut self, role: Role, n: usize) -> anyhow::Result<()> {
        let i = self.find(role, n)?;
        self.start_replica(i).await
    }

    /// Upgrades the `n`-th replica of `role` in place, as a rolling update replaces a pod: a
    /// SIGTERM and the wait for its clean stop, then this build's binary on the same address
    /// and settings, waited for until it serves.
    pub async fn upgrade(&mut self, role: Role, n: usize) -> anyhow::Result<()> {
        let i = self.find(role, n)?;
        if let Some(process) = self.replicas[i].process.take() {
            process.stop(STOP_GRACE).await?;
        }
        self.replicas[i].previous = None;
        self.start_replica(i).await
    }

    /// How many replicas of each role there are.
    pub fn count(&self, role: Role) -> usize {
        self.replicas.iter().filter(|r| r.role == role).count()
    }

    /// How many replicas still run the previous release.
    pub fn on_previous(&self) -> usize {
        self.replicas.iter().filter(|r| r.previous.is_some()).count()
    }

    /// Whether a replica exited that no fault killed.
    pub fn crashed(&mut self) -> Vec<&'static str> {
        let mut exited = Vec::new();
        for replica in &mut self.replicas {
            if replica.process.as_mut().is_some_and(ServiceProcess::exited) {
                exited.push(replica.role.binary());
            }
        }
        exited
    }

    /// Stops every replica: notifiers last, so the last events still go out.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        for role in [Role::Api, Role::Runner, Role::Notifier] {
            for replica in self.replicas.iter_mut().filter(|r| r.role == role) {
                if let Some(process) = replica.process.take() {
                    process.stop(STOP_GRACE).await?;
                }
            }
        }
        Ok(())
    }
}

/// Makes the account `faults` with the previous release's `api admin bootstrap` (its binary
/// `api`), as that release's operator did: it migrates the new database to that release's
/// index set. Returns the admin key it printed and the account's signing secret.
async fn bootstrap_with(
    api: &Path,
    setup: &Setup,
    config: &api::config::ApiConfig,
) -> anyhow::Result<(String, WebhookSecret)> {
    let output = tokio::process::Command::new(api)
        .args(["admin", "bootstrap", "--account", "faults"])
        .env_clear()
        .envs(&setup.vars)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .with_context(|| format!("running {} admin bootstrap", api.display()))?;
    anyhow::ensure!(
        output.status.success(),
        "{} admin bootstrap failed: {}",
        api.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let key = String::from_utf8(output.stdout)?.trim().to_owned();
    let account = setup.store.accounts().find_by_name("faults").await?.context("the account the bootstrap made")?;
    let secret = account.signing_secrets(&config.common.master_key)?.current;
    Ok((key, secret))
}

/// The last `lines` lines of the log at `path`, or why it cannot be read.
fn log_tail(path: &Path, lines: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("({} unreadable: {e})", path.display()),
    }
}
