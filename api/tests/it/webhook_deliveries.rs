//! A prediction's webhook deliveries: the recorded attempts, and a resend of one.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use testkit::eventually;

use receiver::Receiver;

use crate::harness::{JsonBody, Options, System};

async fn attempts(system: &System, id: &str) -> Vec<Value> {
    let page = system.get(&format!("/v1/predictions/{id}/webhook-deliveries")).await.json_body().await;
    page["results"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn a_failed_delivery_is_resent_once_with_the_same_webhook_id() {
    let system =
        System::start_with(Options { env: vec![("NOTIFIER_RETRY_SCHEDULE", "0.2".into())], ..Options::default() })
            .await;
    let receiver = Receiver::answering(500).await;
    let body = json!({"input": {"prompt": "x"}, "webhook": receiver.url(), "webhook_events_filter": ["completed"]});
    let created = system.post_json("/v1/models/demo/echo/predictions", &body).await.json_body().await;
    let id = created["id"].as_str().expect("id").to_owned();
    let failed = eventually(Duration::from_secs(20), || async {
        let all = attempts(&system, &id).await;
        all.iter().any(|a| a["outcome"] == "failed").then_some(all)
    })
    .await
    .expect("the delivery fails after its two attempts");
    assert_eq!(failed.len(), 2);
    assert_eq!((failed[0]["attempt"].as_u64(), failed[0]["status_code"].as_u64()), (Some(1), Some(500)));
    assert_eq!(failed[0]["outcome"], "will_retry");
    let webhook_id = failed[0]["webhook_id"].as_str().expect("webhook id").to_owned();

    receiver.answer(200);
    let path = format!("/v1/predictions/{id}/webhook-deliveries/{webhook_id}/resend");
    let queued = system.request(Method::POST, &path).send().await.expect("sent");
    assert_eq!(queued.status(), 202);
    assert_eq!(queued.json_body().await["webhook_id"], webhook_id.as_str());
    let third = eventually(Duration::from_secs(20), || async { attempts(&system, &id).await.get(2).cloned() })
        .await
        .expect("the resend is recorded");
    assert_eq!((third["attempt"].as_u64(), third["outcome"].as_str()), (Some(3), Some("delivered")));
    let sent = receiver.of_event("completed");
    assert_eq!(sent.len(), 3);
    assert!(sent.iter().all(|d| d.header("webhook-id") == webhook_id), "one webhook-id for every attempt");
    assert_eq!(sent[2].body, sent[0].body, "the same payload");
}

#[tokio::test]
async fn another_accounts_deliveries_and_unknown_ones_are_404() {
    let system = System::start().await;
    let receiver = Receiver::start().await;
    let body = json!({"input": {"prompt": "x"}, "webhook": receiver.url(), "webhook_events_filter": ["completed"]});
    let created = system.post_json("/v1/models/demo/echo/predictions", &body).await.json_body().await;
    let id = created["id"].as_str().expect("id");
    let stranger = system.bootstrap_account("stranger").await;
    let path = format!("/v1/predictions/{id}/webhook-deliveries");
    let r = system.with_key(Method::GET, &path, &stranger).send().await.expect("sent");
    assert_eq!(r.status(), 404);
    let resend = format!("/v1/predictions/{id}/webhook-deliveries/msg_unknown/resend");
    assert_eq!(system.request(Method::POST, &resend).send().await.expect("sent").status(), 404);
}
