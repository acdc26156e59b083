//! The system under test: api, runner and notifier started in-process on one test's own
//! database and NATS prefix, with an account bootstrapped and its admin key at hand.

use std::{collections::HashMap, time::Duration};

use api::config::ApiConfig;
use common::{
    config::Env,
    domain::{ModelRef, WebhookSecret},
};
use reqwest::{Method, RequestBuilder, Response};
use serde_json::Value;
use testkit::{TestContext, eventually};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Which services to start, and settings to override.
pub struct Options {
    pub runner: bool,
    pub notifier: bool,
    pub env: Vec<(&'static str, String)>,
}

impl Default for Options {
    fn default() -> Self {
        Self { runner: true, notifier: true, env: Vec::new() }
    }
}

/// A running system.
pub struct System {
    pub base_url: String,
    pub vars: HashMap<String, String>,
    pub admin_key: String,
    pub secret: WebhookSecret,
    pub ctx: TestContext,
    http: reqwest::Client,
    shutdown: CancellationToken,
}

impl System {
    pub async fn start() -> Self {
        Self::start_with(Options::default()).await
    }

    pub async fn start_with(options: Options) -> Self {
        let ctx = TestContext::new();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind api");
        let base_url = format!("http://{}", listener.local_addr().expect("api address"));
        let mut extra: Vec<(&str, String)> = vec![
            ("PUBLIC_BASE_URL", base_url.clone()),
            // The tests read the api's figures beside its API, as on a developer's machine;
            // `readiness::metrics_*` hold the listener of its own that the shipped kits use.
            ("API_METRICS_BIND", "public".into()),
            ("NOTIFIER_ALLOW_PRIVATE_TARGETS", "true".into()),
            ("NOTIFIER_RETRY_SCHEDULE", "0.2,0.4".into()),
            ("SHUTDOWN_GRACE_SECONDS", "1".into()),
            ("RUNNER_SHUTDOWN_GRACE_SECONDS", "1".into()),
            ("NOTIFIER_SHUTDOWN_GRACE_SECONDS", "1".into()),
        ];
        // FILES_STORE=s3 among the options: this test's bucket on the S3 store, whatever the run's.
        if options.env.iter().any(|(k, v)| *k == "FILES_STORE" && v == "s3") {
            extra.extend(ctx.s3_env());
        } else {
            extra.extend(ctx.files_env());
        }
        extra.extend(options.env);
        let pairs: Vec<(&str, &str)> = extra.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let vars: HashMap<String, String> = ctx.env_vars(&pairs);
        let env = Env::from_fn(|k| vars.get(k).cloned());

        let api_config = ApiConfig::from_env(&env).expect("api configuration");
        let boot = api::admin::bootstrap(&api_config, "test-account").await.expect("bootstrap");
        let shutdown = CancellationToken::new();
        if options.runner {
            spawn_runner(&vars, &shutdown);
        }
        if options.notifier {
            let config = notifier::config::NotifierConfig::from_env(&env).expect("notifier configuration");
            let token = shutdown.clone();
            tokio::spawn(async move { notifier::run(config, token).await.expect("notifier runs") });
        }
        let token = shutdown.clone();
        tokio::spawn(async move { api::serve(api_config, listener, token).await.expect("api serves") });

        let system = Self {
            vars: vars.clone(),
            base_url,
            admin_key: boot.key.expose().to_owned(),
            secret: boot.secret,
            ctx,
            http: reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("client"),
            shutdown,
        };
        system.wait_until_ready(options.runner).await;
        system
    }

    async fn wait_until_ready(&self, models: bool) {
        let ready = eventually(Duration::from_secs(30), || async {
            let r = self.http.get(self.url("/ready")).send().await.ok()?;
            (r.status() == 200).then_some(())
        })
        .await;
        assert!(ready.is_some(), "the api did not become ready");
        if models {
            let store = self.ctx.store().await;
            for name in ["echo", "sleep", "fail", "text-to-image", "text-to-video"] {
                let model: ModelRef = format!("demo/{name}").parse().expect("valid");
                let registered =
                    eventually(Duration::from_secs(30), || async { store.models().get(&model).await.ok().flatten() })
                        .await;
                assert!(registered.is_some(), "the runner did not register {model}");
            }
        }
    }

    /// Starts another api replica on the same database and NATS prefix; returns its base URL.
    pub async fn start_another_api(&self) -> String {
        self.start_another_api_with(&[]).await
    }

    /// Starts another api replica with more (or other) settings; returns its base URL.
    pub async fn start_another_api_with(&self, extra: &[(&str, &str)]) -> String {
        self.launch_api(extra, None).await
    }

    /// Starts another api replica with `/metrics` on a listener of its own (or, with `metrics`
    /// false, `API_METRICS_BIND` unset: nowhere); returns its base URL and that listener's.
    pub async fn start_another_api_split(&self, metrics: bool) -> (String, Option<String>) {
        if !metrics {
            return (self.launch_api(&[("API_METRICS_BIND", "")], None).await, None);
        }
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind metrics");
        let addr = listener.local_addr().expect("metrics address").to_string();
        let base_url = self.launch_api(&[("API_METRICS_BIND", &addr)], Some(listener)).await;
        (base_url, Some(format!("http://{addr}")))
    }

    /// Starts an api replica on this system's database and prefix with `extra` settings (and
    /// `/metrics` on `metrics`, if given), and waits until it is ready; returns its base URL.
    async fn launch_api(&self, extra: &[(&str, &str)], metrics: Option<TcpListener>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind api");
        let base_url = format!("http://{}", listener.local_addr().expect("api address"));
        let mut vars = self.vars.clone();
        vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        vars.insert("PUBLIC_BASE_URL".into(), base_url.clone());
        let config = ApiConfig::from_env(&Env::from_fn(|k| vars.get(k).cloned())).expect("api configuration");
        let token = self.shutdown.clone();
        tokio::spawn(async move {
            let served = match metrics {
                Some(metrics) => api::serve_split(config, listener, Some(metrics), token).await,
                None => api::serve(config, listener, token).await,
            };
            served.expect("api serves")
        });
        let ready = eventually(Duration::from_secs(30), || async {
            let r = self.http.get(format!("{base_url}/ready")).send().await.ok()?;
            (r.status() == 200).then_some(())
        })
        .await;
        assert!(ready.is_some(), "the api at {base_url} did not become ready");
        base_url
    }

    /// The HTTP client of the tests.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// Starts a runner (for systems started without one).
    pub fn start_runner(&self) {
        spawn_runner(&self.vars, &self.shutdown);
    }

    /// Starts a runner with more settings (`RUNNER_MODELS`, `RUNNER_MODEL_VERSIONS`,
    /// `RUNNER_HARDWARE`, ...); cancel the token to stop it alone.
    pub fn start_runner_with(&self, extra: &[(&str, &str)]) -> CancellationToken {
        let mut vars = self.vars.clone();
        vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let token = self.shutdown.child_token();
        spawn_runner(&vars, &token);
        token
    }

    /// Starts a notifier with more (or other) settings (for systems started without one).
    pub fn start_notifier_with(&self, extra: &[(&str, &str)]) {
        let mut vars = self.vars.clone();
        vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let config = notifier::config::NotifierConfig::from_env(&Env::from_fn(|k| vars.get(k).cloned()))
            .expect("notifier configuration");
        let token = self.shutdown.clone();
        tokio::spawn(async move { notifier::run(config, token).await.expect("notifier runs") });
    }

    /// Registers the built-in models without running them, so predictions stay `starting`.
    pub async fn register_models_only(&self) {
        let store = self.ctx.store().await;
        runner::registry::register(&store, &runner::models::builtin::all(), &Default::default())
            .await
            .expect("register models");
    }

    /// A request with another key.
    pub fn with_key(&self, method: Method, path: &str, key: &str) -> RequestBuilder {
        self.http.request(method, self.url(path)).bearer_auth(key)
    }

    /// Creates (or reuses) another account and returns a new admin key of it.
    pub async fn bootstrap_account(&self, name: &str) -> String {
        let env = Env::from_fn(|k| self.vars.get(k).cloned());
        let config = ApiConfig::from_env(&env).expect("api configuration");
        let boot = api::admin::bootstrap(&config, name).await.expect("bootstrap");
        boot.key.expose().to_owned()
    }

    /// The current version of `model` (`owner/name`) once a runner has registered it (within
    /// 90 s: a Cog server's setup included).
    pub async fn registered_version(&self, model: &str) -> String {
        let found = testkit::eventually(Duration::from_secs(90), || async {
            let answer = self.get(&format!("/v1/models/{model}")).await;
            if answer.status() != 200 {
                return None;
            }
            answer.json_body().await["latest_version"]["id"].as_str().map(str::to_owned)
        })
        .await;
        found.unwrap_or_else(|| panic!("no runner registered {model}"))
    }

    /// Creates a prediction of `model` (`owner/name`) on `input` with `Prefer: wait=60`, expects
    /// 201, and returns it as answered (ended, unless the wait ran out).
    pub async fn run(&self, model: &str, input: Value) -> Value {
        let response = self
            .request(Method::POST, &format!("/v1/models/{model}/predictions"))
            .header("prefer", "wait=60")
            .json(&serde_json::json!({ "input": input }))
            .send()
            .await
            .expect("sent");
        assert_eq!(response.status(), 201, "a create of {model}");
        response.json_body().await
    }

    /// Sets the concurrency cap of the account `name` as `api admin set-concurrency` does.
    pub async fn set_max_concurrency(&self, name: &str, max: Option<u32>) {
        let env = Env::from_fn(|k| self.vars.get(k).cloned());
        let config = ApiConfig::from_env(&env).expect("api configuration");
        api::admin::set_max_concurrency(&config, name, max).await.expect("cap set");
    }

    /// The api's configuration, as the operator's commands read it.
    pub fn admin_config(&self) -> ApiConfig {
        self.admin_config_with(&[])
    }

    /// The operator's configuration with more (or other) settings.
    pub fn admin_config_with(&self, extra: &[(&str, &str)]) -> ApiConfig {
        let mut vars = self.vars.clone();
        vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        ApiConfig::from_env(&Env::from_fn(|k| vars.get(k).cloned())).expect("api configuration")
    }

    /// Prices the hardware pool `pool` as `api admin set-price` does.
    pub async fn set_price(&self, pool: &str, per_second: &str) {
        api::admin::set_price(&self.admin_config(), pool, per_second).await.expect("price set");
    }

    /// Sets the account `name`'s monthly budget as `api admin set-budget` does.
    pub async fn set_budget(&self, name: &str, monthly: &str) {
        api::admin::set_budget(&self.admin_config(), name, monthly).await.expect("budget set");
    }

    /// Writes a collection as `api admin collection put` does.
    pub async fn put_collection(&self, slug: &str, name: &str, models: &[&str]) {
        let env = Env::from_fn(|k| self.vars.get(k).cloned());
        let config = ApiConfig::from_env(&env).expect("api configuration");
        let models: Vec<String> = models.iter().map(|m| (*m).to_owned()).collect();
        api::admin::put_collection(&config, slug, name, "models to try", &models).await.expect("collection written");
    }

    /// The files of this system, opened with its own settings (its store, its bucket).
    pub async fn files(&self) -> common::files::Files {
        let env = Env::from_fn(|k| self.vars.get(k).cloned());
        let config = common::config::CommonConfig::from_env(&env).expect("configuration");
        common::files::Files::open(&self.ctx.store().await, &config.files).await.expect("the file store opens")
    }

    /// How many pieces of files' bytes the stores hold: GridFS chunks and S3 objects (every
    /// upload, finished or not).
    pub async fn stored_pieces(&self) -> usize {
        let db = self.ctx.store().await;
        let chunks = db.database().collection::<bson::Document>("files.chunks");
        let in_gridfs = chunks.count_documents(bson::doc! {}).await.expect("count chunks") as usize;
        let files = self.files().await;
        let in_s3 = match files.s3() {
            Some(s3) => s3.list_keys().await.expect("list the bucket").len(),
            None => 0,
        };
        in_gridfs + in_s3
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// A request carrying the admin key.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http.request(method, self.url(path)).bearer_auth(&self.admin_key)
    }

    /// A request without credentials.
    pub fn anonymous(&self, method: Method, path: &str) -> RequestBuilder {
        self.http.request(method, self.url(path))
    }

    /// POSTs JSON with the admin key.
    pub async fn post_json(&self, path: &str, body: &Value) -> Response {
        self.request(Method::POST, path)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("request sent")
    }

    pub async fn get(&self, path: &str) -> Response {
        self.request(Method::GET, path).send().await.expect("request sent")
    }

    /// Waits until the api's unlabelled metrics read `values` (each `(name, value)`), all in one
    /// scrape of `/metrics` (never shed), at most 30 s: a test reaches the state it sets up
    /// before its next step, rather than sleeping and hoping a slow machine got there.
    pub async fn await_metrics(&self, values: &[(&str, f64)]) {
        let reached = eventually(Duration::from_secs(30), || async {
            let text = self.get("/metrics").await.text().await.ok()?;
            let reads = |name: &str, value: f64| {
                text.lines()
                    .filter_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse::<f64>().ok())
                    .any(|v| v == value)
            };
            values.iter().all(|(name, value)| reads(name, *value)).then_some(())
        })
        .await;
        assert!(reached.is_some(), "the api's metrics never read {values:?}");
    }

    /// Polls the prediction until its status is terminal (at most `limit`).
    pub async fn wait_for_terminal(&self, id: &str, limit: Duration) -> Value {
        self.wait_for_terminal_as(&self.admin_key, id, limit).await
    }

    /// Polls the prediction with `key` until its status is terminal (at most `limit`).
    pub async fn wait_for_terminal_as(&self, key: &str, id: &str, limit: Duration) -> Value {
        eventually(limit, || async {
            let response = self.with_key(Method::GET, &format!("/v1/predictions/{id}"), key).send().await.ok()?;
            let body: Value = response.json_body().await;
            matches!(body["status"].as_str(), Some("succeeded" | "failed" | "canceled")).then_some(body)
        })
        .await
        .unwrap_or_else(|| panic!("prediction {id} did not finish within {limit:?}"))
    }
}

/// Starts a runner in-process with `vars`, stopped with `shutdown`.
pub fn spawn_runner(vars: &HashMap<String, String>, shutdown: &CancellationToken) {
    let env = Env::from_fn(|k| vars.get(k).cloned());
    let config = runner::config::RunnerConfig::from_env(&env).expect("runner configuration");
    let token = shutdown.clone();
    tokio::spawn(async move { runner::run(config, token).await.expect("runner runs") });
}

impl Drop for System {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Reading bodies in tests.
pub trait JsonBody {
    async fn json_body(self) -> Value;
}

impl JsonBody for Response {
    async fn json_body(self) -> Value {
        let bytes = self.bytes().await.expect("body read");
        serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&bytes)))
    }
}
