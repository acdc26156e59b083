//! Random JSON bodies never produce a server error, and a refused request writes nothing.

use rand::{Rng, SeedableRng, rngs::StdRng};
use reqwest::Method;
use serde_json::{Map, Value, json};

use crate::harness::{JsonBody, Options, System};

/// A random JSON value of bounded depth, biased towards the fields the API reads.
fn random_value(rng: &mut StdRng, depth: u32) -> Value {
    const KEYS: [&str; 10] = [
        "input",
        "prompt",
        "repeat",
        "webhook",
        "webhook_events_filter",
        "name",
        "scopes",
        "expires_in_days",
        "transition_hours",
        "x",
    ];
    match rng.random_range(0..if depth == 0 { 6 } else { 8 }) {
        0 => Value::Null,
        1 => Value::Bool(rng.random()),
        2 => json!(rng.random_range(-1_000_000i64..1_000_000)),
        3 => json!(rng.random::<f64>() * 1e12 - 5e11),
        4 => Value::String((0..rng.random_range(0..12)).map(|_| rng.random_range(' '..='\u{2fff}')).collect()),
        5 => json!(["start", "completed", "read", "admin", "http://127.0.0.1/h"][rng.random_range(0..5)]),
        6 => Value::Array((0..rng.random_range(0..4)).map(|_| random_value(rng, depth - 1)).collect()),
        _ => {
            let mut map = Map::new();
            for _ in 0..rng.random_range(0..5) {
                map.insert(KEYS[rng.random_range(0..KEYS.len())].into(), random_value(rng, depth - 1));
            }
            Value::Object(map)
        }
    }
}

#[tokio::test]
async fn random_json_bodies_never_cause_a_server_error() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    system.register_models_only().await;
    let seed: u64 = rand::rng().random();
    let mut rng = StdRng::seed_from_u64(seed);
    let paths = [
        "/v1/models/demo/echo/predictions",
        "/v1/models/demo/sleep/predictions",
        "/v1/account/api-keys",
        "/v1/account/webhooks/secret/rotate",
        "/v1/predictions/aaaaaaaaaaaaaaaaaaaaaaaaaa/cancel",
    ];
    for i in 0..400 {
        let path = paths[i % paths.len()];
        let body = random_value(&mut rng, 4);
        let response = system
            .request(Method::POST, path)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("sent");
        let status = response.status().as_u16();
        assert!(status < 500, "seed {seed}: {status} for POST {path} {body}");
        assert!(response.headers().contains_key("x-request-id"), "seed {seed}: no X-Request-Id");
    }
}

#[tokio::test]
async fn a_refused_create_writes_no_prediction() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    system.register_models_only().await;
    for body in [json!({}), json!({"input": {"repeat": 99}}), json!({"input": {"prompt": "x"}, "webhook": "nope"})] {
        assert_eq!(system.post_json("/v1/models/demo/echo/predictions", &body).await.status(), 400);
    }
    let page = system.get("/v1/predictions").await;
    assert!(page.headers().contains_key("x-request-id"), "success responses carry X-Request-Id too");
    assert_eq!(page.json_body().await["total_count"], 0);
}
