//! `POST /v1/predictions/{id}/cancel` while starting, while processing, and when terminal.

use std::time::Duration;

use serde_json::{Value, json};
use testkit::eventually;

use receiver::Receiver;

use crate::harness::{JsonBody, Options, System};

#[tokio::test]
async fn a_starting_prediction_is_canceled_at_once_and_never_run() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    system.register_models_only().await;
    let created = system.post_json("/v1/models/demo/echo/predictions", &json!({"input": {"prompt": "x"}})).await;
    let id = created.json_body().await["id"].as_str().expect("id").to_owned();

    let response = system.post_json(&format!("/v1/predictions/{id}/cancel"), &json!({})).await;
    assert_eq!(response.status(), 200);
    let canceled = response.json_body().await;
    assert_eq!(canceled["status"], "canceled");
    assert!(canceled["completed_at"].as_str().is_some());
    assert_eq!(canceled["started_at"], Value::Null);
    assert_eq!(canceled["metrics"]["predict_time"], 0.0);

    // A runner that starts now takes the job and skips it.
    system.start_runner();
    let store = system.ctx.store().await;
    let bus = system.ctx.bus().await;
    let stream = bus.jetstream().get_stream(bus.subjects().jobs_stream()).await.expect("jobs stream");
    let drained = eventually(Duration::from_secs(20), || {
        let mut stream = stream.clone();
        async move { (stream.info().await.ok()?.state.messages == 0).then_some(()) }
    })
    .await;
    assert!(drained.is_some(), "the runner consumed the job");
    let id = common::domain::PredictionId::parse(&id).expect("id");
    let after = store.predictions().get(&id).await.expect("read").expect("exists");
    assert_eq!(after.status, common::domain::PredictionStatus::Canceled);
    assert_eq!(after.output, None, "the model never ran");
}

#[tokio::test]
async fn a_processing_prediction_is_canceled_and_its_runner_stops_within_a_second() {
    let system = System::start().await;
    let receiver = Receiver::start().await;
    let created = system
        .post_json("/v1/models/demo/sleep/predictions", &json!({"input": {"seconds": 60}, "webhook": receiver.url()}))
        .await;
    let id = created.json_body().await["id"].as_str().expect("id").to_owned();
    let processing = eventually(Duration::from_secs(20), || async {
        let p = system.get(&format!("/v1/predictions/{id}")).await.json_body().await;
        (p["status"] == "processing").then_some(())
    })
    .await;
    assert!(processing.is_some(), "the prediction started");

    let canceled = system.post_json(&format!("/v1/predictions/{id}/cancel"), &json!({})).await.json_body().await;
    assert_eq!(canceled["status"], "canceled");
    let predict_time = canceled["metrics"]["predict_time"].as_f64().expect("predict_time");
    assert!((0.0..30.0).contains(&predict_time));

    // The runner acks the job once it has aborted the model call: no job stays pending. (The
    // model would sleep 60 s: 10 s tells an aborted call from one left to run, on any machine.)
    let bus = system.ctx.bus().await;
    let stream = bus.jetstream().get_stream(bus.subjects().jobs_stream()).await.expect("jobs stream");
    let prediction_id = common::domain::PredictionId::parse(&id).expect("id");
    let record = system.ctx.store().await.predictions().get(&prediction_id).await.expect("read").expect("exists");
    let consumer_name = common::lane::Lane::of(&record).consumer(bus.subjects());
    let released = eventually(Duration::from_secs(10), || {
        let (stream, name) = (stream.clone(), consumer_name.clone());
        async move {
            let mut consumer: async_nats::jetstream::consumer::PullConsumer = stream.get_consumer(&name).await.ok()?;
            let info = consumer.info().await.ok()?;
            (info.num_ack_pending == 0).then_some(())
        }
    })
    .await;
    assert!(released.is_some(), "the runner aborted the model call and acked its job");

    let hook =
        eventually(Duration::from_secs(10), || async { receiver.of_event("completed").into_iter().next() }).await;
    assert_eq!(hook.expect("completed webhook").json()["status"], "canceled");

    let again = system.post_json(&format!("/v1/predictions/{id}/cancel"), &json!({})).await;
    assert_eq!(again.status(), 400);
    let body = again.json_body().await;
    assert_eq!(body["code"], "VALIDATION_INVALID_ARGUMENT");
    assert!(body["detail"].as_str().is_some_and(|d| d.contains("canceled")), "the detail names the status");
}

#[tokio::test]
async fn canceling_a_succeeded_prediction_is_400_naming_its_status() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let created = system.post_json("/v1/models/demo/echo/predictions", &json!({"input": {"prompt": "x"}})).await;
    let id = created.json_body().await["id"].as_str().expect("id").to_owned();
    system.wait_for_terminal(&id, Duration::from_secs(30)).await;
    let response = system.post_json(&format!("/v1/predictions/{id}/cancel"), &json!({})).await;
    assert_eq!(response.status(), 400);
    assert!(response.json_body().await["detail"].as_str().is_some_and(|d| d.contains("succeeded")));
    assert_eq!(system.post_json("/v1/predictions/aaaaaaaaaaaaaaaaaaaaaaaaaa/cancel", &json!({})).await.status(), 404);
}
