//! `bench outputs`: file outputs of a real Cog model (the `images` fixture, `List[Path]`)
//! streamed through the runner into the file store (coglet's `--upload-url` to the runner's
//! callback receiver; see `runner::models::cog::uploads`).
//!
//! - **One large file** (`--mib`, 1 GiB by default): the runner's resident memory while it
//!   takes the file, sampled every 10 ms, against its memory just before (target: it grows by
//!   less than 64 MiB: the file streams, never held whole); and the transfer's time, from
//!   coglet's `PUT` to the file stored (the runner's `runner_output_upload_seconds`), against a
//!   raw write of the same bytes, their length declared as coglet declares it, to the same
//!   store by the load tool (target: at most 1.25 times as long). Three rounds, taking turns,
//!   each file deleted before the next; the figures are their medians (the memory, the most
//!   any round added). Beside it, the whole upload
//!   (the prediction's `predict_time` less the model's own time to write the file, which it
//!   logs): it adds coglet reading the file whole into its memory before its `PUT` (~2 s of
//!   CPU per GiB here), which no store or runner shortens.
//! - **Images at load**: predictions of 4 files of 8 MB each, 8 in flight at once
//!   (`--predictions` in all; the Cog server runs one at a time, the rest wait at the runner):
//!   predictions a second, MB/s of files stored, and the p50 and p99 of their latency.

use std::{path::Path, sync::Arc, time::Duration};

use anyhow::Context;
use bytes::Bytes;
use common::{
    domain::FileId,
    files::{FileBody, FileStore, Files, GridFsStore},
    links::Links,
};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::time::Instant;

use harness::{
    cluster::{AS_DEPLOYED, Cluster, round},
    cog_server::CogServer,
    processes::rss_kib,
    servers::S3Standin,
    stats::{Samples, median, ms},
};

/// What taking one file may add to the runner's resident memory.
pub const TARGET_ADDED_RSS_MIB: f64 = 64.0;
/// The longest a transfer through the runner (coglet's `PUT` to the file stored) may take against a raw
/// write of the same bytes.
pub const TARGET_TIME_RATIO: f64 = 1.25;
/// The Cog fixture whose output is a list of files (shared with the runner's tests).
const IMAGES_FIXTURE: &str = "runner/tests/fixtures/cog/images";
const MIB: usize = 1024 * 1024;

/// Options of `bench outputs`.
#[derive(clap::Args)]
pub struct Options {
    /// The size of the large file, in MiB.
    #[arg(long, default_value_t = 1024)]
    mib: usize,
    /// Predictions of 4 files of 8 MB each, 8 in flight.
    #[arg(long, default_value_t = 32)]
    predictions: usize,
    /// The file store to measure: gridfs (on the MongoDB the run uses) or s3 (S3Proxy, started
    /// for the run, as `deploy/local/up` keeps files).
    #[arg(long, default_value = "gridfs")]
    store: String,
}

/// `bench outputs`
pub async fn run(options: Options) -> anyhow::Result<Value> {
    let mut extra: Vec<(&str, String)> = AS_DEPLOYED.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
    let dir = std::env::temp_dir().join(format!("bench-outputs-{}", std::process::id()));
    let mut s3 = match options.store.as_str() {
        "s3" => Some(S3Standin::start(&dir).await?),
        "gridfs" => None,
        other => anyhow::bail!("--store {other}: use gridfs or s3"),
    };
    if let Some(s3) = &s3 {
        extra.extend(s3.env("bench-outputs"));
    }
    let pairs: Vec<(&str, &str)> = extra.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut cluster = Cluster::start(&pairs, false).await?;
    let outcome = async {
        let port = harness::servers::free_port()?;
        let upload_url = format!("http://127.0.0.1:{port}/upload/");
        // One slot: the fixture is synchronous (coglet runs more than one prediction at once
        // only for an async one), so the 8 in flight queue at the Cog server, as they would
        // on one GPU.
        let cog = CogServer::start_uploading(Path::new(IMAGES_FIXTURE), 1, &upload_url).await?;
        let models = format!("acme/images={}", cog.base);
        let bind = format!("127.0.0.1:{port}");
        let settings = [
            ("RUNNER_MODELS", "acme/images"),
            ("RUNNER_COG", models.as_str()),
            ("RUNNER_COG_CALLBACK_BIND", bind.as_str()),
            ("RUNNER_CONCURRENCY", "8"),
        ];
        cluster.add_runners(1, &settings).await?;
        let large = large_file(&cluster, options.mib).await?;
        let load = images_at_load(&cluster, options.predictions).await?;
        anyhow::Ok(json!({"large_file": large, "images_at_load": load}))
    }
    .await;
    cluster.stop().await?;
    if let Some(s3) = s3.as_mut() {
        s3.stop(false).await?;
    }
    std::fs::remove_dir_all(&dir).ok();
    let results = outcome?;
    println!("{}", table(&results));
    Ok(results)
}

/// One prediction with `Prefer: wait`, polled to its end; the ended prediction and its latency.
async fn predict(http: &reqwest::Client, cluster: &Cluster, input: Value) -> anyhow::Result<(Value, Duration)> {
    let started = Instant::now();
    let created: Value = http
        .post(format!("{}/v1/models/acme/images/predictions", cluster.base))
        .bearer_auth(&cluster.key)
        .header("prefer", "wait=60")
        .json(&json!({ "input": input }))
        .send()
        .await?
        .json()
        .await?;
    let id = created["id"].as_str().context("the create's id")?.to_owned();
    let mut prediction = created;
    while !matches!(prediction["status"].as_str(), Some("succeeded" | "failed" | "canceled")) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        prediction = http
            .get(format!("{}/v1/predictions/{id}", cluster.base))
            .bearer_auth(&cluster.key)
            .send()
            .await?
            .json()
            .await?;
    }
    let took = started.elapsed();
    anyhow::ensure!(prediction["status"] == "succeeded", "the prediction ended {prediction}");
    Ok((prediction, took))
}

/// The seconds the model spent writing its files, from its log line `wrote N files in S s`.
fn write_seconds(logs: &str) -> Option<f64> {
    logs.lines().find_map(|l| l.strip_prefix("wrote ")?.split(" in ").nth(1)?.strip_suffix(" s")?.parse().ok())
}

/// Rounds of [`large_file`]: the transfer and the raw write take turns, each file deleted
/// before the next, and the medians are the figures. One round against one raw write gave a
/// ratio of 1.19 in one run and 2.46 in the next on GridFS (the stand-in's heap, growing with
/// both files, collected during one or the other).
const ROUNDS: usize = 3;

/// One file of `mib` MiB through the runner, against a raw write of as many bytes, [`ROUNDS`]
/// times.
async fn large_file(cluster: &Cluster, mib: usize) -> anyhow::Result<Value> {
    let pid = cluster.pids().into_iter().find(|(name, _)| *name == "runner").context("the runner's pid")?.1;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(1800)).build()?;
    // A small one first: the runner's first upload sets up what every later one reuses.
    predict(&http, cluster, json!({"count": 1, "kib": 1024})).await?;
    let files = Files::open(&cluster.setup.store, &cluster.setup.common.files).await?;
    let common = &cluster.setup.common;
    let links = Links::new(common.public_base_url.clone(), common.master_key.clone());
    let raw: Arc<dyn FileStore> = match files.s3() {
        Some(s3) => Arc::new(s3.clone()),
        None => Arc::new(GridFsStore::new(cluster.setup.store.database())),
    };
    let mut rounds = Vec::new();
    for _ in 0..ROUNDS {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let idle = rss_kib(pid);
        let mut peak = idle;
        let received_before = cluster.runners_metric("runner_output_upload_seconds_sum").await?;
        let work = predict(&http, cluster, json!({"count": 1, "kib": mib * 1024}));
        tokio::pin!(work);
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        let (prediction, _) = loop {
            tokio::select! {
                done = &mut work => break done?,
                _ = tick.tick() => peak = peak.max(rss_kib(pid)),
            }
        };
        let predict_time = prediction["metrics"]["predict_time"].as_f64().context("predict_time")?;
        let wrote = write_seconds(prediction["logs"].as_str().unwrap_or_default()).context("the model's write time")?;
        let received = cluster.runners_metric("runner_output_upload_seconds_sum").await? - received_before;
        for link in prediction["output"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            files.delete(&links.file_named_by(link).with_context(|| format!("the file of {link}"))?).await?;
        }

        // The same bytes written raw to the store the runner writes to.
        let raw_id = FileId::generate();
        let pieces = futures::stream::iter((0..mib).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![0u8; MIB]))));
        let started = Instant::now();
        // Its length declared, as coglet declares its upload's.
        raw.put(&raw_id, "raw.bin", FileBody::sized(pieces.boxed(), (mib * MIB) as u64), u64::MAX).await?;
        let raw_seconds = started.elapsed().as_secs_f64();
        raw.delete(&raw_id).await?;
        rounds.push(json!({
            "runner_idle_rss_mib": round(idle as f64 / 1024.0, 1),
            "runner_added_rss_mib": round(peak.saturating_sub(idle) as f64 / 1024.0, 1),
            "model_write_seconds": round(wrote, 2),
            "upload_seconds": round(predict_time - wrote, 2),
            "runner_receive_seconds": round(received, 2),
            "raw_write_seconds": round(raw_seconds, 2),
            "receive_ratio": round(received / raw_seconds, 2),
        }));
    }
    let median_of = |field: &str| median(rounds.iter().filter_map(|r| r[field].as_f64())).unwrap_or(f64::NAN);
    let most_added = rounds.iter().filter_map(|r| r["runner_added_rss_mib"].as_f64()).fold(0.0, f64::max);
    let (upload, received, raw_seconds, receive_ratio) = (
        median_of("upload_seconds"),
        median_of("runner_receive_seconds"),
        median_of("raw_write_seconds"),
        median_of("receive_ratio"),
    );
    Ok(json!({
        "mib": mib,
        "store": files.writes_to().as_str(),
        "rounds": rounds,
        "runner_added_rss_mib": most_added,
        "target_added_rss_mib": TARGET_ADDED_RSS_MIB,
        "upload_seconds": upload,
        "runner_receive_seconds": received,
        "raw_write_seconds": raw_seconds,
        "time_ratio": round(upload / raw_seconds, 2),
        "receive_ratio": receive_ratio,
        "target_time_ratio": TARGET_TIME_RATIO,
        "met": most_added < TARGET_ADDED_RSS_MIB && receive_ratio <= TARGET_TIME_RATIO,
    }))
}

/// `count` predictions of 4 files of 8 MB each, 8 at once.
async fn images_at_load(cluster: &Cluster, count: usize) -> anyhow::Result<Value> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(600)).build()?;
    let input = json!({"count": 4, "kib": 8 * 1000 * 1000 / 1024});
    let started = Instant::now();
    let latencies: Vec<Duration> = futures::stream::iter(0..count)
        .map(|_| predict(&http, cluster, input.clone()))
        .buffer_unordered(8)
        .map(|r| r.map(|(_, took)| took))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<_>>()?;
    let elapsed = started.elapsed().as_secs_f64();
    let samples = Samples::new(latencies);
    Ok(json!({
        "predictions": count,
        "files_each": 4,
        "file_mb": 8,
        "in_flight": 8,
        "predictions_per_s": round(count as f64 / elapsed, 2),
        "mb_per_s": round(count as f64 * 32.0 / elapsed, 1),
        "latency_ms_p50": ms(samples.percentile(50.0)),
        "latency_ms_p99": ms(samples.percentile(99.0)),
    }))
}

/// The results as a table.
pub fn table(results: &Value) -> String {
    let large = &results["large_file"];
    let load = &results["images_at_load"];
    format!(
        "one {} MiB output file ({}, medians of 3 rounds): runner +{} MiB RSS at most (target < {}), transfer (the runner's receive) {} s vs raw write {} s = {} (target <= {}); the whole upload, coglet's read included, {} s = {}\n\
         4 x 8 MB images, 8 in flight: {} predictions/s, {} MB/s, p50 {} ms, p99 {} ms",
        large["mib"],
        large["store"],
        large["runner_added_rss_mib"],
        large["target_added_rss_mib"],
        large["runner_receive_seconds"],
        large["raw_write_seconds"],
        large["receive_ratio"],
        large["target_time_ratio"],
        large["upload_seconds"],
        large["time_ratio"],
        load["predictions_per_s"],
        load["mb_per_s"],
        load["latency_ms_p50"],
        load["latency_ms_p99"],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_models_write_time_is_read_from_its_log() {
        assert_eq!(write_seconds("setting up\nwrote 1 files in 2.250 s\n"), Some(2.25));
        assert_eq!(write_seconds("nothing"), None);
    }
}
