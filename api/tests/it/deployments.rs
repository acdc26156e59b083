//! Versions, deployments, hardware pools and the account (docs/deployments.md): a prediction runs only
//! on a runner of its version (and of its deployment's pool), the model route runs the newest
//! live version, and deployments are created, used, changed release by release and deleted.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use testkit::eventually;

use crate::harness::{JsonBody, Options, System};

fn no_runner() -> Options {
    Options { runner: false, notifier: false, env: vec![] }
}

/// Waits until `GET /v1/models/demo/versioned` names `version` as its latest.
async fn latest_becomes(system: &System, version: &str) {
    let found = eventually(Duration::from_secs(20), || async {
        let model = system.get("/v1/models/demo/versioned").await.json_body().await;
        (model["latest_version"]["id"] == version).then_some(())
    })
    .await;
    assert!(found.is_some(), "the latest version never became {version}");
}

async fn create(system: &System, path: &str, body: Value) -> Value {
    let response =
        system.request(Method::POST, path).header("prefer", "wait=20").json(&body).send().await.expect("sent");
    assert_eq!(response.status(), StatusCode::CREATED, "{path}");
    response.json_body().await
}

async fn ended(system: &System, p: &Value) -> Value {
    system.wait_for_terminal(p["id"].as_str().expect("id"), Duration::from_secs(30)).await
}

#[tokio::test]
async fn the_account_and_the_hardware_of_live_runners_answer_for_the_key() {
    let system = System::start_with(no_runner()).await;
    let account = system.get("/v1/account").await.json_body().await;
    assert_eq!(
        account,
        json!({"type": "organization", "username": "test-account", "name": "test-account",
               "monthly_budget": null, "spent_this_month": "0.00"})
    );
    assert_eq!(system.get("/replicate/v1/hardware").await.json_body().await, json!([]), "no runner is alive");
    let _cpu = system.start_runner_with(&[("RUNNER_MODELS", "demo/echo")]);
    let _gpu = system.start_runner_with(&[("RUNNER_MODELS", "demo/echo"), ("RUNNER_HARDWARE", "gpu-t4")]);
    let pools = eventually(Duration::from_secs(20), || async {
        let pools = system.get("/v1/hardware").await.json_body().await;
        (pools.as_array().map(Vec::len) == Some(2)).then_some(pools)
    })
    .await
    .expect("both pools listed");
    assert_eq!(
        pools,
        json!([{"name": "cpu", "sku": "cpu", "price_per_second": "0"},
               {"name": "gpu-t4", "sku": "gpu-t4", "price_per_second": "0"}])
    );
}

#[tokio::test]
async fn two_runners_of_two_versions_never_take_each_others_jobs() {
    let system = System::start_with(no_runner()).await;
    let _v1 = system
        .start_runner_with(&[("RUNNER_MODELS", "demo/versioned"), ("RUNNER_MODEL_VERSIONS", "demo/versioned=v1")]);
    latest_becomes(&system, "v1").await;
    let v2 = system
        .start_runner_with(&[("RUNNER_MODELS", "demo/versioned"), ("RUNNER_MODEL_VERSIONS", "demo/versioned=v2")]);
    latest_becomes(&system, "v2").await;
    let mut created = Vec::new();
    for n in 0..20 {
        let version = if n % 2 == 0 { "demo/versioned:v1" } else { "demo/versioned:v2" };
        let body = json!({"version": version, "input": {"seconds": 0.05}});
        let p =
            system.request(Method::POST, "/v1/predictions").json(&body).send().await.expect("sent").json_body().await;
        created.push(p);
    }
    let latest = create(&system, "/v1/models/demo/versioned/predictions", json!({"input": {}})).await;
    assert_eq!(latest["version"], "v2", "the model route runs the newest live version");
    created.push(latest);
    for p in &created {
        let done = ended(&system, p).await;
        let version = done["version"].as_str().expect("version");
        assert_eq!(done["output"], format!("version {version}"), "ran on the version it names: {done}");
    }
    v2.cancel();
    latest_becomes(&system, "v1").await;
    let after = create(&system, "/v1/models/demo/versioned/predictions", json!({"input": {}})).await;
    assert_eq!((after["version"].as_str(), after["output"].as_str()), (Some("v1"), Some("version v1")), "v2 is gone");
    let pinned = create(&system, "/v1/predictions", json!({"version": "demo/versioned:v2", "input": {}})).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let waiting =
        system.get(&format!("/v1/predictions/{}", pinned["id"].as_str().expect("id"))).await.json_body().await;
    assert_eq!(waiting["status"], "starting", "a pinned version no runner serves waits; v1 never takes it");
}

#[tokio::test]
async fn a_deployment_is_created_used_updated_and_deleted_and_runs_only_on_its_pool() {
    let system = System::start_with(no_runner()).await;
    let _cpu = system
        .start_runner_with(&[("RUNNER_MODELS", "demo/versioned"), ("RUNNER_MODEL_VERSIONS", "demo/versioned=v1")]);
    latest_becomes(&system, "v1").await;
    let body = json!({"name": "app", "model": "demo/versioned", "version": "v1", "hardware": "gpu",
                      "min_instances": 0, "max_instances": 2});
    let created = system.request(Method::POST, "/v1/deployments").json(&body).send().await.expect("sent");
    assert_eq!(created.status(), StatusCode::CREATED);
    let created = created.json_body().await;
    assert_eq!(created["owner"], "test-account");
    assert_eq!(created["current_release"]["number"], 1);
    assert_eq!(
        created["current_release"]["configuration"],
        json!({"hardware": "gpu", "min_instances": 0, "max_instances": 2, "priority": "normal"})
    );
    let again = system.request(Method::POST, "/v1/deployments").json(&body).send().await.expect("sent");
    assert_eq!(again.status(), StatusCode::CONFLICT, "a name is unique in its account");

    let p = system
        .request(Method::POST, "/v1/deployments/test-account/app/predictions")
        .json(&json!({"input": {}}))
        .send()
        .await
        .expect("sent")
        .json_body()
        .await;
    assert_eq!((p["deployment"].as_str(), p["version"].as_str()), (Some("test-account/app"), Some("v1")));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let id = p["id"].as_str().expect("id");
    let waiting = system.get(&format!("/v1/predictions/{id}")).await.json_body().await;
    assert_eq!(waiting["status"], "starting", "the cpu runner does not take a job of the gpu pool");
    let _gpu = system.start_runner_with(&[
        ("RUNNER_MODELS", "demo/versioned"),
        ("RUNNER_MODEL_VERSIONS", "demo/versioned=v1"),
        ("RUNNER_HARDWARE", "gpu"),
    ]);
    let done = ended(&system, &p).await;
    assert_eq!((done["status"].as_str(), done["output"].as_str()), (Some("succeeded"), Some("version v1")));

    let updated = system
        .request(Method::PATCH, "/replicate/v1/deployments/test-account/app")
        .json(&json!({"hardware": "cpu", "max_instances": 3}))
        .send()
        .await
        .expect("sent")
        .json_body()
        .await;
    assert_eq!(updated["current_release"]["number"], 2, "every change is a new release");
    assert_eq!(updated["current_release"]["configuration"]["max_instances"], 3);
    // Switched off, as Replicate's reference allows, and on again.
    for (max, number) in [(0, 3), (3, 4)] {
        let switched = system
            .request(Method::PATCH, "/v1/deployments/test-account/app")
            .json(&json!({"max_instances": max}))
            .send()
            .await
            .expect("sent");
        assert_eq!(switched.status(), 200, "max_instances {max}");
        assert_eq!(switched.json_body().await["current_release"]["number"], number);
    }
    let listed = system.get("/v1/deployments").await.json_body().await;
    assert_eq!(listed["results"].as_array().map(Vec::len), Some(1));
    assert_eq!(listed["results"][0]["current_release"]["number"], 4);

    let other = system.bootstrap_account("other-account").await;
    let theirs = system.with_key(Method::GET, "/v1/deployments/test-account/app", &other).send().await.expect("sent");
    assert_eq!(theirs.status(), StatusCode::NOT_FOUND, "another account's deployment does not exist for it");
    let their_run = system
        .with_key(Method::POST, "/v1/deployments/test-account/app/predictions", &other)
        .json(&json!({"input": {}}))
        .send()
        .await
        .expect("sent");
    assert_eq!(their_run.status(), StatusCode::NOT_FOUND);

    let deleted = system.request(Method::DELETE, "/v1/deployments/test-account/app").send().await.expect("sent");
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    assert_eq!(system.get("/v1/deployments/test-account/app").await.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn bad_fields_of_a_deployment_are_400_with_every_field_and_an_unknown_model_or_version_404() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let bad = json!({"name": "App!", "model": "demo/echo", "hardware": "any", "min_instances": 3, "max_instances": 1});
    let refused = system.request(Method::POST, "/v1/deployments").json(&bad).send().await.expect("sent");
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    let fields: Vec<Value> =
        refused.json_body().await["errors"].as_array().expect("errors").iter().map(|e| e["field"].clone()).collect();
    assert_eq!(fields, vec![json!("name"), json!("version"), json!("hardware"), json!("max_instances")]);
    let unknown = json!({"name": "app", "model": "demo/echo", "version": "nope", "hardware": "cpu", "min_instances": 0, "max_instances": 1});
    let refused = system.request(Method::POST, "/v1/deployments").json(&unknown).send().await.expect("sent");
    assert_eq!(refused.status(), StatusCode::NOT_FOUND, "a version that does not exist, as elsewhere");
    assert!(refused.json_body().await["detail"].as_str().is_some_and(|d| d.contains("nope")));
    for root in ["/v1", "/replicate/v1"] {
        let missing = json!({"name": "app", "model": "nobody/nothing", "version": "v1", "hardware": "cpu", "min_instances": 0, "max_instances": 1});
        let refused =
            system.request(Method::POST, &format!("{root}/deployments")).json(&missing).send().await.expect("sent");
        assert_eq!(refused.status(), StatusCode::NOT_FOUND, "{root}: a model that does not exist");
        assert_eq!(refused.headers()["content-type"], "application/problem+json");
    }
    let reader = system
        .request(Method::POST, "/v1/account/api-keys")
        .json(&json!({"scopes": ["read", "write"]}))
        .send()
        .await
        .expect("sent")
        .json_body()
        .await;
    let key = reader["key"].as_str().expect("key");
    let denied = system.with_key(Method::POST, "/v1/deployments", key).json(&unknown).send().await.expect("sent");
    assert_eq!(denied.status(), StatusCode::FORBIDDEN, "managing deployments needs admin");
}

#[tokio::test]
async fn the_metrics_give_each_deployment_its_pending_work_and_the_runners_it_calls_for() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    system.register_models_only().await;
    let version = system.get("/v1/models/demo/echo").await.json_body().await["latest_version"]["id"].clone();
    let body = json!({"name": "scaled", "model": "demo/echo", "version": version, "hardware": "cpu",
                      "min_instances": 0, "max_instances": 3});
    assert_eq!(system.request(Method::POST, "/v1/deployments").json(&body).send().await.expect("sent").status(), 201);
    for _ in 0..5 {
        let created = system
            .request(Method::POST, "/v1/deployments/test-account/scaled/predictions")
            .json(&json!({"input": {"prompt": "x"}}))
            .send()
            .await
            .expect("sent");
        assert_eq!(created.status(), StatusCode::CREATED);
    }
    let text = eventually(Duration::from_secs(15), || async {
        let text = system.http().get(system.url("/metrics")).send().await.ok()?.text().await.ok()?;
        text.contains(r#"deployment_pending_predictions{deployment="test-account/scaled"} 5"#).then_some(text)
    })
    .await
    .expect("five predictions pending, no runner");
    assert!(
        text.contains(r#"deployment_desired_instances{deployment="test-account/scaled"} 2"#),
        "five predictions, four per runner: two runners\n{text}"
    );
}
