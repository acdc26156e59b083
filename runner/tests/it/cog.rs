//! Models served by real Cog servers (cog/coglet 0.23.1 from PyPI, no Docker), started from
//! the predictors under `tests/fixtures/cog/`.

use std::time::Duration;

use bson::doc;
use common::domain::PredictionStatus;
use serde_json::json;
use testkit::{
    cog::{CogMode, CogServer},
    eventually,
};

use crate::fixture::Fixture;

async fn runner_for(fixture: &Fixture, model: &str, server: &CogServer) {
    runner_for_with(fixture, model, server, &[]).await;
}

/// Starts a runner serving `model` from `server`, with more settings, and waits until it has
/// registered the model.
async fn runner_for_with(fixture: &Fixture, model: &str, server: &CogServer, extra: &[(&str, &str)]) {
    let cog = format!("{model}={}", server.url);
    let mut settings = vec![("RUNNER_COG", cog.as_str())];
    settings.extend_from_slice(extra);
    fixture.start_runner_with("acme/*", &settings);
    let model_ref = model.parse().expect("model");
    let registered =
        eventually(Duration::from_secs(60), || async { fixture.store.models().get(&model_ref).await.ok().flatten() })
            .await;
    assert!(registered.is_some(), "the runner registered {model}");
}

/// Whether the server reports `status` within 5 s.
async fn server_reports(server: &CogServer, status: &str) -> bool {
    eventually(Duration::from_secs(5), || async { (server.health().await.as_deref() == Some(status)).then_some(()) })
        .await
        .is_some()
}

/// What the api does on cancel: mark it canceled, then broadcast.
async fn cancel_as_the_api_does(fixture: &Fixture, id: &common::domain::PredictionId) {
    let coll = fixture.store.database().collection::<bson::Document>("predictions");
    coll.update_one(doc! {"_id": id.as_str()}, doc! {"$set": {"status": "canceled"}}).await.expect("cancel");
    fixture.bus.publish_cancel(id).await.expect("broadcast");
}

/// Starts a long prediction of `fixture`'s model, kills its Cog server mid-run, and checks
/// that the prediction fails with `MODEL_SERVER_UNAVAILABLE`.
async fn killing_the_server_mid_run_fails_the_prediction(fixture_name: &str, input: serde_json::Value) {
    let fixture = Fixture::new(&[]).await;
    let mut server = CogServer::start_ready(fixture_name, CogMode::Predict).await;
    let model = format!("acme/{fixture_name}");
    runner_for(&fixture, &model, &server).await;
    let p = fixture.create(&model, input).await;
    fixture.wait_until(&p.id, Duration::from_secs(30), |p| p.status == PredictionStatus::Processing).await;
    server.kill();
    let done = fixture.wait_until(&p.id, Duration::from_secs(15), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Failed);
    assert_eq!(done.error.map(|e| e.code).as_deref(), Some("MODEL_SERVER_UNAVAILABLE"));
}

#[tokio::test]
async fn a_cog_echo_model_registers_its_schema_and_runs() {
    let fixture = Fixture::new(&[]).await;
    let server = CogServer::start_ready("echo", CogMode::Predict).await;
    runner_for(&fixture, "acme/echo", &server).await;
    let record =
        fixture.store.models().get(&"acme/echo".parse().expect("model")).await.expect("read").expect("registered");
    let schema = record.input_schema().expect("json");
    assert_eq!(schema["required"], json!(["prompt"]));
    assert_eq!(schema["properties"]["repeat"]["maximum"], 10);

    let p = fixture.create("acme/echo", json!({"prompt": "hi", "repeat": 2})).await;
    let done = fixture.wait_until(&p.id, Duration::from_secs(30), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Succeeded, "{:?}", done.error);
    assert_eq!(done.output.as_ref().and_then(serde_json::Value::as_str), Some("hi hi"));
    assert!(done.logs.contains("echoing 'hi' x2"), "{:?}", done.logs);
}

#[tokio::test]
async fn a_streaming_cog_model_updates_logs_and_output_while_it_runs() {
    let fixture = Fixture::new(&[]).await;
    let server = CogServer::start_ready("slow", CogMode::Predict).await;
    runner_for(&fixture, "acme/slow", &server).await;
    let p = fixture.create("acme/slow", json!({"seconds": 2.0, "fail": false})).await;
    let midway = fixture
        .wait_until(&p.id, Duration::from_secs(30), |p| {
            p.status == PredictionStatus::Processing && !p.logs.is_empty() || p.status.is_terminal()
        })
        .await;
    assert_eq!(midway.status, PredictionStatus::Processing, "logs were stored before the end");
    let first = midway.output.as_ref().and_then(|o| o.get(0)).and_then(serde_json::Value::as_str);
    assert_eq!(first, Some("tick0 "), "the iterator's items so far: {:?}", midway.output);
    let done = fixture.wait_until(&p.id, Duration::from_secs(30), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Succeeded, "{:?}", done.error);
    let mut items: Vec<String> = (0..10).map(|i| format!("tick{i} ")).collect();
    items.push("done".into());
    assert_eq!(done.output, Some(json!(items)), "an iterator's output is its items");
    assert!(done.logs.contains("log line 9"));
}

#[tokio::test]
async fn a_failing_cog_model_keeps_its_logs_and_error() {
    let fixture = Fixture::new(&[]).await;
    let server = CogServer::start_ready("slow", CogMode::Predict).await;
    runner_for(&fixture, "acme/slow", &server).await;
    let p = fixture.create("acme/slow", json!({"seconds": 0.8, "fail": true})).await;
    let done = fixture.wait_until(&p.id, Duration::from_secs(30), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Failed);
    let error = done.error.expect("an error");
    assert!(error.message.contains("asked to fail"), "{}", error.message);
    assert!(done.logs.contains("log line 0"), "logs survive a failure: {:?}", done.logs);
}

#[tokio::test]
async fn canceling_a_cog_prediction_stops_it_on_the_server() {
    let fixture = Fixture::new(&[]).await;
    let server = CogServer::start_ready("slow", CogMode::Predict).await;
    runner_for(&fixture, "acme/slow", &server).await;
    let p = fixture.create("acme/slow", json!({"seconds": 30.0, "fail": false})).await;
    fixture.wait_until(&p.id, Duration::from_secs(30), |p| p.status == PredictionStatus::Processing).await;
    assert_eq!(server.health().await.as_deref(), Some("BUSY"));
    cancel_as_the_api_does(&fixture, &p.id).await;
    assert!(server_reports(&server, "READY").await, "the Cog server stopped the prediction");
}

#[tokio::test]
async fn a_cog_server_killed_mid_prediction_fails_it_with_a_clear_error() {
    killing_the_server_mid_run_fails_the_prediction("slow", json!({"seconds": 30.0, "fail": false})).await;
}

#[tokio::test]
async fn a_cog_file_output_becomes_a_stored_file_behind_a_url() {
    let fixture = Fixture::new(&[]).await;
    let server = CogServer::start_ready("file", CogMode::Predict).await;
    runner_for(&fixture, "acme/file", &server).await;
    let p = fixture.create("acme/file", json!({"size": 3})).await;
    let done = fixture.wait_until(&p.id, Duration::from_secs(30), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Succeeded, "{:?}", done.error);
    let url = done.output.as_ref().and_then(serde_json::Value::as_str).expect("an output URL");
    let file_id = url.rsplit('/').next().and_then(|id| common::domain::FileId::parse(id).ok()).expect("a file URL");
    let files = common::files::Files::new(&fixture.store);
    let info = files.get(&file_id).await.expect("read").expect("stored");
    assert_eq!(info.content_type, "image/png");
    assert_eq!(info.prediction_id, Some(p.id.clone()));
    let bytes = files.read_all(&info).await.expect("read");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(u32::from_be_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]), 3, "IHDR width");
}

#[tokio::test]
async fn a_non_streaming_cog_model_runs_in_one_held_call_that_a_cancel_stops_on_the_server() {
    let fixture = Fixture::new(&[]).await;
    let server = CogServer::start_ready("pause", CogMode::Predict).await;
    runner_for(&fixture, "acme/pause", &server).await;
    let quick = fixture.create("acme/pause", json!({"seconds": 0.1})).await;
    let done = fixture.wait_until(&quick.id, Duration::from_secs(30), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Succeeded, "{:?}", done.error);
    assert_eq!(done.output.as_ref().and_then(serde_json::Value::as_str), Some("paused 0.1 s"));
    assert!(done.logs.contains("pausing 0.1 s"), "the sync answer's logs are kept: {:?}", done.logs);

    let p = fixture.create("acme/pause", json!({"seconds": 30.0})).await;
    fixture.wait_until(&p.id, Duration::from_secs(30), |p| p.status == PredictionStatus::Processing).await;
    assert!(server_reports(&server, "BUSY").await, "the Cog server runs it");
    cancel_as_the_api_does(&fixture, &p.id).await;
    assert!(server_reports(&server, "READY").await, "the Cog server stopped the prediction");
}

#[tokio::test]
async fn a_cog_server_killed_during_a_sync_call_fails_the_prediction_with_a_clear_error() {
    killing_the_server_mid_run_fails_the_prediction("pause", json!({"seconds": 30.0})).await;
}

/// coglet answers `/health-check` through its worker, which does not answer while it uploads a
/// large output file: a server silent for a few health checks is busy, not gone.
#[tokio::test]
async fn a_cog_server_silent_for_a_few_health_checks_finishes_its_prediction() {
    let fixture = Fixture::new(&[]).await;
    let server = CogServer::start_ready("pause", CogMode::Predict).await;
    runner_for(&fixture, "acme/pause", &server).await;
    let p = fixture.create("acme/pause", json!({"seconds": 3.0})).await;
    fixture.wait_until(&p.id, Duration::from_secs(30), |p| p.status == PredictionStatus::Processing).await;
    // Two health checks (every 2 s, each given 2 s) go unanswered.
    server.freeze_for(Duration::from_secs(7)).await;
    let done = fixture.wait_until(&p.id, Duration::from_secs(60), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Succeeded, "{:?}", done.error);
    assert_eq!(done.output.as_ref().and_then(serde_json::Value::as_str), Some("paused 3.0 s"));
}

/// The version the runner serves `acme/pause` under in the test below, named before the
/// runner registers it so that a job can wait for it.
const EARLY_VERSION: &str = "pause1";

#[tokio::test]
async fn a_model_started_early_for_a_prediction_canceled_in_the_queue_is_stopped_on_the_server() {
    let fixture = Fixture::new(&[]).await;
    let server = CogServer::start_ready("pause", CogMode::Predict).await;
    // Canceled while its job waited; the job carries its input, so the runner starts the model
    // beside its `processing` write, which then finds nothing to run.
    let account = common::domain::AccountId::generate();
    let limit = Duration::from_secs(1800);
    let canceled = fixture
        .store_prediction_of_version(&account, "acme/pause", EARLY_VERSION, json!({"seconds": 30.0}), limit)
        .await;
    let coll = fixture.store.database().collection::<bson::Document>("predictions");
    coll.update_one(doc! {"_id": canceled.id.as_str()}, doc! {"$set": {"status": "canceled"}}).await.expect("cancel");
    fixture.publish_job(&canceled).await;
    let version = format!("acme/pause={EARLY_VERSION}");
    runner_for_with(&fixture, "acme/pause", &server, &[("RUNNER_MODEL_VERSIONS", &version)]).await;

    // The server has one slot, and the account's jobs are taken in order: the next prediction
    // runs only once the early call let the slot go.
    let next = fixture.create_of(&account, "acme/pause", json!({"seconds": 0.1})).await;
    let done = fixture.wait_until(&next.id, Duration::from_secs(20), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Succeeded, "{:?}", done.error);
    let after = fixture.current(&canceled.id).await;
    assert_eq!((after.status, after.output, after.started_at), (PredictionStatus::Canceled, None, None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_call_dropped_as_it_reaches_the_server_is_stopped_there() {
    runs_dropped_as_they_reach_the_server_are_stopped_there(true).await;
}

/// The same with the prediction posted for webhooks (`RUNNER_COG_SYNC=false`, and how a
/// streaming model runs): the run can be dropped while its request is on the way, before the
/// server has answered it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_by_webhooks_dropped_as_it_reaches_the_server_is_stopped_there() {
    runs_dropped_as_they_reach_the_server_are_stopped_there(false).await;
}

/// Starts 30 s runs of the `pause` model and drops each 0 to 1.9 ms after its request went
/// out; each must be stopped on the server. `sync_allowed`: a held call, else webhooks.
async fn runs_dropped_as_they_reach_the_server_are_stopped_there(sync_allowed: bool) {
    use runner::models::{
        Model, Progress,
        cog::{CogModel, callbacks::Callbacks},
    };
    let fixture = Fixture::new(&[]).await;
    let server = CogServer::start_ready("pause", CogMode::Predict).await;
    let uploads = runner::models::cog::uploads::Uploads::new(
        common::files::Files::new(&fixture.store),
        common::links::Links::for_tests("http://127.0.0.1:1"),
        runner::models::cog::uploads::DEFAULT_MAX_FILE_BYTES,
        runner::metrics::RunnerMetrics::new(),
    );
    let callbacks =
        Callbacks::serve("127.0.0.1:0".parse().expect("addr"), None, uploads, Default::default()).await.expect("serve");
    let target = runner::models::cog::parse_targets(&format!("acme/pause={}", server.url)).expect("target").remove(0);
    let context = runner::models::cog::CogContext {
        http: reqwest::Client::new(),
        callbacks,
        sync_allowed,
        python: "python3".into(),
        metrics: Default::default(),
        shutdown: Default::default(),
    };
    let model = CogModel::connect(&target, &context).await.expect("connect");
    let progress = Progress::default();
    let input = |seconds: f64| json!({"seconds": seconds}).as_object().cloned().expect("object");
    // A first call leaves a pooled connection, so the requests below need no connect.
    model.run(input(0.0), &progress).await.expect("a quick call");
    // coglet loses a cancel that arrives right as the prediction starts; drops at 0 to 1.9 ms,
    // five times each, land on both sides of that moment (with a single cancel, 2 runs in 3
    // of this test failed here).
    for spin_us in (0..100).map(|i| (i % 20) * 100) {
        let mut run = model.run(input(30.0), &progress);
        let spin = std::time::Instant::now();
        let ran_on = async {
            while spin.elapsed() < Duration::from_micros(spin_us) {
                tokio::task::yield_now().await;
            }
        };
        tokio::select! {
            biased;
            _ = &mut run => panic!("a 30 s call ended at once"),
            () = ran_on => {}
        }
        drop(run);
        assert!(server_reports(&server, "READY").await, "dropped {spin_us} us after the request: still running");
    }
}

/// The files under `dir`, at any depth.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .flatten()
        .flat_map(|e| match e.path() {
            p if p.is_dir() => files_under(&p),
            p => vec![p],
        })
        .collect()
}

// coglet leaves the files a model returned where the model wrote them: the fixture of file
// outputs removes the files of its last prediction when the next starts, and each test's Cog
// server keeps them in a temporary directory of its own, removed with it (a bench of 1 GiB
// outputs had filled this machine's disk, and a CI run on it failed).
#[tokio::test]
async fn a_cog_server_leaves_no_output_files_behind() {
    let server = CogServer::start_ready("images", CogMode::Predict).await;
    let http = reqwest::Client::new();
    let predict = || async {
        // coglet frees its slot a moment after it answers: a 409 "at capacity" right after
        // the previous call is that moment, retried as the runner retries it (`start`).
        let mut backoff = Duration::from_millis(1);
        let answer = loop {
            let answer = http
                .post(format!("{}/predictions", server.url))
                .json(&json!({"input": {"count": 2, "kib": 64}}))
                .timeout(Duration::from_secs(60))
                .send()
                .await
                .expect("predict");
            if answer.status() != reqwest::StatusCode::CONFLICT {
                break answer;
            }
            assert!(backoff < Duration::from_secs(30), "coglet stayed at capacity with nothing running");
            tokio::time::sleep(backoff).await;
            backoff *= 2;
        };
        let body: serde_json::Value = answer.json().await.expect("a JSON answer");
        assert_eq!(body["status"], "succeeded", "{body}");
        assert_eq!(body["output"].as_array().map(Vec::len), Some(2));
    };
    predict().await;
    let first = files_under(server.tmp_dir());
    assert_eq!(first.len(), 2, "the first prediction's files, in the server's own directory: {first:?}");
    predict().await;
    let second = files_under(server.tmp_dir());
    assert_eq!(second.len(), 2, "only the second prediction's files: {second:?}");
    assert!(first.iter().all(|f| !f.exists()), "the first prediction's files are gone");
    let dir = server.tmp_dir().to_path_buf();
    drop(server);
    assert!(!dir.exists(), "the server's directory goes with it");
}
