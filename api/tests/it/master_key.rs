//! Rotating the master key (`api admin rotate-master-key`, docs/operations.md): while the
//! services run with the new key and the previous one, the command seals every stored secret
//! again under the new key; then the services run with the new key alone, and every API key,
//! signing secret and secret input still opens.

use std::time::Duration;

use api::admin::{Rotation, rotate_master_key};
use common::{
    crypto::{CryptoError, MasterKey},
    domain::{ApiSurface, NewPrediction, Prediction, WebhookSecret},
    signing,
};
use receiver::Receiver;
use reqwest::Method;
use serde_json::{Value, json};
use testkit::eventually;

use crate::harness::{JsonBody, Options, System};

#[tokio::test]
async fn after_a_rotation_every_key_secret_and_input_opens_under_the_new_key_alone() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    let (old, new) = (system.ctx.master_key.clone(), MasterKey::generate_base64());
    let (old_key, new_key) = (MasterKey::from_base64(&old).expect("key"), MasterKey::from_base64(&new).expect("key"));

    // Under the old key: a second API key, a rotated signing secret (the current and the
    // previous one both sealed), and a prediction with a secret input.
    let created = system.request(Method::POST, "/v1/account/api-keys").send().await.expect("sent").json_body().await;
    let (key_id, key_value) = (created["id"].as_str().expect("id"), created["key"].as_str().expect("key"));
    let rotated = system.post_json("/v1/account/webhooks/secret/rotate", &json!({"transition_hours": 1})).await;
    let secret = WebhookSecret::parse(rotated.json_body().await["key"].as_str().expect("key")).expect("a secret");
    let store = system.ctx.store().await;
    let account = store.accounts().find_by_name("test-account").await.expect("read").expect("the account");
    let mut prediction = Prediction::new_starting(NewPrediction {
        account_id: account.id.clone(),
        model: "demo/echo".parse().expect("valid"),
        version: "v1".into(),
        capability: "text-generation".into(),
        input: json!({"prompt": "x", "token": "r8_secret"}),
        model_input: json!({"prompt": "x", "token": "r8_secret"}),
        webhook: None,
        webhook_events_filter: None,
        surface: ApiSurface::Canonical,
    });
    prediction.seal_secrets(&old_key, &["token".to_owned()]);
    store.predictions().insert(&prediction).await.expect("stored");

    let key_path = format!("/v1/account/api-keys/{key_id}");
    let shown = |base: String, path: String| {
        let http = system.http().clone();
        let admin = system.admin_key.clone();
        async move {
            let r = http.get(format!("{base}{path}")).bearer_auth(admin).send().await.expect("sent");
            (r.status().as_u16(), r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    // The new key alone cannot open what the old one sealed: that is why both run for a while.
    let alone = system.start_another_api_with(&[("MASTER_KEY", &new)]).await;
    assert!(shown(alone.clone(), key_path.clone()).await.0 >= 500, "the old key's seal opened without it");
    let both = system.start_another_api_with(&[("MASTER_KEY", &new), ("MASTER_KEY_PREVIOUS", &old)]).await;
    let (status, view) = shown(both.clone(), key_path.clone()).await;
    assert_eq!((status, view["key"].as_str()), (200, Some(key_value)), "both keys open it: {view}");

    let refused = rotate_master_key(&system.admin_config_with(&[("MASTER_KEY", &new)])).await;
    assert!(format!("{:#}", refused.expect_err("no previous key")).contains("MASTER_KEY_PREVIOUS"));
    let rotation = system.admin_config_with(&[("MASTER_KEY", &new), ("MASTER_KEY_PREVIOUS", &old)]);
    let done = rotate_master_key(&rotation).await.expect("rotated");
    let expected = Rotation { signing_secrets: 1, api_keys: 2, secret_inputs: 1, unreadable: vec![] };
    assert_eq!(done, expected, "the bootstrap key and the second one, the account's secrets, the input");
    assert_eq!(rotate_master_key(&rotation).await.expect("again"), Rotation::default(), "nothing left to move");

    // The previous key dropped: the new key alone opens everything.
    let (status, view) = shown(alone.clone(), key_path).await;
    assert_eq!((status, view["key"].as_str()), (200, Some(key_value)), "{view}");
    let (status, view) = shown(alone.clone(), "/v1/account/webhooks/secret".into()).await;
    assert_eq!((status, view["key"].as_str()), (200, Some(secret.expose())), "{view}");
    let stored = store.predictions().get(&prediction.id).await.expect("read").expect("stored");
    assert_eq!(stored.opened_model_input(&new_key).expect("opens")["token"], "r8_secret");
    assert_eq!(stored.opened_model_input(&old_key).err(), Some(CryptoError::CannotOpen), "sealed again");
    let account = store.accounts().get(&account.id).await.expect("read").expect("the account");
    assert!(account.signing_secrets(&old_key).is_err(), "the signing secrets are no longer under the old key");

    // A runner and a notifier with the new key alone: a delivery carries both secrets'
    // signatures (the signing secret's own rotation window is still open).
    system.start_runner_with(&[("MASTER_KEY", &new)]);
    system.start_notifier_with(&[("MASTER_KEY", &new)]);
    let registered = eventually(Duration::from_secs(60), || async {
        (system.get("/v1/models/demo/echo").await.status() == 200).then_some(())
    })
    .await;
    assert!(registered.is_some(), "the runner registered demo/echo");
    let receiver = Receiver::start().await;
    let body = json!({"input": {"prompt": "x"}, "webhook": receiver.url(), "webhook_events_filter": ["completed"]});
    let r = system
        .http()
        .post(format!("{alone}/v1/models/demo/echo/predictions"))
        .bearer_auth(key_value)
        .json(&body)
        .send()
        .await
        .expect("sent");
    assert_eq!(r.status(), 201, "the second key authenticates");
    let hook = eventually(Duration::from_secs(60), || async { receiver.of_event("completed").into_iter().next() })
        .await
        .expect("the completed webhook");
    let (id, timestamp) = (hook.header("webhook-id"), hook.header("webhook-timestamp").parse().expect("a timestamp"));
    let signatures: Vec<&str> = hook.header("webhook-signature").split(' ').collect();
    assert_eq!(signatures.len(), 2, "{signatures:?}");
    assert!(signing::verify(&secret, id, timestamp, &hook.body, signatures[0]), "the current secret signs");
    assert!(signing::verify(&system.secret, id, timestamp, &hook.body, signatures[1]), "and the previous one");
}
