//! `bench coldstart`: what the first prediction of a model at zero waits for, beside what
//! coglet itself takes to start.
//!
//! In alternating rounds, so drift on the shared machine falls on both alike:
//! - **direct**: coglet started on the Cog echo fixture (`deploy/testing/bench/fixtures/cog/echo_async`)
//!   by hand, timed from the spawn to its first `READY` health check (polled every
//!   [`harness::cog_server::READY_POLL`]);
//! - **service**: a runner serving a copy of the same fixture declared as a Cog project
//!   (`RUNNER_COG=acme/cold=dir:…?idle_seconds=1`), at zero instances; a create through the api,
//!   timed from the request to the prediction reading `processing` (polled every
//!   [`POLL`]); then the round waits for the instance's idle stop, so the next is at zero again.
//!
//! What the service adds is the median of the rounds' differences; the target is
//! [`TARGET_ADDED_P50`]. The runner's own poll of a booting server (50 ms) is part of it.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context;
use serde_json::{Value, json};
use tokio::time::Instant;

use harness::cluster::Cluster;
use harness::cog_server::CogServer;
use harness::stats::ms;

/// The most the service may add to coglet's own start, at the median.
pub const TARGET_ADDED_P50: Duration = Duration::from_millis(250);
/// The fixture both paths start.
const FIXTURE: &str = "deploy/testing/bench/fixtures/cog/echo_async";
/// How often the service path reads the prediction.
const POLL: Duration = Duration::from_millis(5);
/// The longest one cold start may take before the run gives up.
const START_LIMIT: Duration = Duration::from_secs(120);

/// Options of `bench coldstart`.
#[derive(clap::Args)]
pub struct Options {
    /// Rounds, each one direct start and one through the service (odd: the median is one).
    #[arg(long, default_value_t = 7)]
    rounds: usize,
}

/// `bench coldstart`
pub async fn run(options: Options) -> anyhow::Result<Value> {
    let project = Project::copy()?;
    let python = std::env::var("COG_PYTHON").context("COG_PYTHON is not set (deploy/testing/bench/run sets it)")?;
    let cog = format!("acme/cold=dir:{}?idle_seconds=1", project.dir.display());
    let mut cluster = Cluster::start(&[], false).await?;
    let settings =
        [("RUNNER_COG", cog.as_str()), ("RUNNER_COG_PYTHON", python.as_str()), ("RUNNER_MODELS", "acme/cold")];
    cluster.add_runners(1, &settings).await?;
    let measured = rounds(&cluster, &project, options.rounds.max(1)).await;
    cluster.stop().await?;
    let (direct, service) = measured?;
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let added: Vec<f64> = direct.iter().zip(&service).map(|(d, s)| s - d).collect();
    let added_p50 = median(added.clone());
    let result = json!({
        "rounds": direct.len(),
        "direct_ms": direct, "service_ms": service, "added_ms": added,
        "direct_p50_ms": median(direct.clone()), "service_p50_ms": median(service.clone()),
        "added_p50_ms": added_p50, "target_added_p50_ms": ms(TARGET_ADDED_P50),
        "meets_target": added_p50 <= ms(TARGET_ADDED_P50),
    });
    println!("{}", serde_json::to_string_pretty(&result)?);
    Ok(result)
}

/// The direct and the service's cold starts, in milliseconds, one of each per round.
async fn rounds(cluster: &Cluster, project: &Project, rounds: usize) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let registered = async {
        while http.get(format!("{}/v1/models/acme/cold", cluster.base)).bearer_auth(&cluster.key).send().await?.status()
            != 200
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(START_LIMIT, registered).await.context("the runner did not register acme/cold")??;
    let (mut direct, mut service) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let began = Instant::now();
        let server = CogServer::start(Path::new(FIXTURE), 1).await?;
        direct.push(ms(began.elapsed()));
        drop(server);
        project.wait_until_at_zero().await?;
        service.push(ms(through_the_service(cluster, &http).await?));
        project.wait_until_at_zero().await?;
        println!("  round {}: direct {:.0} ms, service {:.0} ms", round + 1, direct[round], service[round]);
    }
    Ok((direct, service))
}

/// One create of `acme/cold` at zero: from the request to the prediction reading `processing`.
async fn through_the_service(cluster: &Cluster, http: &reqwest::Client) -> anyhow::Result<Duration> {
    let began = Instant::now();
    let created: Value = http
        .post(format!("{}/v1/models/acme/cold/predictions", cluster.base))
        .bearer_auth(&cluster.key)
        .json(&json!({"input": {"prompt": "cold", "repeat": 1}}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let id = created["id"].as_str().context("a prediction id")?.to_owned();
    let mut took = None;
    while began.elapsed() < START_LIMIT {
        let read: Value = http
            .get(format!("{}/v1/predictions/{id}", cluster.base))
            .bearer_auth(&cluster.key)
            .send()
            .await?
            .json()
            .await?;
        match read["status"].as_str() {
            Some("starting") => tokio::time::sleep(POLL).await,
            Some("processing" | "succeeded") => {
                took.get_or_insert(began.elapsed());
                if read["status"] == "succeeded" {
                    return took.context("timed");
                }
                tokio::time::sleep(POLL).await;
            }
            other => anyhow::bail!("the cold prediction ended {other:?}: {read}"),
        }
    }
    anyhow::bail!("the cold prediction did not start within {START_LIMIT:?}")
}

/// The copy of the fixture the runner serves, declared as a project (removed when dropped).
struct Project {
    dir: PathBuf,
}

impl Project {
    fn copy() -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("bench-cold-start-{}", std::process::id()));
        harness::cog_server::project_copy(Path::new(FIXTURE), &dir, "predict: \"predict.py:Predictor\"\n")?;
        Ok(Self { dir })
    }

    /// Waits until no process runs in the copy, nor in the fixture itself (a direct server
    /// being stopped): the next round starts from zero.
    async fn wait_until_at_zero(&self) -> anyhow::Result<()> {
        let dirs = [self.dir.clone(), Path::new(FIXTURE).to_path_buf()];
        let gone = async {
            while dirs.iter().any(|d| !harness::processes::processes_in(d).is_empty()) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        tokio::time::timeout(START_LIMIT, gone).await.context("the model's processes did not stop")
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
