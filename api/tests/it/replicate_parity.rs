//! The request conventions of docs/api.md on the api: `Prefer: wait`, `Idempotency-Key` and `Cancel-After` (the
//! stream has its own file, `streaming.rs`).

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::harness::{JsonBody, Options, System};

pub async fn create_with(system: &System, model: &str, body: Value, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = system
        .request(Method::POST, &format!("/v1/models/{model}/predictions"))
        .header("content-type", "application/json")
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("sent")
}

#[tokio::test]
async fn prefer_wait_returns_the_finished_prediction() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let response =
        create_with(&system, "demo/echo", json!({"input": {"prompt": "hi", "repeat": 2}}), &[("prefer", "wait")]).await;
    assert_eq!(response.status(), 201);
    let body = response.json_body().await;
    assert_eq!(body["status"], "succeeded");
    assert_eq!(body["output"], "hi hi");
}

#[tokio::test]
async fn prefer_wait_n_answers_after_n_seconds_with_the_prediction_as_it_stands() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let started = Instant::now();
    let response = create_with(&system, "demo/sleep", json!({"input": {"seconds": 30}}), &[("prefer", "wait=1")]).await;
    let elapsed = started.elapsed();
    assert_eq!(response.status(), 201);
    let body = response.json_body().await;
    assert!(matches!(body["status"].as_str(), Some("starting" | "processing")), "{body}");
    assert!(elapsed >= Duration::from_millis(950) && elapsed < Duration::from_secs(5), "{elapsed:?}");
}

#[tokio::test]
async fn an_impossible_wait_is_400_and_creates_nothing() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    system.register_models_only().await;
    for value in ["wait=0", "wait=61", "wait=x"] {
        let response = create_with(&system, "demo/echo", json!({"input": {"prompt": "x"}}), &[("prefer", value)]).await;
        assert_eq!(response.status(), 400, "{value}");
        assert_eq!(response.json_body().await["errors"][0]["field"], "Prefer");
    }
    assert_eq!(system.get("/v1/predictions").await.json_body().await["total_count"], 0);
}

#[tokio::test]
async fn the_same_idempotency_key_returns_the_first_prediction_and_never_a_second_job() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    system.register_models_only().await;
    let body = json!({"input": {"prompt": "once"}});
    let first = create_with(&system, "demo/echo", body.clone(), &[("idempotency-key", "order-42")]).await;
    assert_eq!(first.status(), 201);
    let first = first.json_body().await;
    let again = create_with(&system, "demo/echo", body.clone(), &[("idempotency-key", "order-42")]).await;
    assert_eq!(again.status(), 201);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.json_body().await["id"], first["id"]);

    let other_key = create_with(&system, "demo/echo", body.clone(), &[("idempotency-key", "order-43")]).await;
    assert_ne!(other_key.json_body().await["id"], first["id"]);
    assert_eq!(system.get("/v1/predictions").await.json_body().await["total_count"], 2);

    let bus = system.ctx.bus().await;
    let jobs = bus.jetstream().get_stream(bus.subjects().jobs_stream()).await.expect("jobs stream");
    // A job the api could not publish at once goes out from its outbox a moment later.
    let published = testkit::eventually(Duration::from_secs(10), || {
        let mut jobs = jobs.clone();
        async move { jobs.info().await.ok().map(|i| i.state.messages).filter(|n| *n >= 2) }
    })
    .await;
    assert_eq!(published, Some(2), "one job per prediction");

    let too_long = "k".repeat(256);
    let response = create_with(&system, "demo/echo", body, &[("idempotency-key", &too_long)]).await;
    assert_eq!(response.status(), 400);
}

#[tokio::test]
async fn cancel_after_reached_while_running_cancels_and_charges_it_and_a_bad_one_is_400() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let response =
        create_with(&system, "demo/sleep", json!({"input": {"seconds": 60}}), &[("cancel-after", "10s")]).await;
    assert_eq!(response.status(), 201);
    let id = response.json_body().await["id"].as_str().expect("id").to_owned();
    // Seen running before its deadline (ten seconds: a start that takes longer is a fault of
    // its own, and then this says so rather than passing as an abort).
    let path = format!("/v1/predictions/{id}");
    let started = testkit::eventually(Duration::from_secs(10), || async {
        let p = system.get(&path).await.json_body().await;
        (p["status"] != "starting").then_some(p)
    })
    .await
    .expect("it left starting");
    assert_eq!(started["status"], "processing", "{started}");
    let done = system.wait_for_terminal(&id, Duration::from_secs(40)).await;
    assert_eq!(done["status"], "canceled", "the client's deadline cancels, as on Replicate: {done}");
    assert_eq!(done["error"]["code"], "PREDICTION_DEADLINE_REACHED");
    let ran = done["metrics"]["predict_time"].as_f64().expect("a predict_time");
    assert!(ran > 0.0 && ran < 11.0, "charged for the time it ran, until its deadline: {ran}");
    let replicate = system.get(&format!("/replicate/v1/predictions/{id}")).await.json_body().await;
    assert_eq!(replicate["status"], "canceled", "{replicate}");
    assert!(replicate["metrics"]["cost"].is_string(), "{replicate}");

    let bad = create_with(&system, "demo/sleep", json!({"input": {}}), &[("cancel-after", "soon")]).await;
    assert_eq!(bad.status(), 400);
    assert_eq!(bad.json_body().await["errors"][0]["field"], "Cancel-After");
}

#[tokio::test]
async fn cancel_after_reached_before_it_starts_aborts_it_unrun_and_uncharged() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    system.register_models_only().await;
    let response =
        create_with(&system, "demo/echo", json!({"input": {"prompt": "never"}}), &[("cancel-after", "1s")]).await;
    assert_eq!(response.status(), 201);
    let id = response.json_body().await["id"].as_str().expect("id").to_owned();
    // Its deadline passes while no runner is there to start it (the wait is the fault itself).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    system.start_runner_with(&[]);
    let done = system.wait_for_terminal(&id, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "canceled", "/v1 keeps the interface's five statuses: {done}");
    assert_eq!(done["error"]["code"], "PREDICTION_DEADLINE_BEFORE_START");
    assert!(done["started_at"].is_null() && done["output"].is_null(), "it never ran: {done}");
    assert_eq!(done["metrics"]["predict_time"], 0.0, "not charged: {done}");
    let replicate = system.get(&format!("/replicate/v1/predictions/{id}")).await.json_body().await;
    assert_eq!(replicate["status"], "aborted", "{replicate}");
    assert_eq!(replicate["metrics"]["cost"], "0.00", "{replicate}");
    assert!(replicate["error"].as_str().is_some_and(|e| e.contains("Cancel-After")), "{replicate}");
}

#[tokio::test]
async fn a_wait_past_the_cap_is_answered_at_once_as_created() {
    let options = Options { notifier: false, env: vec![("API_MAX_WAITS_PER_KEY", "1".into())], ..Options::default() };
    let system = System::start_with(options).await;
    let body = json!({"input": {"seconds": 2}});
    let (held, capped) =
        tokio::join!(create_with(&system, "demo/sleep", body.clone(), &[("prefer", "wait=10")]), async {
            // Sent once the first create holds its wait (the api's gauge says so), not after a
            // fixed pause that a slow machine could outlast before the first is held.
            system.await_metrics(&[("api_prefer_wait_held", 1.0)]).await;
            let sent = Instant::now();
            let response = create_with(&system, "demo/sleep", body.clone(), &[("prefer", "wait=10")]).await;
            (response, sent.elapsed())
        });
    let (capped, capped_after) = capped;
    assert_eq!(capped.status(), 201);
    assert!(capped.headers().get("preference-applied").is_none(), "the wait was not honoured");
    assert!(capped_after < Duration::from_millis(1500), "answered at once: {capped_after:?}");
    assert_eq!(capped.json_body().await["status"], "starting");
    assert_eq!(held.headers()["preference-applied"], "wait=10");
    assert_eq!(held.json_body().await["status"], "succeeded", "the first wait was held to the end");
}

#[tokio::test]
async fn a_create_finding_its_jobs_stream_gone_makes_it_again_and_the_prediction_runs() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    // Once the runner consumes (a first prediction ran): deleted while the runner still opens
    // the stream, its start would fail instead, which is another fault.
    assert_eq!(system.run("demo/echo", json!({"prompt": "first"})).await["status"], "succeeded");
    let bus = system.ctx.bus().await;
    bus.jetstream().delete_stream(bus.subjects().jobs_stream()).await.expect("deleted");

    let done = create_with(&system, "demo/echo", json!({"input": {"prompt": "again"}}), &[("prefer", "wait=15")]).await;
    let done = done.json_body().await;
    assert_eq!(done["status"], "succeeded", "run without waiting for the reconciler: {done}");
    assert_eq!(done["output"], "again");
}
