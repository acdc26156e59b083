//! `priority` on a create: shown on the prediction (`normal` by default), refused when bad or
//! above the account's `max_priority` (400 at `priority`), allowed once the operator raises it.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use testkit::eventually;

use crate::harness::{JsonBody, Options, System};

async fn create(system: &System, root: &str, body: Value) -> reqwest::Response {
    system
        .request(Method::POST, &format!("{root}/models/demo/echo/predictions"))
        .json(&body)
        .send()
        .await
        .expect("sent")
}

#[tokio::test]
async fn a_predictions_priority_is_shown_defaults_to_normal_and_is_limited_by_its_account() {
    let system = System::start_with(Options { runner: false, notifier: false, ..Options::default() }).await;
    system.register_models_only().await;
    let plain = create(&system, "/v1", json!({"input": {"prompt": "a"}})).await;
    assert_eq!(plain.status(), 201);
    let plain = plain.json_body().await;
    assert_eq!(plain["priority"], "normal");
    let low = create(&system, "/v1", json!({"input": {"prompt": "a"}, "priority": "low"})).await.json_body().await;
    assert_eq!(low["priority"], "low");
    let got = system.get(&format!("/v1/predictions/{}", low["id"].as_str().expect("id"))).await.json_body().await;
    assert_eq!(got["priority"], "low", "stored");

    for bad in [json!("urgent"), json!(1), json!(["high"])] {
        let refused = create(&system, "/v1", json!({"input": {"prompt": "a"}, "priority": bad})).await;
        assert_eq!(refused.status(), 400, "{bad}");
        assert_eq!(refused.json_body().await["errors"][0]["field"], "priority");
    }
    // Above the account's limit (normal by default), on both surfaces.
    for root in ["/v1", "/replicate/v1"] {
        let above = create(&system, root, json!({"input": {"prompt": "a"}, "priority": "high"})).await;
        assert_eq!(above.status(), 400, "{root}");
        let body = above.json_body().await;
        assert_eq!(body["errors"][0]["field"], "priority", "{body}");
        assert!(body["errors"][0]["message"].as_str().expect("message").contains("normal"), "{body}");
    }

    let env = common::config::Env::from_fn(|k| system.vars.get(k).cloned());
    let config = api::config::ApiConfig::from_env(&env).expect("configuration");
    let account =
        api::admin::set_max_priority(&config, "test-account", common::domain::Priority::High).await.expect("set");
    assert_eq!(account.max_priority, Some(common::domain::Priority::High));
    assert!(api::admin::set_max_priority(&config, "nobody", common::domain::Priority::High).await.is_err());
    // Applied within the limits' cache time.
    let high = eventually(Duration::from_secs(10), || async {
        let response = create(&system, "/v1", json!({"input": {"prompt": "a"}, "priority": "high"})).await;
        (response.status() == 201).then_some(())
    })
    .await;
    assert!(high.is_some(), "high is allowed once the operator raised the limit");
}

#[tokio::test]
async fn a_deployments_priority_is_the_default_of_its_predictions_and_within_the_accounts_limit() {
    let system = System::start_with(Options { runner: false, notifier: false, ..Options::default() }).await;
    system.register_models_only().await;
    let version = system.get("/v1/models/demo/echo").await.json_body().await["latest_version"]["id"].clone();
    let body = |name: &str, priority: &str| {
        json!({"name": name, "model": "demo/echo", "version": version, "hardware": "cpu",
               "min_instances": 0, "max_instances": 1, "priority": priority})
    };
    let created =
        system.request(Method::POST, "/v1/deployments").json(&body("batch", "low")).send().await.expect("sent");
    assert_eq!(created.status(), 201);
    assert_eq!(created.json_body().await["current_release"]["configuration"]["priority"], "low");
    let predict = |input: Value| {
        system.request(Method::POST, "/v1/deployments/test-account/batch/predictions").json(&input).send()
    };
    let by_default = predict(json!({"input": {"prompt": "x"}})).await.expect("sent").json_body().await;
    assert_eq!(by_default["priority"], "low", "the deployment's default");
    let asked = predict(json!({"input": {"prompt": "x"}, "priority": "normal"})).await.expect("sent").json_body().await;
    assert_eq!(asked["priority"], "normal", "what the create asks for wins");

    let above =
        system.request(Method::POST, "/v1/deployments").json(&body("urgent", "high")).send().await.expect("sent");
    assert_eq!(above.status(), 400);
    assert_eq!(above.json_body().await["errors"][0]["field"], "priority");
    let change = system
        .request(Method::PATCH, "/v1/deployments/test-account/batch")
        .json(&json!({"priority": "high"}))
        .send()
        .await
        .expect("sent");
    assert_eq!(change.status(), 400, "a change above the limit");
    let change = system
        .request(Method::PATCH, "/v1/deployments/test-account/batch")
        .json(&json!({"priority": "normal"}))
        .send()
        .await
        .expect("sent");
    assert_eq!(change.status(), 200);
    assert_eq!(change.json_body().await["current_release"]["configuration"]["priority"], "normal");
}

/// Lets the test account ask for `high`.
async fn allow_high(system: &System) {
    let env = common::config::Env::from_fn(|k| system.vars.get(k).cloned());
    let config = api::config::ApiConfig::from_env(&env).expect("configuration");
    api::admin::set_max_priority(&config, "test-account", common::domain::Priority::High).await.expect("set");
}

/// Creates a `demo/sleep` prediction of `seconds` at `priority` (once the limits' cache lets
/// it); its id.
async fn sleep_at(system: &System, priority: &str, seconds: f64) -> String {
    let body = json!({"input": {"seconds": seconds}, "priority": priority});
    let created = eventually(Duration::from_secs(10), || async {
        let response =
            system.request(Method::POST, "/v1/models/demo/sleep/predictions").json(&body).send().await.ok()?;
        (response.status() == 201).then_some(response.json_body().await)
    })
    .await
    .expect("created within the limits' cache time");
    created["id"].as_str().expect("id").to_owned()
}

/// A waiting prediction's `queue.position` counts every job waiting at a higher level, then
/// its own lane and the turns of its level's other lanes; lower levels go after it.
#[tokio::test]
async fn a_queue_position_counts_the_higher_levels_first() {
    let system = System::start_with(Options { runner: false, notifier: false, ..Options::default() }).await;
    system.register_models_only().await;
    allow_high(&system).await;
    let sleep = |priority: &'static str| sleep_at(&system, priority, 0.2);
    let mut normal = Vec::new();
    for _ in 0..3 {
        normal.push(sleep("normal").await);
    }
    let low = [sleep("low").await, sleep("low").await];
    let high = [sleep("high").await, sleep("high").await];
    tokio::time::sleep(api::state::queue_places::MODEL_QUEUE_TTL).await; // the model's lanes are read again
    let position = |id: String| {
        let system = &system;
        async move { system.get(&format!("/v1/predictions/{id}")).await.json_body().await["queue"]["position"].clone() }
    };
    assert_eq!(position(high[0].clone()).await, 1, "high before everything created earlier");
    assert_eq!(position(high[1].clone()).await, 2);
    assert_eq!(position(normal[0].clone()).await, 3, "behind the two high ones");
    assert_eq!(position(normal[2].clone()).await, 5);
    assert_eq!(position(low[0].clone()).await, 6, "behind every high and normal one");
    assert_eq!(position(low[1].clone()).await, 7);

    system.start_runner();
    for id in high.iter().chain(&normal).chain(&low) {
        assert_eq!(system.wait_for_terminal(id, Duration::from_secs(60)).await["status"], "succeeded");
    }
}

/// The check through the api: 24 normal one-second predictions queued on a 4-slot
/// runner; 4 high ones created after them start within about one run time, and 2 low ones
/// (created before the high ones) start after every normal one.
#[tokio::test]
async fn through_the_api_high_goes_first_and_low_after_every_normal_one() {
    let system = System::start_with(Options { runner: false, notifier: false, ..Options::default() }).await;
    system.register_models_only().await;
    allow_high(&system).await;
    system.start_runner_with(&[("RUNNER_MODELS", "demo/sleep"), ("RUNNER_CONCURRENCY", "4")]);
    // Its lanes' doorbells are up once a probe ran through it (a fixed sleep only hoped so).
    let probe = system.run("demo/sleep", json!({"seconds": 0})).await;
    assert_eq!(probe["status"], "succeeded", "the probe ran: {probe}");
    let create = |priority: &'static str| sleep_at(&system, priority, 1.0);
    let mut normal = Vec::new();
    for _ in 0..24 {
        normal.push(create("normal").await);
    }
    let low = [create("low").await, create("low").await];
    let mut high = Vec::new();
    for _ in 0..4 {
        high.push(create("high").await);
    }
    let mut ended = std::collections::HashMap::new();
    for id in high.iter().chain(&normal).chain(&low) {
        let p = system.wait_for_terminal(id, Duration::from_secs(90)).await;
        assert_eq!(p["status"], "succeeded", "{p}");
        ended.insert(id.clone(), p);
    }
    let time = |id: &str, field: &str| {
        ended[id][field].as_str().and_then(|t| t.parse::<chrono::DateTime<chrono::Utc>>().ok()).expect("a time")
    };
    let delays: Vec<i64> =
        high.iter().map(|id| (time(id, "started_at") - time(id, "created_at")).num_milliseconds()).collect();
    assert!(delays.iter().all(|d| *d < 1_800), "high ones start within about one run time: {delays:?} ms");
    let last_normal = normal.iter().map(|id| time(id, "started_at")).max().expect("24");
    for id in &low {
        assert!(time(id, "started_at") >= last_normal, "a low one started before a waiting normal one");
    }
}
