//! `bench api`: the api alone (a release process; no runner, so created jobs wait in the
//! stream) under a closed loop of 1, 8, 32 and 128 concurrent clients, `--seconds` per level:
//! `GET /v1/predictions/{id}`, a list page (`GET /v1/predictions?limit=20`, on an account of
//! 100 predictions) and predictions created per second (`POST`, demo/echo, bearer auth, a rate
//! limit too high to interfere), each with its latency percentiles, with MongoDB command
//! monitoring off as deployed. Creates run last, so the reads see a small collection. Each
//! level ends by letting requests in flight finish.

use std::sync::Mutex;

use anyhow::Context;
use futures::future::try_join_all;
use http::Method;
use serde_json::{Value, json};

use crate::measure::paced::{PACED_RATE, paced};
use crate::scenarios::baselines::{Baselines, LEVELS};
use crate::scenarios::create_vs_insert;
use harness::cluster::{Cluster, round};
use harness::load_client::{CREATE_BODY, Connection, Template, closed_loop};
use harness::stats::{Samples, ms};

/// Options of `bench api`.
#[derive(clap::Args)]
pub struct Options {
    /// Seconds per endpoint and concurrency level.
    #[arg(long, default_value_t = 4)]
    seconds: u64,
}

/// Predictions in the account whose list is measured.
const LISTED: usize = 100;

/// One endpoint at one level.
pub struct Row {
    /// `get`, `list` or `create`.
    pub request: &'static str,
    /// Concurrent clients.
    pub clients: usize,
    /// Answers per second.
    pub per_second: f64,
    /// Each answer's latency.
    pub latency: Samples,
    /// CPU microseconds the load tool itself spent per request (the harness's share, which
    /// the raw baselines' client pays too, for its own calls).
    pub client_cpu_us: f64,
}

/// The load tool's CPU per demo/echo create made alone, [`PACED_RATE`] a second for `seconds`
/// (an open loop, each on a free connection of a small pool): what a client pays for a POST
/// when it was idle before it, as the notifier's webhooks at that rate.
pub async fn paced_create_cpu_us(cluster: &Cluster, seconds: u64) -> anyhow::Result<f64> {
    let template =
        Template::new(Method::POST, &cluster.base, "/v1/models/demo/echo/predictions", &cluster.key)?.json(CREATE_BODY);
    let pool = Mutex::new(try_join_all((0..4).map(|_| Connection::open(&cluster.base))).await?);
    let create = |_| async {
        let free = pool.lock().expect("the pool's lock").pop();
        let mut connection = match free {
            Some(connection) => connection,
            None => Connection::open(&cluster.base).await?,
        };
        let (status, _) = connection.send(&template).await?;
        anyhow::ensure!(status == 201, "a paced create answered {status}");
        pool.lock().expect("the pool's lock").push(connection);
        anyhow::Ok(())
    };
    Ok(paced(seconds, PACED_RATE, create).await?.client_cpu_us)
}

/// Measures the api of `cluster`.
pub async fn measure(cluster: &Cluster, seconds: u64) -> anyhow::Result<Vec<Row>> {
    let base = &cluster.base;
    let config = api::config::ApiConfig::from_env(&cluster.setup.env())?;
    let list_key = api::admin::bootstrap(&config, "bench-list").await?.key.expose().to_owned();
    let create_path = "/v1/models/demo/echo/predictions";
    let mut connection = Connection::open(base).await?;
    let create_listed = Template::new(Method::POST, base, create_path, &list_key)?.json(CREATE_BODY);
    for _ in 0..LISTED {
        let (status, _) = connection.send(&create_listed).await?;
        anyhow::ensure!(status == 201, "a create for the listed account answered {status}");
    }
    let (_, first) = connection.send(&Template::new(Method::GET, base, "/v1/predictions?limit=1", &list_key)?).await?;
    let first: Value = serde_json::from_slice(&first)?;
    let id = first["results"][0]["id"].as_str().context("no prediction listed")?;
    let requests = [
        ("get", Template::new(Method::GET, base, &format!("/v1/predictions/{id}"), &list_key)?, 200),
        ("list", Template::new(Method::GET, base, "/v1/predictions?limit=20", &list_key)?, 200),
        ("create", Template::new(Method::POST, base, create_path, &cluster.key)?.json(CREATE_BODY), 201),
    ];
    let mut rows = Vec::new();
    for (request, template, expect) in &requests {
        for clients in LEVELS {
            let (per_second, latency, client_cpu_us) = closed_loop(seconds, clients, base, template, *expect).await?;
            rows.push(Row { request, clients, per_second, latency, client_cpu_us });
        }
    }
    Ok(rows)
}

/// The raw rate a row is compared with: inserts of a prediction for creates, finds by id for
/// reads, at the same number in flight.
fn baseline_of(row: &Row, baselines: &Baselines) -> Option<f64> {
    let rates = if row.request == "create" { &baselines.insert_prediction } else { &baselines.find };
    rates.get(&row.clients).copied()
}

/// The rows as JSON, with their ratios to the baselines when given.
pub fn json(rows: &[Row], baselines: Option<&Baselines>) -> Value {
    let rows: Vec<Value> = rows
        .iter()
        .map(|row| {
            let baseline = baselines.and_then(|b| baseline_of(row, b));
            json!({"request": row.request, "clients": row.clients, "per_second": row.per_second.round(),
                   "p50_ms": ms(row.latency.percentile(50.0)), "p95_ms": ms(row.latency.percentile(95.0)),
                   "p99_ms": ms(row.latency.percentile(99.0)),
                   "load_tool_cpu_us_per_request": row.client_cpu_us.round(),
                   "baseline": baseline.map(|_| if row.request == "create" { "mongodb_insert_prediction" } else { "mongodb_find_by_id" }),
                   "baseline_per_second": baseline.map(f64::round),
                   "ratio": baseline.map(|b| round(row.per_second / b, 3))})
        })
        .collect();
    json!(rows)
}

/// The rows as a table, with their ratios to the baselines when given.
pub fn table(rows: &[Row], baselines: Option<&Baselines>) -> String {
    let mut table = String::from(
        "| request | clients | per second | p50 | p95 | p99 | load tool CPU per request | raw rate, same in flight | ratio |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for row in rows {
        let (p50, p95, p99) =
            (ms(row.latency.percentile(50.0)), ms(row.latency.percentile(95.0)), ms(row.latency.percentile(99.0)));
        let (baseline, ratio) = match baselines.and_then(|b| baseline_of(row, b)) {
            Some(b) => {
                let name = if row.request == "create" { "prediction insert" } else { "find" };
                (format!("{b:.0} {name}/s"), format!("{:.2}", row.per_second / b))
            }
            None => ("-".into(), "-".into()),
        };
        table.push_str(&format!(
            "| {} | {} | {:.0} | {p50} ms | {p95} ms | {p99} ms | {:.0} µs | {baseline} | {ratio} |\n",
            row.request, row.clients, row.per_second, row.client_cpu_us
        ));
    }
    table
}

/// `bench api`
pub async fn run(options: Options) -> anyhow::Result<Value> {
    let cluster = Cluster::start(&harness::cluster::AS_DEPLOYED, false).await?;
    let measured = async {
        let rows = measure(&cluster, options.seconds).await?;
        let rounds = create_vs_insert::measure(&cluster, 3, 2).await?;
        anyhow::Ok((rows, rounds))
    }
    .await;
    cluster.stop().await?;
    let (rows, rounds) = measured?;
    println!("api alone, closed loop\n{}", table(&rows, None).trim_end());
    println!("\ncreates against raw inserts into the same collection\n{}", create_vs_insert::table(&rounds).trim_end());
    Ok(json!({"scenario": "api", "seconds_per_level": options.seconds, "results": json(&rows, None),
              "create_vs_insert_head_to_head": create_vs_insert::json(&rounds)}))
}
