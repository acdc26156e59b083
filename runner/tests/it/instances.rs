//! Cog projects the runner starts itself (`RUNNER_COG=owner/name=dir:/path`), with real
//! coglet servers: a model at zero boots on its first job and stops when idle, a killed server
//! fails its prediction clearly and the next runs on a new one, a setup of 150 s is waited for,
//! a setup that fails fails the predictions waiting for it; the boot leads a waiting
//! prediction's logs, and is shown in them while it goes on; the runner's presence reports
//! each instance's state, its boot and how it ended.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use common::{
    domain::{Pool, PredictionStatus},
    store::{
        deployments::{DeploymentRecord, Release, ReleaseConfiguration},
        runners::InstanceReport,
    },
};
use serde_json::json;
use testkit::eventually;

use crate::fixture::Fixture;

/// A copy of the fixture `name` (`tests/fixtures/cog/<name>`) as a project of its own, with
/// `cog.yaml` saying `yaml`: each test's servers are told apart by their directory.
fn project(name: &str, yaml: &str) -> PathBuf {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cog").join(name);
    let dir = std::env::temp_dir().join(format!("runner-project-{name}-{}", rand::random::<u64>()));
    copy_dir(&from, &dir);
    std::fs::write(dir.join("cog.yaml"), yaml).expect("write cog.yaml");
    dir
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create the project");
    for entry in std::fs::read_dir(from).expect("read the fixture").flatten() {
        let target = to.join(entry.file_name());
        match entry.file_type().expect("a type").is_dir() {
            true => copy_dir(&entry.path(), &target),
            false => {
                std::fs::copy(entry.path(), target).expect("copy");
            }
        }
    }
}

/// The processes whose working directory is `dir` (a project's coglet and its worker).
fn servers_in(dir: &Path) -> Vec<u32> {
    let Ok(dir) = dir.canonicalize() else { return Vec::new() };
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == dir))
        .collect()
}

/// Starts a runner serving `model` from the project in `dir` (with `settings` after `?`), and
/// waits until it has registered the model.
async fn runner_for_project(fixture: &Fixture, model: &str, dir: &Path, settings: &str) {
    let cog = format!("{model}=dir:{}{settings}", dir.display());
    let python = testkit::installed("COG_PYTHON");
    fixture.start_runner_with("acme/*", &[("RUNNER_COG", cog.as_str()), ("RUNNER_COG_PYTHON", python.as_str())]);
    let model_ref = model.parse().expect("model");
    let registered =
        eventually(Duration::from_secs(60), || async { fixture.store.models().get(&model_ref).await.ok().flatten() })
            .await;
    assert!(registered.is_some(), "the runner registered {model}");
}

/// The first instance a live runner reports once it satisfies `wanted` (within a minute).
async fn reported(fixture: &Fixture, wanted: impl Fn(&InstanceReport) -> bool) -> InstanceReport {
    let found = eventually(Duration::from_secs(60), || async {
        let live = fixture.store.runners().live(bson::DateTime::now()).await.ok()?;
        live.into_iter().flat_map(|r| r.instances).find(|r| wanted(r))
    })
    .await;
    found.expect("a live runner reports such an instance")
}

const ECHO: &str = "predict: \"predict.py:Predictor\"\n";

#[tokio::test]
async fn a_project_at_zero_boots_on_its_first_prediction_and_stops_when_idle() {
    let fixture = Fixture::new(&[]).await;
    let dir = project("echo", ECHO);
    runner_for_project(&fixture, "acme/echo", &dir, "?idle_seconds=3").await;
    assert!(servers_in(&dir).is_empty(), "registered without booting: the schema comes from the project");
    let version = fixture.version_of(&"acme/echo".parse().expect("model")).await;
    assert_eq!(version.len(), 32, "the project's digest is its version: {version}");

    let p = fixture.create("acme/echo", json!({"prompt": "hi", "repeat": 2})).await;
    let done = fixture.wait_until(&p.id, Duration::from_secs(120), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Succeeded, "{:?}", done.error);
    assert_eq!(done.output.as_ref().and_then(serde_json::Value::as_str), Some("hi hi"));
    assert!(done.logs.starts_with("booting the model server of acme/echo"), "the boot leads its logs: {}", done.logs);
    assert!(done.logs.contains("the model server is ready after"), "{}", done.logs);
    assert!(!servers_in(&dir).is_empty(), "booted for it");
    // The runner's presence shows its boot (what the console shows): when, and how long it
    // took. (Not its `ready` state: that lasts only the 3 s before its idle stop.)
    let booted = reported(&fixture, |r| r.boot_seconds.is_some()).await;
    assert!(booted.booted_at.is_some() && booted.boot_seconds.is_some_and(|s| s > 0.0), "{booted:?}");
    assert_eq!(booted.version, version);
    let gone = eventually(Duration::from_secs(60), || async { servers_in(&dir).is_empty().then_some(()) }).await;
    assert!(gone.is_some(), "stopped after 3 s idle: {:?}", servers_in(&dir));
    let stopped = reported(&fixture, |r| r.state == "stopped").await;
    assert_eq!(stopped.last_exit.as_deref(), Some("idle"), "{stopped:?}");

    let again = fixture.create("acme/echo", json!({"prompt": "back"})).await;
    let done = fixture.wait_until(&again.id, Duration::from_secs(120), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Succeeded, "booted again: {:?}", done.error);
    std::fs::remove_dir_all(dir).ok();
}

/// Runs a 30 s prediction of the `pause` project, kills the processes `doomed` picks among
/// its server's while it runs, and checks that it failed as a crash and that the next
/// prediction succeeded on a new server.
async fn killed_mid_prediction_is_a_crash(doomed: impl Fn(&[u32]) -> Vec<u32>) {
    let fixture = Fixture::new(&[]).await;
    let dir = project("pause", ECHO);
    runner_for_project(&fixture, "acme/pause", &dir, "").await;
    let p = fixture.create("acme/pause", json!({"seconds": 30.0})).await;
    fixture.wait_until(&p.id, Duration::from_secs(120), |p| p.status == PredictionStatus::Processing).await;
    let before = servers_in(&dir);
    let killed = doomed(&before);
    assert!(!killed.is_empty(), "a server runs the prediction: {before:?}");
    for pid in &killed {
        std::process::Command::new("kill").args(["-9", &pid.to_string()]).status().expect("kill -9");
    }
    let done = fixture.wait_until(&p.id, Duration::from_secs(60), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Failed);
    let error = done.error.expect("an error");
    assert_eq!(error.code, "MODEL_CRASHED", "{}", error.message);

    let next = fixture.create("acme/pause", json!({"seconds": 0.1})).await;
    let done = fixture.wait_until(&next.id, Duration::from_secs(120), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Succeeded, "on a new server: {:?}", done.error);
    assert!(servers_in(&dir).iter().all(|pid| !before.contains(pid)), "the broken server was replaced");
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test]
async fn a_killed_server_fails_its_prediction_clearly_and_the_next_runs_on_a_new_one() {
    killed_mid_prediction_is_a_crash(<[u32]>::to_vec).await;
}

/// The coglet worker among `pids` (the process that runs the predictor).
fn worker_of(pids: &[u32]) -> Option<u32> {
    pids.iter().copied().find(|pid| {
        std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains("_run_worker"))
    })
}

#[tokio::test]
async fn a_killed_worker_fails_its_prediction_as_a_crash_and_the_next_runs_on_a_new_server() {
    // coglet answers "Worker crashed" as the prediction's failure: a crash, not the model's error.
    killed_mid_prediction_is_a_crash(|pids| worker_of(pids).into_iter().collect()).await;
}

#[tokio::test]
async fn a_setup_of_150_seconds_is_waited_for_and_its_output_leads_the_logs() {
    let fixture = Fixture::new(&[]).await;
    let dir = project("slowsetup", ECHO);
    std::fs::write(dir.join("setup_seconds"), "150").expect("write setup_seconds");
    runner_for_project(&fixture, "acme/slowsetup", &dir, "").await;
    let p = fixture.create("acme/slowsetup", json!({"prompt": "worth the wait"})).await;
    let booting = eventually(Duration::from_secs(60), || async { (!servers_in(&dir).is_empty()).then_some(()) }).await;
    assert!(booting.is_some(), "its job boots the model");
    // While the setup runs (it has no limit, as in Cog), the prediction waits for it, and its
    // logs already show the setup's output.
    let setup_line = "loading weights for 150 s";
    let waiting = fixture.wait_until(&p.id, Duration::from_secs(120), |p| p.logs.contains(setup_line)).await;
    assert_eq!(waiting.status, PredictionStatus::Starting, "{:?}", waiting.error);
    assert!(waiting.logs.contains("booting the model server of acme/slowsetup"), "{}", waiting.logs);
    let done = fixture.wait_until(&p.id, Duration::from_secs(600), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Succeeded, "{:?}", done.error);
    assert_eq!(done.output.as_ref().and_then(serde_json::Value::as_str), Some("worth the wait"));
    for line in ["booting the model server of acme/slowsetup", setup_line, "weights loaded"] {
        assert!(done.logs.contains(line), "{line:?} in its logs: {}", done.logs);
    }
    let started = done.started_at.expect("started").timestamp_millis();
    assert!(started - p.created_at.timestamp_millis() >= 150_000, "it started only once the setup was over");
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test]
async fn a_setup_that_fails_fails_the_predictions_waiting_for_it_with_its_error() {
    let fixture = Fixture::new(&[]).await;
    let dir = project("broken", ECHO);
    runner_for_project(&fixture, "acme/broken", &dir, "").await;
    let first = fixture.create("acme/broken", json!({"prompt": "a"})).await;
    let second = fixture.create("acme/broken", json!({"prompt": "b"})).await;
    for p in [&first, &second] {
        let done = fixture.wait_until(&p.id, Duration::from_secs(120), |p| p.status.is_terminal()).await;
        assert_eq!(done.status, PredictionStatus::Failed);
        let error = done.error.expect("an error");
        assert_eq!(error.code, "MODEL_SETUP_FAILED", "{}", error.message);
        assert!(error.message.contains("the weights are missing"), "the setup's error: {}", error.message);
        assert!(done.started_at.is_none(), "it never started");
    }
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test]
async fn an_async_project_runs_as_many_at_once_as_its_cog_yaml_says() {
    let fixture = Fixture::new(&[]).await;
    let dir = project("waits", "predict: \"predict.py:Predictor\"\nconcurrency:\n  max: 4\n");
    let cog = format!("acme/waits=dir:{}", dir.display());
    let python = testkit::installed("COG_PYTHON");
    // The runner's own setting for a model's slots says 1: the project's 4 wins.
    let settings = [
        ("RUNNER_COG", cog.as_str()),
        ("RUNNER_COG_PYTHON", python.as_str()),
        ("RUNNER_CONCURRENCY", "8"),
        ("RUNNER_MODEL_CONCURRENCY", "1"),
    ];
    fixture.start_runner_with("acme/*", &settings);
    let model = "acme/waits".parse().expect("model");
    let registered =
        eventually(Duration::from_secs(60), || async { fixture.store.models().get(&model).await.ok().flatten() }).await;
    assert!(registered.is_some(), "registered");
    let mut created = Vec::new();
    for _ in 0..4 {
        created.push(fixture.create("acme/waits", json!({"seconds": 3.0})).await);
    }
    let done = crate::fixture::finished(&fixture, &created).await;
    assert!(
        done.iter().all(|p| p.status == PredictionStatus::Succeeded),
        "{:?}",
        done.iter().map(|p| &p.error).collect::<Vec<_>>()
    );
    let last_start = done.iter().filter_map(|p| p.started_at).max().expect("started");
    let first_end = done.iter().filter_map(|p| p.completed_at).min().expect("ended");
    assert!(last_start < first_end, "all four ran at once: the last started before the first ended");
    std::fs::remove_dir_all(dir).ok();
}

/// The instances of `model` that live runners report, once `wanted` holds of them (within a
/// minute).
async fn all_reported(
    fixture: &Fixture,
    model: &str,
    wanted: impl Fn(&[InstanceReport]) -> bool,
) -> Vec<InstanceReport> {
    let model: common::domain::ModelRef = model.parse().expect("model");
    let found = eventually(Duration::from_secs(60), || async {
        let live = fixture.store.runners().live(bson::DateTime::now()).await.ok()?;
        let of: Vec<_> = live.into_iter().flat_map(|r| r.instances).filter(|r| r.model == model).collect();
        wanted(&of).then_some(of)
    })
    .await;
    found.expect("the live runners report such instances")
}

fn states(reports: &[InstanceReport]) -> Vec<&str> {
    let mut states: Vec<_> = reports.iter().map(|r| r.state.as_str()).collect();
    states.sort_unstable();
    states
}

#[tokio::test]
async fn two_jobs_at_once_run_on_two_instances_and_the_one_above_min_instances_stops_when_idle() {
    let fixture = Fixture::new(&[]).await;
    // A sync predictor: coglet runs one prediction at a time (`concurrency.max` 1).
    let dir = project("pause", ECHO);
    runner_for_project(&fixture, "acme/pause", &dir, "?min_instances=1&max_instances=2&idle_seconds=2").await;
    // The kept instance boots at the runner's start, before any job; the other waits for one.
    all_reported(&fixture, "acme/pause", |r| states(r) == ["ready", "stopped"]).await;

    // Long enough that the second could not start after the first ended unnoticed: they are
    // seen running together, which only a second server allows.
    let created = [
        fixture.create("acme/pause", json!({"seconds": 45.0})).await,
        fixture.create("acme/pause", json!({"seconds": 45.0})).await,
    ];
    fixture.await_running(&created, 2).await;
    all_reported(&fixture, "acme/pause", |r| states(r) == ["busy", "busy"]).await;
    let done = crate::fixture::finished(&fixture, &created).await;
    assert!(
        done.iter().all(|p| p.status == PredictionStatus::Succeeded),
        "{:?}",
        done.iter().map(|p| &p.error).collect::<Vec<_>>()
    );

    // Idle again: the second instance is stopped, the kept one stays.
    let after = all_reported(&fixture, "acme/pause", |r| states(r) == ["ready", "stopped"]).await;
    let stopped = after.iter().find(|r| r.state == "stopped").expect("one stopped");
    assert_eq!(stopped.last_exit.as_deref(), Some("idle"), "{after:?}");
    std::fs::remove_dir_all(dir).ok();
}

/// A deployment of `version` of acme/echo on the `cpu` pool keeping `min` instances.
fn echo_deployment(account: &common::domain::AccountId, version: &str, number: u32, min: u32) -> DeploymentRecord {
    DeploymentRecord {
        id: DeploymentRecord::id_of(account, "kept"),
        account_id: account.clone(),
        owner: "test".into(),
        name: "kept".into(),
        created_at: bson::DateTime::now(),
        current_release: Release {
            number,
            model: "acme/echo".parse().expect("model"),
            version: version.into(),
            created_at: bson::DateTime::now(),
            created_by: "test".into(),
            configuration: ReleaseConfiguration {
                hardware: Pool::parse("cpu").expect("a pool"),
                min_instances: min,
                max_instances: 2,
                priority: None,
            },
        },
    }
}

#[tokio::test]
async fn a_deployments_min_instances_keeps_its_versions_servers_running_and_lowered_lets_them_stop() {
    let fixture = Fixture::new(&[]).await;
    let dir = project("echo", ECHO);
    runner_for_project(&fixture, "acme/echo", &dir, "?max_instances=2&idle_seconds=2").await;
    let version = fixture.version_of(&"acme/echo".parse().expect("model")).await;
    let account = common::domain::AccountId::generate();
    let deployments = fixture.store.deployments();
    deployments.insert(&echo_deployment(&account, &version, 1, 2)).await.expect("inserted");
    // Both servers boot without a job, and stay past their idle time.
    let both = |wanted: &'static [&'static str]| {
        let fixture = &fixture;
        async move {
            let found = eventually(Duration::from_secs(120), || async {
                let live = fixture.store.runners().live(bson::DateTime::now()).await.ok()?;
                let of: Vec<_> =
                    live.into_iter().flat_map(|r| r.instances).filter(|r| r.model.to_string() == "acme/echo").collect();
                (states(&of) == wanted).then_some(of)
            })
            .await;
            found.unwrap_or_else(|| panic!("the runner never reported {wanted:?}"))
        }
    };
    both(&["ready", "ready"]).await;
    // Twice their idle time later (the wait is the condition itself), still both running.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let kept = both(&["ready", "ready"]).await;
    assert!(kept.iter().all(|r| r.last_exit.is_none()), "never stopped: {kept:?}");

    // Its release lowered to none kept: they stop once idle, as any other.
    let lowered = echo_deployment(&account, &version, 2, 0).current_release;
    assert!(deployments.release(&account, "kept", 1, &lowered).await.expect("released"));
    let after = both(&["stopped", "stopped"]).await;
    assert!(after.iter().all(|r| r.last_exit.as_deref() == Some("idle")), "{after:?}");
    std::fs::remove_dir_all(dir).ok();
}
