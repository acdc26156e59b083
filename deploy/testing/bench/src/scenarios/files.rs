//! `bench files`: what files cost through the service, on each file store (`--store gridfs`,
//! `s3` or `both`, the default; S3 is S3Proxy, started for the run).
//!
//! - **Throughput**: one file of `--mib` MiB uploaded through the api (`POST /v1/files`,
//!   multipart, streamed from the load tool) and downloaded back (`…/download`), in MB/s,
//!   beside a raw write and read of the same bytes by the load tool on the same store (GridFS
//!   on the same MongoDB; a `PutObject`/multipart upload and a `GetObject` to the same S3Proxy):
//!   the floor the api's path is held against (ratio = through the api / raw; target for the
//!   S3 upload: at least 0.8); each the median of [`ROUNDS`] after one of each not counted, with
//!   the CPU seconds each process spent per transfer. With S3 a download is a redirect to the store: the MB/s is that
//!   of the redirect followed, and the bytes the api itself sends are counted (target: none).
//! - **Memory**: the api's resident memory while the upload and the download run, sampled every
//!   10 ms from `/proc/<pid>/status`, against its resident memory just before each (idle before
//!   the upload; before the download, what the upload left, which the allocator keeps): what a
//!   transfer adds (target: under 32 MiB for a 100 MiB file; the api streams, never holding a
//!   file whole).
//! - **File inputs on a Cog model**: the Cog `hash` fixture (a `Path` input, answering the
//!   file's SHA-256) run through the service, one at a time, on the same bytes given inline as
//!   a `data:` URI and as an uploaded file's URL (which the runner turns into a signed
//!   download the Cog server fetches from the api): the latency the fetch adds.

use std::{collections::BTreeMap, path::Path, sync::Arc, time::Duration};

use anyhow::Context;
use base64::Engine;
use bytes::Bytes;
use common::{
    domain::FileId,
    files::{FileStore, Files, GridFsStore},
};
use futures::{StreamExt, TryStreamExt};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::measure::machine_cpu::{ProcessCpu, Role};
use harness::{
    cluster::{AS_DEPLOYED, Cluster, round},
    cog_server::CogServer,
    processes::rss_kib,
    servers::S3Standin,
    stats::{self, Samples, ms},
};

/// What one transfer may add to the api's resident memory.
pub const TARGET_ADDED_RSS_MIB: f64 = 32.0;
/// The least an upload to S3 through the api may reach of a raw upload to the same store.
pub const TARGET_S3_UPLOAD_RATIO: f64 = 0.8;
/// The Cog fixture with a `Path` input (shared with the runner's tests).
const HASH_FIXTURE: &str = "runner/tests/fixtures/cog/hash";
/// The pieces the load tool sends and the raw write takes: 1 MiB each.
const PIECE: usize = 1024 * 1024;

/// Options of `bench files`.
#[derive(clap::Args)]
pub struct Options {
    /// The size of the file moved through the api, in MiB.
    #[arg(long, default_value_t = 100)]
    mib: usize,
    /// Predictions per kind of file input on the Cog model.
    #[arg(long, default_value_t = 30)]
    samples: usize,
    /// The file store(s) to measure: gridfs, s3 or both.
    #[arg(long, default_value = "both")]
    store: String,
}

/// `bench files`
pub async fn run(options: Options) -> anyhow::Result<Value> {
    let stores: &[&str] = match options.store.as_str() {
        "both" => &["gridfs", "s3"],
        "gridfs" => &["gridfs"],
        "s3" => &["s3"],
        other => anyhow::bail!("--store {other}: use gridfs, s3 or both"),
    };
    let mut results = serde_json::Map::new();
    for store in stores {
        results.insert((*store).to_owned(), measure(store, options.mib, options.samples).await?);
    }
    let results = Value::Object(results);
    println!("{}", table(&results));
    Ok(results)
}

/// Every figure of `store`, on a fresh system.
pub async fn measure(store: &str, mib: usize, samples: usize) -> anyhow::Result<Value> {
    let limit = ((mib + 1) * PIECE).to_string();
    let mut extra: Vec<(&str, String)> = AS_DEPLOYED.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
    extra.push(("API_MAX_FILE_BYTES", limit));
    let dir = std::env::temp_dir().join(format!("bench-files-{}", std::process::id()));
    let mut s3 = match store {
        "s3" => Some(S3Standin::start(&dir).await?),
        _ => None,
    };
    if let Some(s3) = &s3 {
        extra.extend(s3.env("bench-files"));
    }
    let pairs: Vec<(&str, &str)> = extra.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut cluster = Cluster::start(&pairs, false).await?;
    let outcome = async {
        let transfer = transfer(&cluster, mib).await?;
        let cog = CogServer::start(Path::new(HASH_FIXTURE), 1).await?;
        let models = format!("acme/hash={}", cog.base);
        cluster.add_runners(1, &[("RUNNER_MODELS", "acme/hash"), ("RUNNER_COG", models.as_str())]).await?;
        let inputs = cog_inputs(&cluster, samples).await?;
        anyhow::Ok(json!({"transfer": transfer, "cog_file_input": inputs}))
    }
    .await;
    cluster.stop().await?;
    if let Some(s3) = s3.as_mut() {
        s3.stop(false).await?;
    }
    std::fs::remove_dir_all(&dir).ok();
    outcome
}

/// The bytes of piece `n` (different pieces, so nothing compresses or dedupes).
fn piece(n: usize) -> Bytes {
    Bytes::from((0..PIECE).map(|i| ((i * 31 + n * 7919) % 251) as u8).collect::<Vec<u8>>())
}

fn pieces(mib: usize) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> {
    futures::stream::iter((0..mib).map(|n| Ok(piece(n))))
}

/// Runs `work` while sampling `pid`'s resident memory every 10 ms; its result and the peak.
async fn with_peak_rss<T>(pid: u32, work: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<(T, u64)> {
    let mut peak = rss_kib(pid);
    tokio::pin!(work);
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    loop {
        tokio::select! {
            result = &mut work => return Ok((result?, peak.max(rss_kib(pid)))),
            _ = tick.tick() => peak = peak.max(rss_kib(pid)),
        }
    }
}

/// CPU seconds by role, as JSON (`java` is the MongoDB stand-in and, on S3, S3Proxy).
fn cpu_by_role(cpu: &BTreeMap<Role, f64>) -> Value {
    let name = |role: Role| if role == Role::Mongodb { "java" } else { role.name() };
    Value::Object(
        cpu.iter().filter(|(_, s)| **s > 0.0).map(|(r, s)| (name(*r).to_owned(), json!(round(*s, 2)))).collect(),
    )
}

fn mb_per_s(bytes: usize, took: Duration) -> f64 {
    round(bytes as f64 / 1e6 / took.as_secs_f64(), 1)
}

/// Uploads and writes measured, each a median of this many, after one of each not counted (the
/// store's own warm-up: S3Proxy's JIT spent 1.14 CPU seconds on the first 100 MiB it took,
/// 0.76 on the next, so whichever path went first looked a third slower).
const ROUNDS: usize = 3;

/// Upload and download through the api, and the same bytes raw, with the api's memory.
async fn transfer(cluster: &Cluster, mib: usize) -> anyhow::Result<Value> {
    let bytes = mib * PIECE;
    let pid = cluster.pids().into_iter().find(|(name, _)| *name == "api").context("the api's pid")?.1;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(600)).build()?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = rss_kib(pid);
    // The same bytes raw, on the store the api writes to.
    let files = Files::open(&cluster.setup.store, &cluster.setup.common.files).await?;
    let raw: Arc<dyn FileStore> = match files.s3() {
        Some(s3) => Arc::new(s3.clone()),
        None => Arc::new(GridFsStore::new(cluster.setup.store.database())),
    };

    // Rounds of an upload through the api and a raw write, after one of each not counted.
    let (mut uploads, mut writes) = (Measured::default(), Measured::default());
    let mut upload_peak = 0;
    let mut id = String::new();
    let mut raw_read_took = Duration::ZERO;
    for round in 0..=ROUNDS {
        let cpu_before = ProcessCpu::now()?;
        let started = Instant::now();
        let (file, peak) = with_peak_rss(pid, upload(&http, cluster, mib)).await?;
        uploads.add(round, bytes, started.elapsed(), ProcessCpu::now()?.since(&cpu_before));
        upload_peak = upload_peak.max(peak);
        id = file["id"].as_str().context("the upload's id")?.to_owned();

        let raw_id = FileId::generate();
        let cpu_before = ProcessCpu::now()?;
        let started = Instant::now();
        raw.put(&raw_id, "raw.bin", pieces(mib).boxed().into(), u64::MAX).await?;
        writes.add(round, bytes, started.elapsed(), ProcessCpu::now()?.since(&cpu_before));
        if round == ROUNDS {
            let started = Instant::now();
            let raw_read: usize =
                raw.read(&raw_id, 0..bytes as u64).await?.try_fold(0, |n, c| async move { Ok(n + c.len()) }).await?;
            raw_read_took = started.elapsed();
            anyhow::ensure!(raw_read == bytes, "read {raw_read} of {bytes} raw bytes");
        }
        raw.delete(&raw_id).await?;
    }
    let raw_read_mbs = mb_per_s(bytes, raw_read_took);

    let before_download = rss_kib(pid);
    let started = Instant::now();
    let download = async {
        let response =
            http.get(format!("{}/v1/files/{id}/download", cluster.base)).bearer_auth(&cluster.key).send().await?;
        anyhow::ensure!(response.status() == 200, "the download answered {}", response.status());
        let mut body = response.bytes_stream();
        let mut read = 0usize;
        while let Some(chunk) = body.try_next().await? {
            read += chunk.len();
        }
        anyhow::Ok(read)
    };
    let (read, download_peak) = with_peak_rss(pid, download).await?;
    let download_took = started.elapsed();
    anyhow::ensure!(read == bytes, "downloaded {read} of {bytes} bytes");
    // What the api itself sends for a download (the redirect is not followed here).
    let direct = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build()?;
    let answer =
        direct.get(format!("{}/v1/files/{id}/download", cluster.base)).bearer_auth(&cluster.key).send().await?;
    let (answer_status, through_api) = (answer.status().as_u16(), answer.bytes().await?.len());

    let mib_of = |kib: u64| round(kib as f64 / 1024.0, 1);
    let median_of = |m: &Measured| stats::median(m.mb_per_s.iter().copied()).unwrap_or(f64::NAN);
    let (upload_mbs, raw_write_mbs) = (median_of(&uploads), median_of(&writes));
    let download_mbs = mb_per_s(bytes, download_took);
    Ok(json!({
        "mib": mib,
        "rounds": ROUNDS,
        "upload_mb_per_s": upload_mbs,
        "upload_mb_per_s_each": uploads.mb_per_s,
        "store": files.writes_to().as_str(),
        "raw_write_mb_per_s": raw_write_mbs,
        "raw_write_mb_per_s_each": writes.mb_per_s,
        "upload_ratio": round(upload_mbs / raw_write_mbs, 2),
        "download_mb_per_s": download_mbs,
        "raw_read_mb_per_s": raw_read_mbs,
        "download_answer_status": answer_status,
        "download_bytes_through_api": through_api,
        "download_ratio": round(download_mbs / raw_read_mbs, 2),
        "api_idle_rss_mib": mib_of(idle),
        "api_peak_rss_upload_mib": mib_of(upload_peak),
        "api_added_rss_upload_mib": mib_of(upload_peak.saturating_sub(idle)),
        "api_peak_rss_download_mib": mib_of(download_peak),
        "api_rss_before_download_mib": mib_of(before_download),
        "api_added_rss_download_mib": mib_of(download_peak.saturating_sub(before_download)),
        "target_added_rss_mib": TARGET_ADDED_RSS_MIB,
        "cpu_seconds_per_upload": cpu_by_role(&uploads.cpu),
        "cpu_seconds_per_raw_write": cpu_by_role(&writes.cpu),
    }))
}

/// One upload of `mib` MiB through the api (`POST /v1/files`, multipart, streamed); its file.
async fn upload(http: &reqwest::Client, cluster: &Cluster, mib: usize) -> anyhow::Result<Value> {
    let length = (mib * PIECE) as u64;
    let part = reqwest::multipart::Part::stream_with_length(reqwest::Body::wrap_stream(pieces(mib)), length)
        .file_name("bench.bin")
        .mime_str("application/octet-stream")?;
    let response = http
        .post(format!("{}/v1/files", cluster.base))
        .bearer_auth(&cluster.key)
        .multipart(reqwest::multipart::Form::new().part("content", part))
        .send()
        .await?;
    anyhow::ensure!(response.status() == 201, "the upload answered {}", response.status());
    Ok(response.json::<Value>().await?)
}

/// The measured rounds of one path (an upload through the api, or a raw write): the MB/s of
/// each, and the CPU seconds of each process averaged over [`ROUNDS`]. The warm-up round (0)
/// is left out here, in one place.
#[derive(Default)]
struct Measured {
    mb_per_s: Vec<f64>,
    cpu: BTreeMap<Role, f64>,
}

impl Measured {
    fn add(&mut self, round: usize, bytes: usize, took: Duration, cpu: BTreeMap<Role, f64>) {
        if round == 0 {
            return;
        }
        self.mb_per_s.push(mb_per_s(bytes, took));
        for (role, seconds) in cpu {
            *self.cpu.entry(role).or_insert(0.0) += seconds / ROUNDS as f64;
        }
    }
}

/// One create with `Prefer: wait` on the Cog `hash` model; its latency and output.
async fn hash_once(http: &reqwest::Client, cluster: &Cluster, file: &str) -> anyhow::Result<(Duration, String)> {
    let started = Instant::now();
    let response = http
        .post(format!("{}/v1/models/acme/hash/predictions", cluster.base))
        .bearer_auth(&cluster.key)
        .header("prefer", "wait=60")
        .json(&json!({"input": {"file": file}}))
        .send()
        .await?;
    let took = started.elapsed();
    let prediction: Value = response.json().await?;
    anyhow::ensure!(prediction["status"] == "succeeded", "the hash prediction ended {}", prediction["status"]);
    Ok((took, prediction["output"].as_str().unwrap_or_default().to_owned()))
}

/// The same bytes as a `data:` URI and as an uploaded file, `samples` predictions each, in
/// alternation; p50 and p99 of each, and what the upload's way adds.
async fn cog_inputs(cluster: &Cluster, samples: usize) -> anyhow::Result<Value> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(90)).build()?;
    let mut out = Vec::new();
    for kib in [1usize, 256] {
        let bytes: Vec<u8> = (0..kib * 1024).map(|i| (i % 251) as u8).collect();
        let inline = format!(
            "data:application/octet-stream;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(&bytes)
        );
        let part = reqwest::multipart::Part::bytes(bytes.clone()).file_name("input.bin");
        let file: Value = http
            .post(format!("{}/v1/files", cluster.base))
            .bearer_auth(&cluster.key)
            .multipart(reqwest::multipart::Form::new().part("content", part))
            .send()
            .await?
            .json()
            .await?;
        let url = file["urls"]["get"].as_str().context("the file's URL")?.to_owned();
        // One of each first: the Cog server's first fetch and the runner's first call are not counted.
        let (_, a) = hash_once(&http, cluster, &inline).await?;
        let (_, b) = hash_once(&http, cluster, &url).await?;
        anyhow::ensure!(a == b, "the model saw different bytes: {a} and {b}");
        let (mut by_data, mut by_file) = (Vec::new(), Vec::new());
        for _ in 0..samples {
            by_data.push(hash_once(&http, cluster, &inline).await?.0);
            by_file.push(hash_once(&http, cluster, &url).await?.0);
        }
        let (data, file) = (Samples::new(by_data), Samples::new(by_file));
        out.push(json!({
            "kib": kib,
            "data_uri_p50_ms": ms(data.percentile(50.0)), "data_uri_p99_ms": ms(data.percentile(99.0)),
            "uploaded_p50_ms": ms(file.percentile(50.0)), "uploaded_p99_ms": ms(file.percentile(99.0)),
            "added_p50_ms": round(ms(file.percentile(50.0)) - ms(data.percentile(50.0)), 3),
        }));
    }
    Ok(json!({"samples": samples, "sizes": out}))
}

/// The figures as Markdown: one block per store.
pub fn table(results: &Value) -> String {
    let mut out = String::new();
    for (store, figures) in results.as_object().into_iter().flatten() {
        out.push_str(&store_table(store, figures));
        out.push('\n');
    }
    out
}

fn store_table(store: &str, results: &Value) -> String {
    let t = &results["transfer"];
    let mut out = format!(
        "| {store}: {mib} MiB through the api | MB/s | raw MB/s | ratio | api peak RSS MiB | added over the RSS before it (idle: {idle} MiB) | target |\n|---|---:|---:|---:|---:|---:|---|\n",
        mib = t["mib"],
        idle = t["api_idle_rss_mib"]
    );
    for (what, key, raw, ratio, peak, added) in [
        (
            "upload",
            "upload_mb_per_s",
            "raw_write_mb_per_s",
            "upload_ratio",
            "api_peak_rss_upload_mib",
            "api_added_rss_upload_mib",
        ),
        (
            "download",
            "download_mb_per_s",
            "raw_read_mb_per_s",
            "download_ratio",
            "api_peak_rss_download_mib",
            "api_added_rss_download_mib",
        ),
    ] {
        let mut targets = vec![met(t[added].as_f64().is_some_and(|a| a < TARGET_ADDED_RSS_MIB), "< 32 MiB")];
        if store == "s3" && what == "upload" {
            let ratio_met = t[ratio].as_f64().is_some_and(|r| r >= TARGET_S3_UPLOAD_RATIO);
            targets.push(met(ratio_met, &format!("ratio >= {TARGET_S3_UPLOAD_RATIO}")));
        }
        out.push_str(&format!(
            "| {what} | {} | {} | {} | {} | {} | {} |\n",
            t[key],
            t[raw],
            t[ratio],
            t[peak],
            t[added],
            targets.join("; ")
        ));
    }
    let through = t["download_bytes_through_api"].as_u64().unwrap_or(u64::MAX);
    out.push_str(&format!(
        "| bytes the api sends for a download | {through} (answer {}) | | | | | {} |\n",
        t["download_answer_status"],
        if store == "s3" { met(through == 0, "none with redirects") } else { "—".to_owned() }
    ));
    out.push_str(&format!(
        "\nMedian of {} rounds after one not counted. CPU seconds by process, per transfer: an upload through the api {}; a raw write {}\n",
        t["rounds"], t["cpu_seconds_per_upload"], t["cpu_seconds_per_raw_write"]
    ));
    out.push_str("\n| Cog file input | data: URI p50 / p99 ms | uploaded file p50 / p99 ms | added p50 ms |\n|---|---:|---:|---:|\n");
    for s in results["cog_file_input"]["sizes"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "| {} KiB | {} / {} | {} / {} | {} |\n",
            s["kib"],
            s["data_uri_p50_ms"],
            s["data_uri_p99_ms"],
            s["uploaded_p50_ms"],
            s["uploaded_p99_ms"],
            s["added_p50_ms"]
        ));
    }
    out
}

fn met(met: bool, target: &str) -> String {
    format!("{target}: {}", if met { "met" } else { "not met" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_holds_each_transfer_against_the_memory_target() {
        let store = json!({
            "transfer": {"mib": 100, "api_idle_rss_mib": 10.0, "upload_mb_per_s": 50.0, "raw_write_mb_per_s": 100.0,
                         "upload_ratio": 0.5, "api_peak_rss_upload_mib": 20.0, "api_added_rss_upload_mib": 10.0,
                         "download_mb_per_s": 80.0, "raw_read_mb_per_s": 160.0, "download_ratio": 0.5,
                         "api_peak_rss_download_mib": 50.0, "api_added_rss_download_mib": 40.0,
                         "download_answer_status": 307, "download_bytes_through_api": 0},
            "cog_file_input": {"sizes": [{"kib": 1, "data_uri_p50_ms": 5.0, "data_uri_p99_ms": 7.0,
                                          "uploaded_p50_ms": 8.0, "uploaded_p99_ms": 9.0, "added_p50_ms": 3.0}]},
        });
        let table = table(&json!({"s3": store}));
        assert!(
            table.contains("| upload | 50.0 | 100.0 | 0.5 | 20.0 | 10.0 | < 32 MiB: met; ratio >= 0.8: not met |"),
            "{table}"
        );
        assert!(table.contains("| download | 80.0 | 160.0 | 0.5 | 50.0 | 40.0 | < 32 MiB: not met |"), "{table}");
        assert!(table.contains("| 0 (answer 307) | | | | | none with redirects: met |"), "{table}");
        assert!(table.contains("| 1 KiB | 5.0 / 7.0 | 8.0 / 9.0 | 3.0 |"), "{table}");
    }

    #[test]
    fn the_warm_up_round_counts_in_neither_the_speed_nor_the_cpu() {
        let mut measured = Measured::default();
        let cpu = |seconds: f64| BTreeMap::from([(Role::Api, seconds)]);
        measured.add(0, 1_000_000, Duration::from_millis(100), cpu(30.0));
        for round in 1..=ROUNDS {
            measured.add(round, 1_000_000, Duration::from_millis(10), cpu(0.3));
        }
        assert_eq!(measured.mb_per_s, vec![100.0; ROUNDS]);
        assert!((measured.cpu[&Role::Api] - 0.3).abs() < 1e-9, "{:?}", measured.cpu);
    }
}
