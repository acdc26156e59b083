//! Past `API_MAX_IN_FLIGHT` requests at once the api answers at once, 503 problem+json with
//! `Retry-After`, and serves again as soon as a slot is free; health, readiness and metrics
//! are never shed, and a held `Prefer: wait` create gives its slot back while it waits.

use std::time::Duration;

use futures::StreamExt;
use reqwest::{Method, multipart};
use serde_json::json;
use tokio::sync::mpsc;

use crate::harness::{JsonBody, Options, System};

/// An upload whose body comes from `chunks`: it holds its request in flight until they end.
fn held_upload(system: &System) -> (mpsc::Sender<bytes::Bytes>, tokio::task::JoinHandle<u16>) {
    let (send, receive) = mpsc::channel::<bytes::Bytes>(4);
    let chunks = futures::stream::unfold(receive, |mut r| async move { r.recv().await.map(|b| (b, r)) });
    let body = reqwest::Body::wrap_stream(chunks.map(Ok::<_, std::io::Error>));
    let part = multipart::Part::stream(body).file_name("slow.bin").mime_str("application/octet-stream").expect("mime");
    let request = system.request(Method::POST, "/v1/files").multipart(multipart::Form::new().part("content", part));
    (send, tokio::spawn(async move { request.send().await.map(|r| r.status().as_u16()).unwrap_or(0) }))
}

#[tokio::test]
async fn past_its_bound_the_api_answers_503_at_once_and_serves_again_when_a_slot_frees() {
    let env = vec![("API_MAX_IN_FLIGHT", "2".to_owned())];
    let system = System::start_with(Options { env, runner: false, ..Default::default() }).await;
    let uploads: Vec<_> = (0..2).map(|_| held_upload(&system)).collect();
    for (send, _) in &uploads {
        send.send(bytes::Bytes::from_static(b"first bytes")).await.expect("the upload reads");
    }
    // Both uploads are in flight once the api says so (`/metrics` is never shed).
    system.await_metrics(&[("api_requests_in_flight", 2.0)]).await;

    let started = std::time::Instant::now();
    let shed = system.get("/v1/predictions").await;
    assert_eq!(shed.status(), 503);
    // Not held for a slot: the two uploads hold theirs until the test ends, so a request queued
    // behind them would not be answered at all. (The bound is about that, not about speed.)
    assert!(started.elapsed() < Duration::from_secs(10), "answered at once, not queued");
    assert_eq!(shed.headers()["retry-after"], "1");
    assert_eq!(shed.headers()["content-type"], "application/problem+json");
    let problem = shed.json_body().await;
    assert_eq!(
        (problem["status"].as_u64(), problem["code"].as_str()),
        (Some(503), Some("SERVICE_UNAVAILABLE")),
        "{problem}"
    );
    for path in ["/health", "/ready", "/metrics"] {
        assert_eq!(system.get(path).await.status(), 200, "{path} is never shed");
    }

    for (send, upload) in uploads {
        drop(send);
        assert_eq!(upload.await.expect("upload"), 201, "a held request finishes normally");
    }
    assert_eq!(system.get("/v1/predictions").await.status(), 200, "served again");
}

#[tokio::test]
async fn a_held_wait_gives_its_slot_back_while_it_waits() {
    let env = vec![("API_MAX_IN_FLIGHT", "1".to_owned())];
    let system = System::start_with(Options { env, ..Default::default() }).await;
    let waiting = {
        let request = system
            .request(Method::POST, "/v1/models/demo/sleep/predictions")
            .header("prefer", "wait=10")
            .json(&json!({"input": {"seconds": 2}}));
        tokio::spawn(async move { request.send().await.expect("create").json::<serde_json::Value>().await })
    };
    // Once the create is held and has given its slot back (the api's gauges say so: the wait
    // is taken before the prediction is stored, the slot given back after), a read is served.
    system.await_metrics(&[("api_prefer_wait_held", 1.0), ("api_requests_in_flight", 0.0)]).await;
    assert_eq!(system.get("/v1/predictions").await.status(), 200, "the one slot is free while the create waits");
    assert!(!waiting.is_finished(), "the create was still waiting");
    let done = waiting.await.expect("joined").expect("json");
    assert_eq!(done["status"], "succeeded");
}
