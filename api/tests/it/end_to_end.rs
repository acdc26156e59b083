//! A prediction's whole path: api → JetStream → runner → MongoDB → events → notifier → webhook.

use std::time::Duration;

use chrono::{DateTime, Utc};
use common::{domain::PredictionId, signing, store::webhook_attempts::AttemptOutcome};
use serde_json::{Value, json};
use testkit::eventually;

use receiver::Receiver;

use crate::harness::{JsonBody, System};

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("not a timestamp: {v}"))
}

#[tokio::test]
async fn an_echo_prediction_succeeds_and_one_signed_completed_webhook_arrives() {
    let system = System::start().await;
    let receiver = Receiver::start().await;

    let response = system
        .post_json(
            "/v1/models/demo/echo/predictions",
            &json!({"input": {"prompt": "hello", "repeat": 3, "unknown": true}, "webhook": receiver.url()}),
        )
        .await;
    assert_eq!(response.status(), 201);
    let created = response.json_body().await;
    let id = created["id"].as_str().expect("an id").to_owned();
    assert_eq!(created["status"], "starting");
    assert_eq!(created["model"], "demo/echo");
    assert_eq!(created["source"], "api");
    assert_eq!(created["capability"], "text-generation");
    assert_eq!(created["input"], json!({"prompt": "hello", "repeat": 3, "unknown": true}), "input as submitted");
    assert_eq!(created["output"], Value::Null);
    assert!(created["version"].as_str().is_some_and(|v| !v.is_empty()));
    assert_eq!(created["urls"]["get"], system.url(&format!("/v1/predictions/{id}")));

    let done = system.wait_for_terminal(&id, Duration::from_secs(30)).await;
    assert_eq!(done["status"], "succeeded");
    assert_eq!(done["output"], "hello hello hello");
    assert_eq!(done["error"], Value::Null);
    let (created_at, started_at, completed_at) =
        (time(&done["created_at"]), time(&done["started_at"]), time(&done["completed_at"]));
    assert!(created_at <= started_at && started_at <= completed_at);
    let predict = done["metrics"]["predict_time"].as_f64().expect("predict_time");
    let total = done["metrics"]["total_time"].as_f64().expect("total_time");
    assert!(predict >= 0.0 && total >= predict, "metrics {predict} / {total}");
    let expected_total = (completed_at - created_at).num_milliseconds() as f64 / 1000.0;
    assert!((total - expected_total).abs() < 0.002, "total_time {total} is completed - created {expected_total}");

    // The notifier records each attempt before acknowledging the event, so once the completed
    // attempt is recorded no redelivery can follow.
    let store = system.ctx.store().await;
    let prediction_id = PredictionId::parse(&id).expect("a prediction id");
    let stored = store.predictions().get(&prediction_id).await.expect("read").expect("stored");
    assert_eq!(stored.model_input, json!({"prompt": "hello", "repeat": 3}), "unknown parameters never reach the model");
    let recorded = eventually(Duration::from_secs(20), || async {
        let attempts = store.webhook_attempts().for_prediction(&prediction_id).await.ok()?;
        attempts
            .into_iter()
            .find(|a| a.event == common::domain::WebhookEvent::Completed && a.outcome == AttemptOutcome::Delivered)
    })
    .await;
    assert!(recorded.is_some(), "the completed webhook was not delivered");

    let completed = receiver.of_event("completed");
    assert_eq!(completed.len(), 1, "exactly one completed webhook");
    let hook = &completed[0];
    let timestamp: i64 = hook.header("webhook-timestamp").parse().expect("a unix timestamp");
    assert!((Utc::now().timestamp() - timestamp).abs() < 60);
    assert!(
        signing::verify(
            &system.secret,
            hook.header("webhook-id"),
            timestamp,
            &hook.body,
            hook.header("webhook-signature")
        ),
        "the signature verifies with the account's secret"
    );
    assert_eq!(hook.header("content-type"), "application/json");
    let payload = hook.json();
    assert_eq!(payload, done, "the payload is the prediction as GET shows it");
}

#[tokio::test]
async fn a_filter_of_completed_delivers_nothing_else() {
    let system = System::start().await;
    let receiver = Receiver::start().await;
    let created = system
        .post_json(
            "/v1/models/demo/echo/predictions",
            &json!({"input": {"prompt": "x"}, "webhook": receiver.url(), "webhook_events_filter": ["completed"]}),
        )
        .await
        .json_body()
        .await;
    let id = created["id"].as_str().expect("an id");
    system.wait_for_terminal(id, Duration::from_secs(30)).await;
    let arrived =
        eventually(Duration::from_secs(20), || async { (!receiver.of_event("completed").is_empty()).then_some(()) })
            .await;
    assert!(arrived.is_some(), "completed webhook arrived");
    let events: Vec<String> = receiver.deliveries().iter().map(|d| d.header("webhook-event").to_owned()).collect();
    assert_eq!(events, vec!["completed"]);
}

#[tokio::test]
async fn the_signing_secret_is_shown_to_admins_masked_and_whole() {
    let system = System::start_with(crate::harness::Options { runner: false, notifier: false, env: vec![] }).await;
    for path in ["/v1/account/webhooks/secret", "/v1/webhooks/default/secret"] {
        let response = system.get(path).await;
        assert_eq!(response.status(), 200);
        let body = response.json_body().await;
        assert_eq!(body["key"], system.secret.expose());
        assert_eq!(body["masked"], system.secret.masked());
        assert!(body["created_at"].as_str().is_some());
        assert_eq!(body["previous_key_expires_at"], Value::Null);
    }
}
