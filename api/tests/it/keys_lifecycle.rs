//! Keys that stop working: inactive and expired keys are refused exactly like unknown ones.

use bson::{DateTime, doc};
use std::time::Duration;

use api::{state::keys::KEY_CACHE_TTL, store::ApiCollections};
use common::domain::ApiKeyId;
use reqwest::Method;
use serde_json::Value;
use testkit::eventually;

use crate::harness::{JsonBody, Options, System};

async fn fresh_key(system: &System) -> (ApiKeyId, String) {
    let created = system.request(Method::POST, "/v1/account/api-keys").send().await.expect("sent").json_body().await;
    let id = ApiKeyId::parse(created["id"].as_str().expect("id")).expect("a key id");
    (id, created["key"].as_str().expect("key").to_owned())
}

async fn body_of_401(system: &System, key: &str) -> Value {
    let response = system.with_key(Method::GET, "/v1/predictions", key).send().await.expect("sent");
    assert_eq!(response.status(), 401);
    response.json_body().await
}

#[tokio::test]
async fn inactive_and_expired_keys_get_the_same_401_as_unknown_ones() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    let db = system.ctx.store().await;
    let keys = db.database().collection::<bson::Document>("api_keys");

    // Changed in the database before their first use, so no cached look-up hides the change.
    let (inactive_id, inactive) = fresh_key(&system).await;
    keys.update_one(doc! {"_id": inactive_id.as_str()}, doc! {"$set": {"is_active": false}}).await.expect("update");
    let (expired_id, expired) = fresh_key(&system).await;
    let past = DateTime::from_millis(DateTime::now().timestamp_millis() - 1000);
    keys.update_one(doc! {"_id": expired_id.as_str()}, doc! {"$set": {"expires_at": past}}).await.expect("update");

    let unknown = body_of_401(&system, &format!("psk_{}", "B".repeat(40))).await;
    assert_eq!(body_of_401(&system, &inactive).await, unknown);
    assert_eq!(body_of_401(&system, &expired).await, unknown);
}

#[tokio::test]
async fn last_used_at_is_written_at_most_once_a_minute() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    let store = system.ctx.store().await;
    let (id, _) = fresh_key(&system).await;
    let now = DateTime::now();
    assert!(store.api_keys().touch_last_used(&id, now).await.expect("touch"), "the first use is written");
    let later = DateTime::from_millis(now.timestamp_millis() + 59_000);
    assert!(!store.api_keys().touch_last_used(&id, later).await.expect("touch"), "not again within a minute");
    let after_a_minute = DateTime::from_millis(now.timestamp_millis() + 61_000);
    assert!(store.api_keys().touch_last_used(&id, after_a_minute).await.expect("touch"));
}

#[tokio::test]
async fn each_account_sees_only_its_own_signing_secret() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    let other = system.bootstrap_account("other").await;
    let mine = system.get("/v1/account/webhooks/secret").await.json_body().await;
    let theirs = system.with_key(Method::GET, "/v1/account/webhooks/secret", &other).send().await.expect("sent");
    let theirs = theirs.json_body().await;
    assert_ne!(mine["key"], theirs["key"]);
    assert_eq!(mine["key"], system.secret.expose());
}

#[tokio::test]
async fn a_deactivated_key_is_refused_at_once_on_every_replica() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    let other = system.start_another_api().await;
    let (id, key) = fresh_key(&system).await;
    // Both replicas have the key in their caches.
    let use_on = |base: String| {
        let request = system.http().get(format!("{base}/v1/predictions")).bearer_auth(&key);
        async move { request.send().await.expect("sent").status() }
    };
    assert_eq!(use_on(system.base_url.clone()).await, 200);
    assert_eq!(use_on(other.clone()).await, 200);

    let path = format!("/v1/account/api-keys/{id}");
    let deactivated = system.request(Method::PATCH, &path).json(&serde_json::json!({"is_active": false})).send().await;
    let deactivated = deactivated.expect("sent");
    assert_eq!(deactivated.status(), 200);
    assert_eq!(deactivated.json_body().await["is_active"], false);
    assert_eq!(
        use_on(system.base_url.clone()).await,
        401,
        "the deactivating replica emptied its cache before answering"
    );
    // The other replica drops its cached look-up when the announcement reaches it, which the
    // deactivation waited to see delivered, but which that process may read a moment after
    // the next request: it is refused within the cache's lifetime, never only by its end.
    let refused = eventually(KEY_CACHE_TTL.saturating_sub(Duration::from_secs(1)), || {
        let request = use_on(other.clone());
        async move { (request.await == 401).then_some(()) }
    })
    .await;
    assert!(refused.is_some(), "the other replica's cached look-up is dropped by the announcement, before its TTL");
}

#[tokio::test]
async fn a_key_cannot_be_reactivated_and_only_is_active_may_change() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    let (id, _) = fresh_key(&system).await;
    let path = format!("/v1/account/api-keys/{id}");
    for (body, field) in [
        (serde_json::json!({"is_active": true}), "is_active"),
        (serde_json::json!({"is_active": "no"}), "is_active"),
        (serde_json::json!({"is_active": false, "name": "x"}), "name"),
    ] {
        let r = system.request(Method::PATCH, &path).json(&body).send().await.expect("sent");
        assert_eq!(r.status(), 400, "{body}");
        assert_eq!(r.json_body().await["errors"][0]["field"], field, "{body}");
    }
    let unknown = format!("/v1/account/api-keys/{}", ApiKeyId::generate());
    let r = system.request(Method::PATCH, &unknown).json(&serde_json::json!({"is_active": false})).send().await;
    assert_eq!(r.expect("sent").status(), 404);
}

#[tokio::test]
async fn keys_are_listed_newest_first_without_their_values() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    let created = system
        .request(Method::POST, "/v1/account/api-keys")
        .json(&serde_json::json!({"name": "newest", "rate_limit_rpm": 42}))
        .send()
        .await
        .expect("sent")
        .json_body()
        .await;
    assert_eq!(created["rate_limit_rpm"], 42);
    let page = system.get("/v1/account/api-keys?limit=1").await.json_body().await;
    assert_eq!(page["total_count"], 2, "the bootstrap key and the new one");
    let first = &page["results"][0];
    assert_eq!(first["id"], created["id"]);
    assert_eq!(first["name"], "newest");
    assert!(first.get("key").is_none(), "no key value in a list: {first}");
    assert!(page["next"].as_str().is_some_and(|n| n.ends_with("/v1/account/api-keys?limit=1&offset=1")));
    let r = system.get("/v1/account/api-keys?limit=0").await;
    assert_eq!(r.status(), 400);
}
