//! A test's private database and NATS prefix, with helpers to create predictions and start
//! runners in-process or as child processes.

use std::{collections::HashMap, time::Duration};

use common::{
    bus::Bus,
    config::Env,
    domain::{AccountId, Prediction, PredictionId},
    samples,
    store::Store,
};
use serde_json::Value;
use testkit::{TestContext, eventually};
use tokio_util::sync::CancellationToken;

pub struct Fixture {
    pub store: Store,
    pub bus: Bus,
    pub vars: HashMap<String, String>,
    /// The test's names (database, prefix) and servers.
    pub ctx: TestContext,
    shutdown: CancellationToken,
}

impl Fixture {
    pub async fn new(extra: &[(&str, &str)]) -> Self {
        let ctx = TestContext::new();
        let mut settings = vec![
            ("RUNNER_ACK_WAIT_SECONDS", "2"),
            ("RUNNER_SHUTDOWN_GRACE_SECONDS", "1"),
            ("RUNNER_RECONCILE_SECONDS", "0.2"),
        ];
        settings.extend_from_slice(extra);
        let vars = ctx.env_vars(&settings);
        let store = ctx.store().await;
        store.ensure_indexes().await.expect("indexes");
        let bus = ctx.bus().await;
        Self { store, bus, vars, ctx, shutdown: CancellationToken::new() }
    }

    /// Starts a runner in this process serving `models`.
    pub fn start_runner(&self, models: &str) -> CancellationToken {
        self.start_runner_with(models, &[])
    }

    /// Starts a runner in this process serving `models`, with more settings.
    pub fn start_runner_with(&self, models: &str, extra: &[(&str, &str)]) -> CancellationToken {
        let mut vars = self.vars.clone();
        vars.insert("RUNNER_MODELS".into(), models.into());
        vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let config = runner::config::RunnerConfig::from_env(&Env::from_fn(|k| vars.get(k).cloned())).expect("config");
        let token = self.shutdown.child_token();
        let stop = token.clone();
        tokio::spawn(async move { runner::run(config, stop).await.expect("runner runs") });
        token
    }

    /// A runner process serving demo/sleep, with the fixture's settings and `extra`: one a
    /// test can kill, or stop and continue ([`signal`]).
    pub fn runner_process(&self, extra: &[(&str, &str)]) -> std::process::Child {
        std::process::Command::new(env!("CARGO_BIN_EXE_runner"))
            .env_clear()
            .envs(&self.vars)
            .envs(extra.iter().copied())
            .env("RUNNER_MODELS", "demo/sleep")
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start a runner process")
    }

    /// Stores a `starting` prediction (of a new account) without publishing its job.
    pub async fn store_prediction(&self, model: &str, input: Value, limit: Duration) -> Prediction {
        self.store_prediction_of(&AccountId::generate(), model, input, limit).await
    }

    /// Stores a `starting` prediction of `account` without publishing its job.
    pub async fn store_prediction_of(
        &self,
        account: &AccountId,
        model: &str,
        input: Value,
        limit: Duration,
    ) -> Prediction {
        self.store_prediction_at(account, common::domain::Priority::Normal, model, input, limit).await
    }

    /// Stores a `starting` prediction of `account` at `priority` without publishing its job.
    async fn store_prediction_at(
        &self,
        account: &AccountId,
        priority: common::domain::Priority,
        model: &str,
        input: Value,
        limit: Duration,
    ) -> Prediction {
        let model = model.parse().expect("model");
        let version = self.version_of(&model).await;
        self.store_prediction_as(account, priority, model, version, input, limit).await
    }

    /// Stores a `starting` prediction of `account` for `version` of `model` without publishing
    /// its job and without waiting for the model to be registered (a job that waits for its
    /// runner).
    pub async fn store_prediction_of_version(
        &self,
        account: &AccountId,
        model: &str,
        version: &str,
        input: Value,
        limit: Duration,
    ) -> Prediction {
        let model = model.parse().expect("model");
        let normal = common::domain::Priority::Normal;
        self.store_prediction_as(account, normal, model, version.into(), input, limit).await
    }

    async fn store_prediction_as(
        &self,
        account: &AccountId,
        priority: common::domain::Priority,
        model: common::domain::ModelRef,
        version: String,
        input: Value,
        limit: Duration,
    ) -> Prediction {
        let mut p = samples::starting_prediction(account.clone(), model, input).with_deadline(limit);
        p.version = version;
        p.priority = priority;
        self.store.predictions().insert(&p).await.expect("insert");
        p
    }

    /// Stores a prediction of `account` and publishes its job, as the api does.
    pub async fn create_of(&self, account: &AccountId, model: &str, input: Value) -> Prediction {
        let p = self.store_prediction_of(account, model, input, Duration::from_secs(1800)).await;
        self.publish_job(&p).await;
        p
    }

    /// Stores a prediction of `account` at `priority` and publishes its job, as the api does.
    pub async fn create_at(
        &self,
        account: &AccountId,
        priority: common::domain::Priority,
        model: &str,
        input: Value,
    ) -> Prediction {
        let p = self.store_prediction_at(account, priority, model, input, Duration::from_secs(1800)).await;
        self.publish_job(&p).await;
        p
    }

    /// Stores a prediction and publishes its job, as the api does.
    pub async fn create(&self, model: &str, input: Value) -> Prediction {
        let p = self.store_prediction(model, input, Duration::from_secs(1800)).await;
        self.publish_job(&p).await;
        p
    }

    /// The version a runner serves `model` as: a built-in model's derived one, or what the
    /// runner of a Cog model registered (waited for).
    pub async fn version_of(&self, model: &common::domain::ModelRef) -> String {
        if let Some(version) = builtin_version(model) {
            return version;
        }
        // A made-up version would name one no runner serves: its job would never be taken,
        // and a test of it would pass without testing anything.
        let registered =
            eventually(Duration::from_secs(60), || async { self.store.models().get(model).await.ok().flatten() }).await;
        registered
            .unwrap_or_else(|| {
                panic!("{model} is not registered: start its runner first, or name its version (store_prediction_of_version)")
            })
            .version
    }

    pub async fn publish_job(&self, p: &Prediction) {
        self.bus.publish_job(p).await.expect("publish job");
    }

    /// Waits until the prediction satisfies `done`, at most `limit`.
    pub async fn wait_until(
        &self,
        id: &PredictionId,
        limit: Duration,
        done: impl Fn(&Prediction) -> bool,
    ) -> Prediction {
        let found = eventually(limit, || async {
            let p = self.store.predictions().get(id).await.ok().flatten()?;
            done(&p).then_some(p)
        })
        .await;
        let found =
            found.unwrap_or_else(|| panic!("prediction {id} did not reach the expected state within {limit:?}"));
        self.whole(found).await
    }

    /// `p` with the values it keeps in the file store read back, as every answer shows it.
    pub async fn whole(&self, p: Prediction) -> Prediction {
        if p.spilled.is_empty() {
            return p;
        }
        let env = common::config::Env::from_fn(|k| self.vars.get(k).cloned());
        let config = common::config::CommonConfig::from_env(&env).expect("configuration");
        let files = common::files::Files::open(&self.store, &config.files).await.expect("the file store opens");
        common::files::payloads::Payloads::new(files).whole(p).await.expect("payloads read")
    }

    /// Waits until a runner consumes `model`'s jobs: a probe prediction of a new account runs
    /// to its end (at most a minute). A test that measures start delays waits for this rather
    /// than sleeping a second and hoping the runner was up by then on a slow machine.
    pub async fn await_consuming(&self, model: &str, input: Value) {
        let probe = self.create(model, input).await;
        let done = self.wait_until(&probe.id, Duration::from_secs(60), |p| p.status.is_terminal()).await;
        assert_eq!(done.status, common::domain::PredictionStatus::Succeeded, "the probe of {model} ran");
    }

    /// Waits until at least `n` of `created` run at once (at most a minute): the state a test
    /// sets up before its next step, not a fixed sleep that a slow machine outlasts.
    pub async fn await_running(&self, created: &[Prediction], n: usize) {
        let running = eventually(Duration::from_secs(60), || async {
            let mut running = 0;
            for p in created {
                let p = self.store.predictions().get(&p.id).await.ok().flatten()?;
                running += usize::from(p.status == common::domain::PredictionStatus::Processing);
            }
            (running >= n).then_some(())
        })
        .await;
        assert!(running.is_some(), "{n} of the {} predictions never ran at once", created.len());
    }

    pub async fn current(&self, id: &PredictionId) -> Prediction {
        self.store.predictions().get(id).await.expect("read").expect("exists")
    }
}

/// Milliseconds from a prediction's creation to its start.
pub fn start_delay(p: &Prediction) -> i64 {
    p.started_at.expect("started").timestamp_millis() - p.created_at.timestamp_millis()
}

/// `created`, each once it has ended (at most a minute each).
pub async fn finished(fixture: &Fixture, created: &[Prediction]) -> Vec<Prediction> {
    let mut done = Vec::new();
    for p in created {
        done.push(fixture.wait_until(&p.id, Duration::from_secs(60), |p| p.status.is_terminal()).await);
    }
    done
}

/// The version a runner serves a built-in model as (without `RUNNER_MODEL_VERSIONS`): jobs
/// are routed by it.
pub fn builtin_version(model: &common::domain::ModelRef) -> Option<String> {
    let builtin = runner::models::builtin::all().into_iter().find(|m| &m.descriptor().model == model);
    builtin.map(|m| m.descriptor().record(None).version)
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Sends `name` (`-STOP`, `-CONT`) to `process`: a stopped process runs no code, as one
/// starved of CPU, until it is continued.
pub fn signal(process: &std::process::Child, name: &str) {
    let sent = std::process::Command::new("kill").args([name, &process.id().to_string()]).status().expect("kill runs");
    assert!(sent.success(), "kill {name}");
}
