//! A `cog.Secret` input (`x-cog-secret` in the version's schema) reaching a real Cog model
//! (coglet 0.23.1) whole, and shown nowhere: not in the stored prediction, its answers on both
//! surfaces, the list, its webhook, the logs the model printed it in, or the console.

use std::time::Duration;

use common::domain::{PredictionId, secret_inputs::MASK};
use receiver::Receiver;
use serde_json::json;
use sha2::{Digest, Sha256};
use testkit::{
    cog::{CogMode, CogServer},
    eventually,
};

use crate::harness::{JsonBody, Options, System};

#[tokio::test]
async fn a_secret_input_reaches_the_model_whole_and_is_shown_nowhere() {
    let server = CogServer::start_ready("secret", CogMode::Predict).await;
    let system = System::start_with(Options {
        env: vec![("RUNNER_COG", format!("acme/secret={}", server.url))],
        ..Options::default()
    })
    .await;
    let registered = eventually(Duration::from_secs(90), || async {
        (system.get("/v1/models/acme/secret").await.status() == 200).then_some(())
    })
    .await;
    assert!(registered.is_some(), "the runner registered acme/secret");
    let receiver = Receiver::start().await;
    let token = "r8_TopSecretToken0123456789";

    let body = json!({"input": {"token": token, "text": "x"}, "webhook": receiver.url(), "webhook_events_filter": ["completed"]});
    let created = system.post_json("/replicate/v1/models/acme/secret/predictions", &body).await;
    assert_eq!(created.status(), 201);
    let created = created.json_body().await;
    assert_eq!(created["input"], json!({"token": MASK, "text": "x"}), "masked in the create's answer");
    let id = created["id"].as_str().expect("an id").to_owned();
    let done = system.wait_for_terminal(&id, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let expected = format!("{} {:x} x", token.len(), Sha256::digest(token.as_bytes()));
    assert_eq!(done["output"], expected, "the model received the whole secret");

    let mut shown = Vec::new();
    for path in [format!("/v1/predictions/{id}"), format!("/replicate/v1/predictions/{id}"), "/v1/predictions".into()] {
        shown.push(system.get(&path).await.text().await.expect("a body"));
    }
    let browser = crate::console::Browser::sign_in(&system, &system.admin_key).await;
    shown.push(browser.page(&format!("/predictions/{id}")).await);
    let delivered = eventually(Duration::from_secs(30), || async { receiver.of_event("completed").pop() }).await;
    shown.push(delivered.expect("the completed webhook").json().to_string());
    let store = system.ctx.store().await;
    let stored = store.predictions().get(&PredictionId::parse(&id).expect("an id")).await.expect("read").expect("one");
    shown.push(serde_json::to_string(&stored).expect("json"));
    for text in &shown {
        assert!(!text.contains(token), "the secret shows: {text}");
    }
    assert!(stored.logs.contains(&format!("calling the service with {MASK} for x")), "logs masked: {}", stored.logs);
    assert_eq!(stored.input["token"], MASK);
}
