//! Steady load for a fault run: predictions of `demo/sleep` (1 s, each with a webhook for
//! `start` and `completed`) created at a fixed rate whatever the answers take, round-robin over
//! the api replicas, and each accepted one read back once. Every answer is kept with its time,
//! so the report can tell 5xx inside a fault's window from 5xx outside it. A scenario may send
//! other creates at the same rate ([`run_with`], as the rollout does).

use std::{sync::Arc, time::Duration};

use serde_json::{Value, json};
use tokio::{task::JoinSet, time::Instant};

/// The body of every create.
fn create_body(webhook: &str) -> Value {
    json!({
        "input": {"seconds": 1},
        "webhook": webhook,
        "webhook_events_filter": ["start", "completed"],
    })
}

/// What one create got.
#[derive(Clone, Debug)]
pub enum Answer {
    /// 201, with the prediction's id.
    Accepted(String),
    /// Another status code.
    Status(u16),
    /// No answer: refused, reset or timed out.
    Unanswered,
}

/// One create and its read-back.
#[derive(Clone, Debug)]
pub struct Attempt {
    /// When the create was sent.
    pub at: Instant,
    /// What it got.
    pub answer: Answer,
    /// How long the create took.
    pub create: Duration,
    /// The read-back's status and time, for an accepted create.
    pub get: Option<(u16, Duration)>,
    /// The `priority` the create asked for, if it named one.
    pub asked_priority: Option<String>,
    /// The `priority` the read-back showed.
    pub shown_priority: Option<String>,
    /// Whether the create's answer carried `Retry-After`.
    pub retry_after: bool,
    /// Its number in the load (its `Idempotency-Key` in a keyed load).
    pub n: usize,
}

/// The `n`-th create of a run: the path under the api's base URL, and the body.
pub type Target = Arc<dyn Fn(usize) -> (String, Value) + Send + Sync>;

/// Sends `rate` creates a second for `seconds` seconds of `demo/sleep` (1 s).
pub async fn run(apis: &[String], key: &str, webhook: &str, rate: u64, seconds: u64) -> anyhow::Result<Vec<Attempt>> {
    let body = create_body(webhook);
    let target: Target = Arc::new(move |_| (LOAD_PATH.to_owned(), body.clone()));
    run_with(apis, key, rate, seconds, target).await
}

/// [`run`], each create with its own `Idempotency-Key` ([`idempotency_key`] of its number).
pub async fn run_keyed(
    apis: &[String],
    key: &str,
    webhook: &str,
    rate: u64,
    seconds: u64,
) -> anyhow::Result<Vec<Attempt>> {
    let body = create_body(webhook);
    let target: Target = Arc::new(move |_| (LOAD_PATH.to_owned(), body.clone()));
    sent(apis, key, rate, seconds, target, true).await
}

/// The path of the load's creates.
pub const LOAD_PATH: &str = "/v1/models/demo/sleep/predictions";

/// The `Idempotency-Key` of the `n`-th create of a keyed load.
pub fn idempotency_key(n: usize) -> String {
    format!("load-{n}")
}

/// The body of the load's creates, for `webhook` (sent again with a create's key).
pub fn body(webhook: &str) -> Value {
    create_body(webhook)
}

/// Sends `rate` creates a second for `seconds` seconds, each what `target` makes of its number.
pub async fn run_with(
    apis: &[String],
    key: &str,
    rate: u64,
    seconds: u64,
    target: Target,
) -> anyhow::Result<Vec<Attempt>> {
    sent(apis, key, rate, seconds, target, false).await
}

async fn sent(
    apis: &[String],
    key: &str,
    rate: u64,
    seconds: u64,
    target: Target,
    keyed: bool,
) -> anyhow::Result<Vec<Attempt>> {
    let http =
        reqwest::Client::builder().timeout(Duration::from_secs(10)).connect_timeout(Duration::from_secs(2)).build()?;
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = JoinSet::new();
    for n in 0..(rate * seconds) as usize {
        ticker.tick().await;
        let base = apis[n % apis.len()].clone();
        let (path, body) = target(n);
        let (http, key) = (http.clone(), key.to_owned());
        let idempotency = keyed.then(|| idempotency_key(n));
        tasks.spawn(async move { attempt(&http, &base, &path, &key, &body, idempotency, n).await });
    }
    let mut attempts = Vec::new();
    while let Some(attempt) = tasks.join_next().await {
        attempts.push(attempt?);
    }
    attempts.sort_by_key(|a| a.at);
    Ok(attempts)
}

async fn attempt(
    http: &reqwest::Client,
    base: &str,
    path: &str,
    key: &str,
    body: &Value,
    idempotency: Option<String>,
    n: usize,
) -> Attempt {
    let at = Instant::now();
    let mut request = http.post(format!("{base}{path}")).bearer_auth(key).json(body);
    if let Some(idempotency) = &idempotency {
        request = request.header("idempotency-key", idempotency);
    }
    let sent = request.send().await;
    let create = at.elapsed();
    let retry_after = sent.as_ref().is_ok_and(|r| r.headers().contains_key("retry-after"));
    let answer = match sent {
        Ok(response) if response.status().as_u16() == 201 => match response.json::<Value>().await {
            Ok(prediction) => Answer::Accepted(prediction["id"].as_str().unwrap_or_default().to_owned()),
            Err(_) => Answer::Unanswered,
        },
        Ok(response) => Answer::Status(response.status().as_u16()),
        Err(_) => Answer::Unanswered,
    };
    let (mut get, mut shown_priority) = (None, None);
    if let Answer::Accepted(id) = &answer {
        let started = Instant::now();
        let read = http.get(format!("{base}/v1/predictions/{id}")).bearer_auth(key).send().await;
        let (status, took) = (read.as_ref().map_or(0, |r| r.status().as_u16()), started.elapsed());
        if let Ok(response) = read
            && let Ok(body) = response.json::<Value>().await
        {
            shown_priority = body["priority"].as_str().map(str::to_owned);
        }
        get = Some((status, took));
    }
    let asked_priority = body["priority"].as_str().map(str::to_owned);
    Attempt { at, answer, create, get, asked_priority, shown_priority, retry_after, n }
}
