//! Rotating the webhook signing secret, and deliveries signed with both secrets meanwhile.

use std::time::Duration;

use chrono::{DateTime, Utc};
use common::{domain::WebhookSecret, signing};
use serde_json::json;
use testkit::eventually;

use receiver::Receiver;

use crate::harness::{JsonBody, Options, System};

#[tokio::test]
async fn rotation_bounds_hold_and_the_window_defaults_to_24_hours() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    for (hours, status) in [(0, 400), (169, 400), (1, 200), (168, 200)] {
        let r = system.post_json("/v1/account/webhooks/secret/rotate", &json!({"transition_hours": hours})).await;
        assert_eq!(r.status(), status, "transition_hours={hours}");
    }
    let rotated = system.post_json("/v1/account/webhooks/secret/rotate", &json!({})).await.json_body().await;
    let expires: DateTime<Utc> =
        rotated["previous_key_expires_at"].as_str().and_then(|s| s.parse().ok()).expect("expiry");
    assert!((expires - (Utc::now() + chrono::Duration::hours(24))).num_seconds().abs() < 60);
    let shown = system.get("/v1/account/webhooks/secret").await.json_body().await;
    assert_eq!(shown["key"], rotated["key"]);
    assert_ne!(shown["key"], system.secret.expose());
}

#[tokio::test]
async fn during_the_window_deliveries_carry_new_then_old_signatures() {
    let system = System::start().await;
    let receiver = Receiver::start().await;
    let rotated = system.post_json("/v1/account/webhooks/secret/rotate", &json!({"transition_hours": 1})).await;
    let new = WebhookSecret::parse(rotated.json_body().await["key"].as_str().expect("key")).expect("a secret");

    let body = json!({"input": {"prompt": "x"}, "webhook": receiver.url(), "webhook_events_filter": ["completed"]});
    system.post_json("/v1/models/demo/echo/predictions", &body).await;
    let hook = eventually(Duration::from_secs(20), || async { receiver.of_event("completed").into_iter().next() })
        .await
        .expect("completed webhook");
    let header = hook.header("webhook-signature");
    let parts: Vec<&str> = header.split(' ').collect();
    assert_eq!(parts.len(), 2, "two signatures: {header}");
    let timestamp: i64 = hook.header("webhook-timestamp").parse().expect("timestamp");
    let id = hook.header("webhook-id");
    assert!(signing::verify(&new, id, timestamp, &hook.body, parts[0]), "the first is the new secret's");
    assert!(signing::verify(&system.secret, id, timestamp, &hook.body, parts[1]), "the second is the old secret's");
}

#[tokio::test]
async fn every_delivery_after_a_rotation_answers_is_signed_with_the_new_secret() {
    let system = System::start().await;
    let receiver = Receiver::start().await;
    // Warm the notifier's cache with the first secret.
    let body = json!({"input": {"prompt": "x"}, "webhook": receiver.url(), "webhook_events_filter": ["completed"]});
    system.post_json("/v1/models/demo/echo/predictions", &body).await;
    eventually(Duration::from_secs(20), || async { receiver.of_event("completed").into_iter().next() })
        .await
        .expect("the first webhook");
    for round in 0..20 {
        let rotated = system.post_json("/v1/account/webhooks/secret/rotate", &json!({"transition_hours": 1})).await;
        let new = WebhookSecret::parse(rotated.json_body().await["key"].as_str().expect("key")).expect("a secret");
        let created = system.post_json("/v1/models/demo/echo/predictions", &body).await.json_body().await;
        let id = created["id"].as_str().expect("id").to_owned();
        let hook = eventually(Duration::from_secs(20), || async {
            receiver.of_event("completed").into_iter().find(|d| d.json()["id"] == id.as_str())
        })
        .await
        .expect("its completed webhook");
        let header = hook.header("webhook-signature");
        let first = header.split(' ').next().expect("a signature");
        let timestamp: i64 = hook.header("webhook-timestamp").parse().expect("timestamp");
        assert!(
            signing::verify(&new, hook.header("webhook-id"), timestamp, &hook.body, first),
            "round {round}: signed first with the secret the rotation returned"
        );
    }
}
