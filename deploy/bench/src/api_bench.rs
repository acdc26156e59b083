//! `bench api`: the api alone (in this process; no runner, so created jobs wait in the
//! stream) under a closed loop of 1, 8, 32 and 128 concurrent clients, `--seconds` per level:
//! predictions created per second (`POST`, demo/echo, bearer auth, a rate limit too high to
//! interfere), `GET /v1/predictions/{id}`, and a list page (`GET /v1/predictions?limit=20`),
//! each with its latency percentiles.

use std::time::Duration;

use futures::{StreamExt, stream};
use serde_json::{Value, json};
use tokio::{net::TcpListener, time::Instant};
use tokio_util::sync::CancellationToken;

use crate::{
    setup::Setup,
    stats::{Samples, ms},
};

/// Options of `bench api`.
#[derive(clap::Args)]
pub struct Options {
    /// Seconds per endpoint and concurrency level.
    #[arg(long, default_value_t = 4)]
    seconds: u64,
}

const LEVELS: [usize; 4] = [1, 8, 32, 128];

/// Requests per second and latencies of `request` at `clients` concurrent clients.
async fn closed_loop<F, Fut>(seconds: u64, clients: usize, request: F) -> anyhow::Result<(f64, Samples)>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Duration>>,
{
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let mut samples = Vec::new();
    let mut requests = stream::iter(std::iter::repeat(())).map(|()| request()).buffer_unordered(clients);
    while let Some(r) = requests.next().await {
        samples.push(r?);
        if Instant::now() >= deadline {
            break;
        }
    }
    Ok((samples.len() as f64 / started.elapsed().as_secs_f64(), Samples::new(samples)))
}

/// Sends `request` and returns how long the answer took, which must have status `expect`.
async fn timed(request: reqwest::RequestBuilder, expect: u16) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let response = request.send().await?;
    anyhow::ensure!(response.status().as_u16() == expect, "answered {}", response.status());
    response.bytes().await?;
    Ok(started.elapsed())
}

/// A demo/echo create request.
fn create_request(http: &reqwest::Client, url: &str, key: &str) -> reqwest::RequestBuilder {
    http.post(url)
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(r#"{"input":{"prompt":"bench","repeat":2}}"#)
}

/// The api measurements (separate from [`run`] so a future `bench standard` can reuse them).
pub async fn measure(seconds: u64) -> anyhow::Result<Value> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let setup = Setup::new(&[("PUBLIC_BASE_URL", &base), ("DEFAULT_RATE_LIMIT_RPM", "100000000")]).await?;
    runner::registry::register(&setup.store, &runner::models::builtin::all()).await?;
    let config = api::config::ApiConfig::from_env(&setup.env())?;
    let key = api::admin::bootstrap(&config, "bench").await?.key.expose().to_owned();
    let stop = CancellationToken::new();
    tokio::spawn(api::serve(config, listener, stop.clone()));
    let http = reqwest::Client::new();
    let create_url = format!("{base}/v1/models/demo/echo/predictions");
    timed(create_request(&http, &create_url, &key), 201).await?;
    let first: Value =
        http.get(format!("{base}/v1/predictions?limit=1")).bearer_auth(&key).send().await?.json().await?;
    let id = first["results"][0]["id"].as_str().unwrap_or_default().to_owned();
    let get_url = format!("{base}/v1/predictions/{id}");
    let list_url = format!("{base}/v1/predictions?limit=20");

    let mut rows = Vec::new();
    let mut table = String::from(
        "api alone, closed loop\n| request | clients | per second | p50 | p95 | p99 |\n|---|---|---|---|---|---|\n",
    );
    for (name, url) in [("create", create_url.as_str()), ("get", get_url.as_str()), ("list", list_url.as_str())] {
        for clients in LEVELS {
            // A fresh client per level: the previous level ends by dropping requests still in
            // flight, and their connections must not carry over.
            let http = reqwest::Client::builder().pool_max_idle_per_host(256).build()?;
            let (per_second, latency) = match name {
                "create" => {
                    closed_loop(seconds, clients, || timed(create_request(&http, &create_url, &key), 201)).await?
                }
                _ => closed_loop(seconds, clients, || timed(http.get(url).bearer_auth(&key), 200)).await?,
            };
            let (p50, p95, p99) =
                (ms(latency.percentile(50.0)), ms(latency.percentile(95.0)), ms(latency.percentile(99.0)));
            table.push_str(&format!("| {name} | {clients} | {per_second:.0} | {p50} ms | {p95} ms | {p99} ms |\n"));
            rows.push(json!({"request": name, "clients": clients, "per_second": per_second, "p50_ms": p50, "p95_ms": p95, "p99_ms": p99}));
        }
    }
    stop.cancel();
    println!("{}", table.trim_end());
    Ok(json!({"scenario": "api", "seconds_per_level": seconds, "results": rows}))
}

/// `bench api`
pub async fn run(options: Options) -> anyhow::Result<Value> {
    measure(options.seconds).await
}
