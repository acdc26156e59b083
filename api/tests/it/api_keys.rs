//! `POST /v1/account/api-keys`, `GET /v1/account/api-keys/{id}` and scope enforcement.

use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::Method;
use serde_json::{Value, json};
use testkit::eventually;

use crate::harness::{JsonBody, Options, System};

async fn api_only() -> System {
    System::start_with(Options { runner: false, notifier: false, env: vec![] }).await
}

async fn create_key(system: &System, key: &str, body: Value) -> reqwest::Response {
    system
        .with_key(Method::POST, "/v1/account/api-keys", key)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("sent")
}

#[tokio::test]
async fn a_new_key_has_the_documented_defaults_and_shape() {
    let system = api_only().await;
    let response = create_key(&system, &system.admin_key, json!({})).await;
    assert_eq!(response.status(), 201);
    let key = response.json_body().await;
    let value = key["key"].as_str().expect("key");
    assert!(value.starts_with("psk_") && value.len() == 44);
    assert_eq!(key["key_prefix"], &value[..8]);
    assert_eq!(key["name"], "");
    assert_eq!(key["scopes"], json!(["read", "write"]));
    assert_eq!(key["rate_limit_rpm"], 3000);
    assert_eq!(key["is_active"], true);
    assert_eq!(key["expires_at"], Value::Null);
    assert!(key["id"].as_str().is_some_and(|id| id.starts_with("key_")));
    assert!(key["created_at"].as_str().is_some());
    assert!(key.get("last_used_at").is_none(), "the create response has no last_used_at");
}

#[tokio::test]
async fn an_empty_body_without_content_type_creates_a_default_key() {
    let system = api_only().await;
    let response = system.request(Method::POST, "/v1/account/api-keys").send().await.expect("sent");
    assert_eq!(response.status(), 201);
}

#[tokio::test]
async fn limits_on_name_and_expiry_hold_on_both_sides() {
    let system = api_only().await;
    for (body, status) in [
        (json!({"name": "a".repeat(100)}), 201),
        (json!({"name": "a".repeat(101)}), 400),
        (json!({"expires_in_days": 0}), 400),
        (json!({"expires_in_days": 1}), 201),
        (json!({"expires_in_days": 365}), 201),
        (json!({"expires_in_days": 366}), 400),
        (json!({"scopes": ["read", "root"]}), 400),
        (json!({"scopes": []}), 400),
    ] {
        let response = create_key(&system, &system.admin_key, body.clone()).await;
        assert_eq!(response.status(), status, "{body}");
    }
    let key = create_key(&system, &system.admin_key, json!({"expires_in_days": 1})).await.json_body().await;
    let expires: DateTime<Utc> = key["expires_at"].as_str().and_then(|s| s.parse().ok()).expect("expires_at");
    let in_a_day = Utc::now() + chrono::Duration::days(1);
    assert!((expires - in_a_day).num_seconds().abs() < 60, "expires_at is a day from now: {expires}");
}

#[tokio::test]
async fn scopes_are_enforced_with_403_and_a_key_cannot_grant_what_it_lacks() {
    let system = api_only().await;
    let read_write = create_key(&system, &system.admin_key, json!({})).await.json_body().await;
    let rw = read_write["key"].as_str().expect("key");
    let response = system.with_key(Method::GET, "/v1/account/webhooks/secret", rw).send().await.expect("sent");
    assert_eq!(response.status(), 403);
    let body = response.json_body().await;
    assert_eq!(body["code"], "AUTH_INSUFFICIENT_SCOPE");
    assert_eq!(body["title"], "Forbidden");
    assert_eq!(body["type"], system.url("/errors/forbidden"));
    assert_eq!(system.with_key(Method::GET, "/v1/predictions", rw).send().await.expect("sent").status(), 200);

    let read_only = create_key(&system, &system.admin_key, json!({"scopes": ["read"]})).await.json_body().await;
    let ro = read_only["key"].as_str().expect("key");
    let response = system
        .with_key(Method::POST, "/v1/models/demo/echo/predictions", ro)
        .header("content-type", "application/json")
        .body(r#"{"input":{"prompt":"x"}}"#)
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), 403, "read-only keys cannot create predictions");

    let admin_read =
        create_key(&system, &system.admin_key, json!({"scopes": ["admin", "read"]})).await.json_body().await;
    let ar = admin_read["key"].as_str().expect("key");
    let response = create_key(&system, ar, json!({"scopes": ["write"]})).await;
    assert_eq!(response.status(), 400);
    assert_eq!(response.json_body().await["errors"][0]["field"], "scopes");
    assert_eq!(create_key(&system, ar, json!({"scopes": ["read"]})).await.status(), 201);
}

/// Replicate's path of the signing secret is read with any key of the account, as a receiver's
/// setup code reads it with the key that creates its predictions; the account's own path and
/// the rotation keep `admin`.
#[tokio::test]
async fn a_read_write_key_reads_the_secret_at_replicates_path_but_not_the_accounts() {
    let system = api_only().await;
    let read_write = create_key(&system, &system.admin_key, json!({})).await.json_body().await;
    let rw = read_write["key"].as_str().expect("key");
    for path in ["/v1/webhooks/default/secret", "/replicate/v1/webhooks/default/secret"] {
        let response = system.with_key(Method::GET, path, rw).send().await.expect("sent");
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(response.json_body().await["key"], system.secret.expose(), "{path}");
    }
    let write_only = create_key(&system, &system.admin_key, json!({"scopes": ["write"]})).await.json_body().await;
    let wo = write_only["key"].as_str().expect("key");
    let response = system.with_key(Method::GET, "/v1/webhooks/default/secret", wo).send().await.expect("sent");
    assert_eq!(response.status(), 403, "the secret is read with `read`");
    let response = system.with_key(Method::GET, "/v1/account/webhooks/secret", rw).send().await.expect("sent");
    assert_eq!(response.status(), 403, "the account's path keeps admin");
    let rotate = system.with_key(Method::POST, "/v1/account/webhooks/secret/rotate", rw).send().await.expect("sent");
    assert_eq!(rotate.status(), 403, "rotating keeps admin");
}

#[tokio::test]
async fn get_returns_the_key_with_last_used_at_only_to_its_account() {
    let system = api_only().await;
    let created = create_key(&system, &system.admin_key, json!({"name": "ci"})).await.json_body().await;
    let path = format!("/v1/account/api-keys/{}", created["id"].as_str().expect("id"));
    let got = system.get(&path).await.json_body().await;
    assert_eq!(got["key"], created["key"], "the full value is readable by the account's admins");
    assert_eq!(got["name"], "ci");
    assert_eq!(got["last_used_at"], Value::Null);

    let new_key = created["key"].as_str().expect("key");
    assert_eq!(system.with_key(Method::GET, "/v1/predictions", new_key).send().await.expect("sent").status(), 200);
    let used = eventually(Duration::from_secs(5), || async {
        let got = system.get(&path).await.json_body().await;
        got["last_used_at"].as_str().map(str::to_owned)
    })
    .await;
    assert!(used.is_some(), "last_used_at is recorded after a use");

    let other = system.bootstrap_account("other").await;
    assert_eq!(system.with_key(Method::GET, &path, &other).send().await.expect("sent").status(), 404);
    assert_eq!(system.get("/v1/account/api-keys/key_aaaaaaaaaaaaaaaaaaaa").await.status(), 404);
    assert_eq!(system.get("/v1/account/api-keys/nonsense").await.status(), 404);
}
