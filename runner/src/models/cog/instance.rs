//! The model servers the runner starts itself: an [`Instance`] is one server of a Cog project it
//! serves (`RUNNER_COG=owner/name=dir:/path`), which owns that coglet process and is the only
//! place that starts, watches and stops it. The executor asks the model's
//! [`Instances`](super::instances::Instances) for a ready server and never spawns anything
//! itself.
//!
//! - **Boot on demand.** With `min_instances` 0 (the default) nothing runs until a job of the
//!   model arrives; the job waits for the boot (its prediction stays `starting`). coglet is
//!   started from the project's directory with the runner's Python (`RUNNER_COG_PYTHON`), on
//!   a free loopback port ([`free_port`]; started again on another if another process takes
//!   it first), with `--upload-url` to the runner's own receiver,
//!   `COG_MAX_CONCURRENCY` from `cog.yaml`, `COG_SETUP_TIMEOUT` from the model's settings (none
//!   by default, as in Cog) and a `TMPDIR` of its own, removed when it stops. Its stdout and
//!   stderr are logged line by line under the model's name, the last lines kept for errors.
//! - **Idle stop.** An instance with nothing in flight for `idle_seconds` (default 300) is
//!   stopped, SIGTERM then SIGKILL after [`STOP_GRACE`], unless `min_instances` keeps it.
//! - **Crashes.** An instance that exits, or reports `UNHEALTHY` (coglet's worker died: it never
//!   recovers), or leaves its health checks unanswered for [`SILENCE_LIMIT`], is gone: the
//!   prediction it ran fails `MODEL_CRASHED` (the run's own health watch sees it), and the next
//!   boot comes no sooner than a backoff of 1 s doubling to 60 s with each failure in a row
//!   (at once after a boot that succeeded). With `min_instances` 1 it is booted again after the
//!   backoff by itself; otherwise by the next job.
//! - **Bad setups.** A setup that fails (`SETUP_FAILED`, or the process gone before it was
//!   ready) fails the job waiting for it with `MODEL_SETUP_FAILED` and the setup's last log
//!   lines, and counts as a failure for the backoff: no job waits for a model that can never
//!   boot, and none boots it again at once.
//!
//! An instance is one server; a model's instances, up to its `max_instances`, are held and
//! chosen by [`super::instances::Instances`], which keeps `min_instances` of them running. Each
//! instance's slots are `concurrency.max`.

use std::{
    collections::VecDeque,
    path::PathBuf,
    process::Stdio,
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use common::{domain::ModelRef, store::runners::InstanceReport};
use reqwest::Client;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::Command,
    time::Instant,
};
use tokio_util::sync::CancellationToken;
use url::Url;

use super::{Mode, project::CogProject};
use crate::{metrics::RunnerMetrics, models::ModelError};

/// How long a stopped instance has after SIGTERM before SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(10);
/// How often a running instance's health is checked (and its idleness).
const WATCH_EVERY: Duration = Duration::from_secs(2);
/// How long a running instance may leave every health check unanswered before it is killed.
pub const SILENCE_LIMIT: Duration = Duration::from_secs(30);
/// How often a booting instance is asked whether it is ready.
const BOOT_POLL: Duration = Duration::from_millis(50);
/// The first backoff after a failure, and the longest.
const BACKOFF_FIRST: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// coglet's errors (0.23.1) for a prediction whose worker process died: under it, and before
/// it could be sent the prediction (a prefix). Seen in the fault suite's Cog crashes row.
pub const WORKER_GONE: [&str; 2] = ["Worker crashed", "Failed to send request: "];
/// How many of its last output lines an instance keeps for errors.
const KEPT_LINES: usize = 40;
/// The most of a boot's output kept for the predictions that waited for it (its tail).
const BOOT_LOG_BYTES: usize = 16 * 1024;

/// The output of the latest boot, from its start to `READY` (or its failure): what the
/// predictions that waited for it show at the head of their logs.
#[derive(Debug, Default)]
struct BootLog {
    text: String,
    /// Lines of the server's output are added while the boot goes on.
    open: bool,
}

impl BootLog {
    fn push(&mut self, line: &str) {
        self.text.push_str(line);
        self.text.push('\n');
        if self.text.len() > BOOT_LOG_BYTES {
            let mut at = self.text.len() - BOOT_LOG_BYTES;
            while !self.text.is_char_boundary(at) {
                at += 1;
            }
            self.text.drain(..at);
        }
    }
}

/// How many instances a model has, and when they stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceSettings {
    /// Instances kept running even when idle.
    pub min_instances: usize,
    /// Instances at most (each with the project's `concurrency.max` slots).
    pub max_instances: usize,
    /// How long an instance may sit idle before it is stopped.
    pub idle: Duration,
    /// The longest its setup may take (coglet's `COG_SETUP_TIMEOUT`); none by default.
    pub setup_timeout: Option<Duration>,
}

impl Default for InstanceSettings {
    fn default() -> Self {
        Self { min_instances: 0, max_instances: 1, idle: Duration::from_secs(300), setup_timeout: None }
    }
}

/// How to start a project's server.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The model it serves.
    pub model: ModelRef,
    /// The Python with coglet (`RUNNER_COG_PYTHON`).
    pub python: PathBuf,
    /// The project.
    pub project: CogProject,
    /// Predictor or trainer.
    pub mode: Mode,
    /// Where its output files go (`--upload-url`).
    pub upload_url: Option<String>,
    /// Its instances.
    pub settings: InstanceSettings,
}

/// A server process of the instance, while it lives.
struct Running {
    url: Url,
    pid: u32,
    /// Fired by the exit watcher when the process is gone.
    exited: CancellationToken,
    /// Set when the runner stopped it on purpose (idle, shutdown): not a crash.
    stopping: Arc<AtomicBool>,
    started: Instant,
}

struct State {
    running: Option<Running>,
    /// Failures in a row (crashes, failed setups).
    failures: u32,
    /// No boot before this.
    not_before: Option<Instant>,
}

/// One project's instance (see the module's notes).
pub struct Instance {
    launch: Launch,
    http: Client,
    state: tokio::sync::Mutex<State>,
    in_flight: AtomicUsize,
    last_used: Mutex<Instant>,
    lines: Arc<Mutex<VecDeque<String>>>,
    boot_log: Arc<Mutex<BootLog>>,
    /// How it stands, for the runner's presence record ([`Instance::report`]).
    report: Mutex<InstanceReport>,
    metrics: RunnerMetrics,
    me: Weak<Instance>,
    shutdown: CancellationToken,
    /// Kept running even when idle, and booted again after a crash: by its model's
    /// `min_instances`, or a deployment's of its version ([`Instance::set_kept`]).
    kept: AtomicBool,
}

/// A run in flight on an instance: while any is held it is not idle.
pub struct Lease {
    instance: Arc<Instance>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        *self.instance.last_used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        if self.instance.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.instance.shift("busy", "ready");
        }
    }
}

impl Instance {
    /// An instance of `launch`, not started (unless `min_instances` asks for one: then booted
    /// in the background now); it stops with `shutdown`.
    pub fn new(launch: Launch, metrics: RunnerMetrics, shutdown: CancellationToken) -> Arc<Self> {
        let keep = launch.settings.min_instances > 0;
        let report = InstanceReport {
            model: launch.model.clone(),
            version: version_label(&launch),
            state: String::new(),
            booted_at: None,
            boot_seconds: None,
            last_exit: None,
        };
        let instance = Arc::new_cyclic(|me| Self {
            launch,
            http: Client::builder().timeout(Duration::from_secs(2)).build().expect("an HTTP client"),
            state: tokio::sync::Mutex::new(State { running: None, failures: 0, not_before: None }),
            in_flight: AtomicUsize::new(0),
            last_used: Mutex::new(Instant::now()),
            lines: Arc::default(),
            boot_log: Arc::default(),
            report: Mutex::new(report),
            metrics,
            me: me.clone(),
            shutdown,
            kept: AtomicBool::new(keep),
        });
        instance.gauge("stopped");
        if keep {
            instance.clone().boot_in_background(Duration::ZERO);
        }
        let stopping = instance.clone();
        tokio::spawn(async move {
            stopping.shutdown.cancelled().await;
            stopping.stop("shutdown").await;
        });
        instance
    }

    /// The model it serves.
    pub fn model(&self) -> &ModelRef {
        &self.launch.model
    }

    /// Whether a server is up now (a job needs no boot).
    pub fn is_up(&self) -> bool {
        self.state.try_lock().is_ok_and(|s| s.running.as_ref().is_some_and(|r| !r.exited.is_cancelled()))
    }

    /// Whether its server is ready or busy by its latest report (never waits for a boot, a
    /// stop or a health check in progress, as [`Self::is_up`] would see them).
    pub fn serving(&self) -> bool {
        matches!(self.report.lock().unwrap_or_else(|p| p.into_inner()).state.as_str(), "ready" | "busy")
    }

    /// A ready server's URL and a lease on it, booting one first if none runs (after the
    /// backoff of earlier failures). A failed boot is `MODEL_SETUP_FAILED`.
    pub async fn ready(&self) -> Result<(Url, Lease), ModelError> {
        let instance = self.me.upgrade().ok_or_else(|| setup_failed(&self.launch.model, "the runner is stopping"))?;
        let mut state = self.state.lock().await;
        self.settle_exit(&mut state);
        if state.running.is_none() {
            if let Some(at) = state.not_before.filter(|at| *at > Instant::now()) {
                tracing::info!(model = %self.launch.model, wait = ?at.duration_since(Instant::now()), "waiting out the backoff before booting the model again");
                tokio::time::sleep_until(at).await;
            }
            match self.boot().await {
                Ok(running) => {
                    state.running = Some(running);
                    state.failures = 0;
                    state.not_before = None;
                }
                Err(e) => {
                    state.failures += 1;
                    state.not_before = Some(Instant::now() + backoff(state.failures));
                    self.gauge("stopped");
                    return Err(e);
                }
            }
        }
        let url = state.running.as_ref().map(|r| r.url.clone()).expect("running");
        if self.in_flight.fetch_add(1, Ordering::AcqRel) == 0 {
            self.shift("ready", "busy");
        }
        Ok((url, Lease { instance }))
    }

    /// How it stands now: its state, its latest boot, how its latest server ended.
    pub fn report(&self) -> InstanceReport {
        self.report.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn noted(&self, change: impl FnOnce(&mut InstanceReport)) {
        change(&mut self.report.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// Counts the end of its server (`why`), in the metrics and its report.
    fn exited(&self, why: &'static str) {
        self.metrics.model_exited(&self.launch.model, why);
        self.noted(|r| r.last_exit = Some(why.to_owned()));
    }

    /// The latest boot's output: that it began, the server's own lines during its setup, and
    /// how it ended.
    pub fn boot_log(&self) -> String {
        self.boot_log.lock().unwrap_or_else(|p| p.into_inner()).text.clone()
    }

    fn boot_note(&self, line: &str, open: bool) {
        let mut log = self.boot_log.lock().unwrap_or_else(|p| p.into_inner());
        log.push(line);
        log.open = open;
    }

    /// Whether the server at `url` that just failed a run with `error` is broken rather than
    /// the model having raised: its process is gone, or its worker died. coglet answers a
    /// prediction whose worker was killed `failed` with one of [`WORKER_GONE`], and only then
    /// reports `UNHEALTHY` (with eight predictions in flight, the others' failures came before
    /// it did); it never starts another worker. A broken server is killed here, so the next
    /// job boots a new one.
    pub async fn broke(&self, url: &Url, error: &str) -> bool {
        // Locked: a boot goes on, so the server of `url` is already gone.
        let gone = match self.state.try_lock() {
            Ok(state) => state.running.as_ref().is_none_or(|r| r.exited.is_cancelled() || r.url != *url),
            Err(_) => true,
        };
        if gone {
            return true;
        }
        let broken = WORKER_GONE.iter().any(|gone| error.starts_with(gone))
            || match self.health(url).await {
                Ok(health) => !matches!(health["status"].as_str(), Some("READY" | "BUSY" | "STARTING")),
                // Refused: another run's check has just killed it. Slow is only busy.
                Err(e) => e.is_connect(),
            };
        if broken {
            let state = self.state.lock().await;
            if let Some(running) = state.running.as_ref().filter(|r| r.url == *url) {
                tracing::warn!(model = %self.launch.model, "killing the model server: it reports UNHEALTHY (its worker died)");
                signal(running.pid, nix::sys::signal::Signal::SIGKILL);
            }
        }
        broken
    }

    /// The error of a run whose server went away: `MODEL_CRASHED`, with its last lines.
    pub fn crashed(&self, cause: &str) -> ModelError {
        let tail = self.tail(5);
        ModelError {
            code: "MODEL_CRASHED".into(),
            message: format!("the model server of {} crashed ({cause}); its last lines:\n{tail}", self.launch.model),
        }
    }

    /// Notes what came of a process that exited since the last look (a crash counts).
    fn settle_exit(&self, state: &mut State) {
        let Some(running) = state.running.as_ref().filter(|r| r.exited.is_cancelled()) else { return };
        if !running.stopping.load(Ordering::Acquire) {
            state.failures += 1;
            state.not_before = Some(Instant::now() + backoff(state.failures));
        }
        state.running = None;
        self.gauge("stopped");
    }

    /// Whether it is kept running even when idle.
    pub fn is_kept(&self) -> bool {
        self.kept.load(Ordering::Acquire)
    }

    /// Keeps it running even when idle (booting it now if it is not running), or leaves it
    /// to stop once idle for its `idle_seconds`.
    pub fn set_kept(self: &Arc<Self>, kept: bool) {
        if self.kept.swap(kept, Ordering::AcqRel) != kept {
            tracing::info!(model = %self.launch.model, kept, "the model server is kept running now, or no longer");
            if kept {
                self.clone().boot_in_background(Duration::ZERO);
            }
        }
    }

    fn boot_in_background(self: Arc<Self>, after: Duration) {
        tokio::spawn(async move {
            tokio::select! {
                () = self.shutdown.cancelled() => {}
                () = tokio::time::sleep(after) => {
                    match self.ready().await {
                        Ok((_, lease)) => drop(lease),
                        Err(e) => tracing::warn!(model = %self.launch.model, error = %e, "the model kept by min_instances did not boot"),
                    }
                }
            }
        });
    }

    /// Starts the process and waits until it is ready. A server that exits because another
    /// process took its port between the choice and its own bind is started again on another
    /// port (up to [`PORT_TRIES`] in all): that is no failure of the model.
    async fn boot(&self) -> Result<Running, ModelError> {
        let model = &self.launch.model;
        let began = Instant::now();
        self.noted(|r| r.booted_at = Some(bson::DateTime::now()));
        self.gauge("booting");
        tracing::info!(%model, version = %self.launch.project.version, "starting the model server");
        *self.boot_log.lock().unwrap_or_else(|p| p.into_inner()) = BootLog::default();
        self.boot_note(&format!("booting the model server of {model} (version {})", self.launch.project.version), true);
        let mut tries = 1;
        loop {
            let port = free_port().map_err(|e| setup_failed(model, &format!("no free port: {e}")))?;
            match self.boot_on(port, began).await {
                Err(BootFailure::PortTaken) if tries < PORT_TRIES => {
                    tracing::warn!(%model, port, "another process took the model server's port before it bound it; starting it on another");
                    tries += 1;
                }
                Err(BootFailure::PortTaken) => {
                    let e = setup_failed(model, &format!("another process took its port {PORT_TRIES} times in a row"));
                    self.boot_note(&format!("the model server did not boot: {}", e.message), false);
                    self.exited("setup_failed");
                    return Err(e);
                }
                Err(BootFailure::Failed(e)) => return Err(e),
                Ok(running) => return Ok(running),
            }
        }
    }

    /// One start of the server on `port` (see [`Self::boot`]).
    async fn boot_on(&self, port: u16, began: Instant) -> Result<Running, BootFailure> {
        let model = &self.launch.model;
        let tmp = std::env::temp_dir().join(format!("runner-cog-{}-{}-{port}", slug(model), std::process::id()));
        std::fs::create_dir_all(&tmp).map_err(|e| setup_failed(model, &format!("no TMPDIR {}: {e}", tmp.display())))?;
        let mut child = self
            .command(port, &tmp)
            .spawn()
            .map_err(|e| setup_failed(model, &format!("{} did not start: {e}", self.launch.python.display())))?;
        let pid = child.id().unwrap_or_default();
        if let Some(out) = child.stdout.take() {
            tokio::spawn(keep_lines(out, model.clone(), self.lines.clone(), self.boot_log.clone()));
        }
        if let Some(err) = child.stderr.take() {
            tokio::spawn(keep_lines(err, model.clone(), self.lines.clone(), self.boot_log.clone()));
        }
        let exited = CancellationToken::new();
        // Until the server is ready, an exit is the boot's to tell (a failed setup, a port
        // taken), not the exit watcher's to count as a crash.
        let stopping = Arc::new(AtomicBool::new(true));
        tokio::spawn(watch_exit(child, tmp, exited.clone(), stopping.clone(), self.me.clone()));
        let url = Url::parse(&format!("http://127.0.0.1:{port}/")).expect("a loopback URL");
        let running = Running { url, pid, exited, stopping, started: Instant::now() };
        let ready = self.await_ready(&running).await.and_then(|()| {
            running.stopping.store(false, Ordering::SeqCst);
            match running.exited.is_cancelled() {
                true => Err(setup_failed(model, "the server exited as it became ready")),
                false => Ok(()),
            }
        });
        match ready {
            Ok(()) => {
                let took = began.elapsed();
                self.metrics.model_booted(model, took);
                self.noted(|r| r.boot_seconds = Some(took.as_secs_f64()));
                self.gauge("ready");
                tracing::info!(%model, took = ?took, "the model server is ready");
                self.boot_note(&format!("the model server is ready after {:.1} s", took.as_secs_f64()), false);
                tokio::spawn(watch_running(self.me.clone(), running.exited.clone(), running.started));
                Ok(running)
            }
            Err(_) if running.exited.is_cancelled() && port_in_use(port) => Err(BootFailure::PortTaken),
            Err(e) => {
                running.stopping.store(true, Ordering::Release);
                signal(pid, nix::sys::signal::Signal::SIGKILL);
                tracing::warn!(%model, error = %e, "the model server did not boot");
                self.boot_note(&format!("the model server did not boot: {}", e.message), false);
                self.exited("setup_failed");
                Err(BootFailure::Failed(e))
            }
        }
    }

    fn command(&self, port: u16, tmp: &std::path::Path) -> Command {
        let launch = &self.launch;
        let bin = launch.python.parent().map(|p| p.display().to_string()).unwrap_or_default();
        let mut command = Command::new(&launch.python);
        command
            .args(["-m", "cog.server.http", "--host", "127.0.0.1"])
            .current_dir(&launch.project.dir)
            .env("PORT", port.to_string())
            .env("TMPDIR", tmp)
            // coglet starts its worker as a bare `python`: the venv must come first on PATH.
            .env("PATH", format!("{bin}:{}", std::env::var("PATH").unwrap_or_default()))
            .env("COG_MAX_CONCURRENCY", launch.project.concurrency.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        match launch.mode {
            Mode::Predict => {
                command.env("COG_PREDICT_TYPE_STUB", launch.project.predict.as_deref().unwrap_or_default())
            }
            Mode::Train => command
                .env("COG_TRAIN_TYPE_STUB", launch.project.train.as_deref().unwrap_or_default())
                .args(["--x-mode", "train"]),
        };
        if let Some(timeout) = launch.settings.setup_timeout {
            command.env("COG_SETUP_TIMEOUT", timeout.as_secs().max(1).to_string());
        }
        if let Some(url) = &launch.upload_url {
            command.args(["--upload-url", url]);
        }
        command
    }

    /// Polls the health check until `READY`; a setup that failed, or a process that exited,
    /// is `MODEL_SETUP_FAILED` with the setup's logs (or the process's last lines).
    async fn await_ready(&self, running: &Running) -> Result<(), ModelError> {
        let model = &self.launch.model;
        loop {
            if running.exited.is_cancelled() {
                let tail = self.tail(10);
                return Err(setup_failed(
                    model,
                    &format!("the server exited during its setup; its last lines:\n{tail}"),
                ));
            }
            if let Ok(health) = self.health(&running.url).await {
                match health["status"].as_str() {
                    Some("READY" | "BUSY") => return Ok(()),
                    Some("SETUP_FAILED" | "UNHEALTHY" | "DEFUNCT") => {
                        let logs = health.pointer("/setup/logs").and_then(|l| l.as_str()).unwrap_or_default();
                        let tail = last_lines(logs, 10);
                        return Err(setup_failed(model, &format!("its setup failed:\n{tail}")));
                    }
                    _ => {}
                }
            }
            tokio::select! {
                () = tokio::time::sleep(BOOT_POLL) => {}
                () = running.exited.cancelled() => {}
                () = self.shutdown.cancelled() => return Err(setup_failed(model, "the runner is stopping")),
            }
        }
    }

    async fn health(&self, url: &Url) -> Result<serde_json::Value, reqwest::Error> {
        let url = url.join("health-check").expect("a relative path joins");
        self.http.get(url).send().await?.json().await
    }

    /// Stops the server, if one runs: SIGTERM, SIGKILL after [`STOP_GRACE`]. Stopped as
    /// `idle`, only if nothing is in flight once it holds the state (a lease is taken under
    /// it, so no job can get the server meanwhile). Whether no server runs now.
    pub async fn stop(&self, why: &'static str) -> bool {
        let mut state = self.state.lock().await;
        if why == "idle" && self.in_flight.load(Ordering::Acquire) > 0 {
            return false;
        }
        let Some(running) = state.running.take() else { return true };
        if running.exited.is_cancelled() {
            return true;
        }
        self.gauge("stopping");
        running.stopping.store(true, Ordering::Release);
        tracing::info!(model = %self.launch.model, why, "stopping the model server");
        signal(running.pid, nix::sys::signal::Signal::SIGTERM);
        if tokio::time::timeout(STOP_GRACE, running.exited.cancelled()).await.is_err() {
            signal(running.pid, nix::sys::signal::Signal::SIGKILL);
            running.exited.cancelled().await;
        }
        self.exited(why);
        self.gauge("stopped");
        true
    }

    /// Kills the server after a failed health check: its exit is then a crash.
    async fn kill(&self, why: &'static str) {
        let state = self.state.lock().await;
        if let Some(running) = state.running.as_ref() {
            tracing::warn!(model = %self.launch.model, why, "killing the model server");
            signal(running.pid, nix::sys::signal::Signal::SIGKILL);
        }
    }

    fn gauge(&self, state: &'static str) {
        let mut report = self.report.lock().unwrap_or_else(|p| p.into_inner());
        // (A new instance's report has no state yet: it is counted for the first time.)
        let from = Some(report.state.as_str()).filter(|s| !s.is_empty());
        self.metrics.shift_model_instance(&self.launch.model, &report.version, from, state);
        report.state = state.to_owned();
    }

    /// From `ready` to `busy` as its first run in flight begins, and back as its last ends;
    /// nothing if it has left `from` meanwhile (a crash, a stop).
    fn shift(&self, from: &str, to: &'static str) {
        let mut report = self.report.lock().unwrap_or_else(|p| p.into_inner());
        if report.state == from {
            self.metrics.shift_model_instance(&self.launch.model, &report.version, Some(from), to);
            report.state = to.to_owned();
        }
    }

    fn tail(&self, n: usize) -> String {
        let lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        let skip = lines.len().saturating_sub(n);
        lines.iter().skip(skip).cloned().collect::<Vec<_>>().join("\n")
    }
}

/// Watches a running instance: its health, and whether it has been idle long enough to stop.
async fn watch_running(instance: Weak<Instance>, exited: CancellationToken, started: Instant) {
    let mut silent_since: Option<Instant> = None;
    loop {
        tokio::select! {
            () = exited.cancelled() => return,
            () = tokio::time::sleep(WATCH_EVERY) => {}
        }
        let Some(instance) = instance.upgrade() else { return };
        let settings = &instance.launch.settings;
        let idle_for = instance.last_used.lock().unwrap_or_else(|p| p.into_inner()).max(started).elapsed();
        if !instance.is_kept() && instance.in_flight.load(Ordering::Acquire) == 0 && idle_for >= settings.idle {
            match instance.stop("idle").await {
                true => return,
                false => continue,
            }
        }
        let url = match instance.state.try_lock() {
            Ok(state) => match state.running.as_ref() {
                Some(r) if !r.exited.is_cancelled() => r.url.clone(),
                _ => return,
            },
            Err(_) => continue,
        };
        match instance.health(&url).await {
            Ok(health) if matches!(health["status"].as_str(), Some("READY" | "BUSY" | "STARTING")) => {
                silent_since = None
            }
            Ok(_) => {
                instance.kill("it reports UNHEALTHY (its worker died)").await;
                return;
            }
            Err(_) => {
                let since = *silent_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= SILENCE_LIMIT {
                    instance.kill("its health checks went unanswered").await;
                    return;
                }
            }
        }
    }
}

/// Waits for the process to exit: removes its `TMPDIR`, fires `exited`, and (a crash) counts
/// it and boots again after the backoff when `min_instances` asks for a running instance.
async fn watch_exit(
    mut child: tokio::process::Child,
    tmp: PathBuf,
    exited: CancellationToken,
    stopping: Arc<AtomicBool>,
    instance: Weak<Instance>,
) {
    let status = child.wait().await;
    std::fs::remove_dir_all(&tmp).ok();
    exited.cancel();
    let Some(instance) = instance.upgrade() else { return };
    if stopping.load(Ordering::SeqCst) {
        return;
    }
    let model = &instance.launch.model;
    tracing::warn!(%model, status = ?status.ok(), "the model server exited by itself");
    instance.exited("crashed");
    instance.gauge("stopped");
    if instance.is_kept() {
        let failures = {
            let mut state = instance.state.lock().await;
            instance.settle_exit(&mut state);
            state.failures
        };
        instance.clone().boot_in_background(backoff(failures));
    }
}

/// The version an instance is shown under: a trainer is an instance of its own beside the
/// predictor of the same version.
fn version_label(launch: &Launch) -> String {
    match launch.mode {
        Mode::Predict => launch.project.version.clone(),
        Mode::Train => format!("{}-train", launch.project.version),
    }
}

/// 1 s after the first failure in a row, doubling to 60 s.
fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(6);
    (BACKOFF_FIRST * 2u32.pow(doublings)).min(BACKOFF_MAX)
}

fn setup_failed(model: &ModelRef, why: &str) -> ModelError {
    ModelError { code: "MODEL_SETUP_FAILED".into(), message: format!("the model {model} did not boot: {why}") }
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn slug(model: &ModelRef) -> String {
    model.to_string().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect()
}

/// How many ports a boot tries when another process takes each before the server binds it.
const PORT_TRIES: u32 = 3;

/// Why one start of a server did not give a ready server.
enum BootFailure {
    /// Another process took the port between its choice and the server's bind.
    PortTaken,
    /// The model did not boot.
    Failed(ModelError),
}

impl From<ModelError> for BootFailure {
    fn from(e: ModelError) -> Self {
        Self::Failed(e)
    }
}

/// The lowest port a server is given.
const LOWEST_PORT: u16 = 10_000;

/// A loopback port free now, for a server to bind a moment later. Chosen below the kernel's
/// ephemeral range (`net.ipv4.ip_local_port_range`), so that no port the kernel hands out
/// meanwhile (another process's bind to port 0, an outgoing connection's own port) takes it
/// in between; from that range only where the system leaves nothing below it. The test and
/// measurement tooling (`harness::servers::free_port`) chooses its servers' ports here too.
pub fn free_port() -> std::io::Result<u16> {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    if ephemeral_low > LOWEST_PORT {
        for _ in 0..64 {
            let port = rand::random_range(LOWEST_PORT..ephemeral_low);
            if !port_in_use(port) {
                return Ok(port);
            }
        }
    }
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Whether a process listens on (or holds) loopback `port`: it cannot be bound now.
fn port_in_use(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_err()
}

fn signal(pid: u32, signal: nix::sys::signal::Signal) {
    let Ok(pid) = i32::try_from(pid) else { return };
    if let Err(e) = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal) {
        tracing::debug!(pid, ?signal, error = %e, "signal not delivered (the process is gone?)");
    }
}

/// Logs each line of one of the server's pipes under its model's name and keeps the last ones
/// (and, while a boot goes on, the boot's).
async fn keep_lines<R: tokio::io::AsyncRead + Unpin>(
    pipe: R,
    model: ModelRef,
    kept: Arc<Mutex<VecDeque<String>>>,
    boot: Arc<Mutex<BootLog>>,
) {
    let mut lines = BufReader::new(pipe).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::debug!(%model, line = %line, "model server output");
        {
            let mut boot = boot.lock().unwrap_or_else(|p| p.into_inner());
            if boot.open {
                boot.push(&line);
            }
        }
        let mut kept = kept.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() == KEPT_LINES {
            kept.pop_front();
        }
        kept.push_back(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_from_a_second_to_a_minute() {
        let steps: Vec<u64> = (1..=9).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(steps, vec![1, 2, 4, 8, 16, 32, 60, 60, 60]);
    }

    #[test]
    fn errors_keep_the_last_lines() {
        assert_eq!(last_lines("a\nb\nc\nd", 2), "c\nd");
        assert_eq!(last_lines("a", 5), "a");
    }

    #[test]
    fn a_server_port_is_below_the_ephemeral_range() {
        let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").expect("Linux");
        let low: u16 = range.split_whitespace().next().and_then(|p| p.parse().ok()).expect("a port");
        for _ in 0..20 {
            let port = free_port().expect("a port");
            assert!((LOWEST_PORT..low).contains(&port), "{port} below {low}");
        }
    }

    /// An instance of the fixture `echo` (a copy, with its `cog.yaml`) with the installed coglet.
    fn echo_instance() -> Arc<Instance> {
        let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cog/echo");
        let dir = std::env::temp_dir().join(format!("runner-unit-echo-{}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).expect("a project directory");
        std::fs::copy(fixture.join("predict.py"), dir.join("predict.py")).expect("copy predict.py");
        std::fs::write(dir.join("cog.yaml"), "predict: \"predict.py:Predictor\"\n").expect("write cog.yaml");
        let launch = Launch {
            model: "acme/echo".parse().expect("a model"),
            python: testkit::installed("COG_PYTHON").into(),
            project: CogProject::load(&dir).expect("the echo project"),
            mode: Mode::Predict,
            upload_url: None,
            settings: InstanceSettings::default(),
        };
        Instance::new(launch, RunnerMetrics::new(), CancellationToken::new())
    }

    #[tokio::test]
    async fn a_server_whose_port_another_process_took_is_told_from_a_failed_setup() {
        let instance = echo_instance();
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
        let port = taken.local_addr().expect("an address").port();
        let started = instance.boot_on(port, Instant::now()).await;
        assert!(matches!(started, Err(BootFailure::PortTaken)), "the port was taken, not the model broken");
        drop(taken);
        // The same port once free: the server boots on it.
        let running = instance.boot_on(port, Instant::now()).await.map_err(|_| "no boot").expect("a ready server");
        assert_eq!(running.url.port(), Some(port));
        running.stopping.store(true, Ordering::Release);
        signal(running.pid, nix::sys::signal::Signal::SIGKILL);
        std::fs::remove_dir_all(&instance.launch.project.dir).ok();
    }
}
