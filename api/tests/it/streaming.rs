//! The SSE stream (docs/replicate.md) as Replicate's clients read it: only `output`, `logs`,
//! `error` and `done`, an `id` that grows on every event, `Last-Event-ID` resumption, and
//! `urls.stream` as a capability URL that needs no `Authorization`.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    harness::{JsonBody, Options, System},
    replicate_parity::create_with,
};

/// One Server-Sent Event.
#[derive(Debug, Clone, PartialEq)]
pub struct Sse {
    pub id: Option<u64>,
    pub event: String,
    pub data: String,
}

/// Reads a whole SSE body into its events (comment lines are skipped).
pub async fn sse_events(response: reqwest::Response) -> Vec<Sse> {
    let text = response.text().await.expect("body");
    text.split("\n\n")
        .filter_map(|block| {
            let (mut id, mut event, mut data) = (None, None, Vec::new());
            for line in block.lines() {
                if let Some(e) = line.strip_prefix("event:") {
                    event = Some(e.trim().to_owned());
                } else if let Some(d) = line.strip_prefix("data:") {
                    data.push(d.strip_prefix(' ').unwrap_or(d).to_owned());
                } else if let Some(i) = line.strip_prefix("id:") {
                    id = i.trim().parse().ok();
                }
            }
            Some(Sse { id, event: event?, data: data.join("\n") })
        })
        .collect()
}

/// The data of every `name` event, joined.
pub fn joined(events: &[Sse], name: &str) -> String {
    events.iter().filter(|e| e.event == name).map(|e| e.data.as_str()).collect()
}

/// The whole stream of prediction `id`, read with the system's key (resumed after
/// `last_event_id` when given). The stream of an ended prediction ends by itself; the client's
/// limit covers the whole body, which for a large value on a slow machine may take longer than
/// the 30 s of the system's other requests.
pub async fn streamed(system: &System, id: &str, last_event_id: Option<u64>) -> Vec<Sse> {
    let mut request = system
        .request(Method::GET, &format!("/v1/predictions/{id}/stream"))
        .timeout(std::time::Duration::from_secs(90));
    if let Some(last) = last_event_id {
        request = request.header("last-event-id", last.to_string());
    }
    sse_events(request.send().await.expect("a stream")).await
}

async fn created(system: &System, model: &str, input: Value, headers: &[(&str, &str)]) -> Value {
    create_with(system, model, json!({ "input": input }), headers).await.json_body().await
}

fn stream_url(prediction: &Value) -> String {
    prediction["urls"]["stream"].as_str().expect("stream url").to_owned()
}

#[tokio::test]
async fn the_stream_follows_a_running_prediction_with_growing_ids_and_ends_with_done() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let p = created(&system, "demo/sleep", json!({"seconds": 1.5}), &[]).await;
    let response = system.http().get(stream_url(&p)).send().await.expect("sent");
    assert_eq!(response.status(), 200, "the capability URL needs no Authorization");
    assert!(response.headers()["content-type"].to_str().unwrap_or("").starts_with("text/event-stream"));
    let events = sse_events(response).await;
    assert!(events.iter().all(|e| ["output", "logs", "error", "done"].contains(&e.event.as_str())), "{events:?}");
    let ids: Vec<u64> = events.iter().map(|e| e.id.expect("every event has an id")).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids grow: {ids:?}");
    assert_eq!(joined(&events, "logs"), "slept 1 of 1.5 s\n");
    assert_eq!(joined(&events, "output"), "slept 1.5 s");
    assert_eq!(events.last().map(|e| (e.event.as_str(), e.data.as_str())), Some(("done", "{}")));
}

#[tokio::test]
async fn the_stream_of_a_finished_prediction_replays_it_and_ends() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let done = created(&system, "demo/echo", json!({"prompt": "x y"}), &[("prefer", "wait")]).await;
    let id = done["id"].as_str().expect("id");
    let events = sse_events(system.get(&format!("/v1/predictions/{id}/stream")).await).await;
    let named: Vec<_> = events.iter().map(|e| (e.event.as_str(), e.data.as_str())).collect();
    assert_eq!(named, vec![("output", "x y"), ("done", "{}")]);
    assert!(events.iter().all(|e| e.id.is_some()));
    assert_eq!(system.get("/v1/predictions/aaaaaaaaaaaaaaaaaaaaaaaaaa/stream").await.status(), 404);
}

#[tokio::test]
async fn a_failed_prediction_ends_with_error_then_done_and_a_canceled_one_says_so() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let failed = created(&system, "demo/fail", json!({"message": "boom"}), &[("prefer", "wait")]).await;
    let events = sse_events(system.http().get(stream_url(&failed)).send().await.expect("sent")).await;
    let tail: Vec<_> = events.iter().rev().take(2).rev().map(|e| (e.event.as_str(), e.data.as_str())).collect();
    assert_eq!(tail, vec![("error", r#"{"detail":"boom"}"#), ("done", r#"{"reason":"error"}"#)]);

    let running = created(&system, "demo/sleep", json!({"seconds": 30}), &[]).await;
    let id = running["id"].as_str().expect("id");
    let stream = system.http().get(stream_url(&running)).send();
    let cancel = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        system.request(Method::POST, &format!("/v1/predictions/{id}/cancel")).send().await.expect("sent")
    };
    let (stream, canceled) = tokio::join!(stream, cancel);
    assert_eq!(canceled.status(), 200);
    let events = tokio::time::timeout(Duration::from_secs(20), sse_events(stream.expect("sent"))).await.expect("ends");
    assert_eq!(events.last().map(|e| (e.event.as_str(), e.data.as_str())), Some(("done", r#"{"reason":"canceled"}"#)));
}

#[tokio::test]
async fn last_event_id_resumes_after_that_event() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let p = created(&system, "demo/sleep", json!({"seconds": 2.5}), &[]).await;
    let all = sse_events(system.http().get(stream_url(&p)).send().await.expect("sent")).await;
    assert!(all.len() >= 3, "{all:?}");
    let first = all[0].id.expect("id");
    let rest = system.http().get(stream_url(&p)).header("last-event-id", first.to_string()).send().await.expect("sent");
    assert_eq!(sse_events(rest).await, all[1..].to_vec(), "everything after the given id, with the same ids");
}

#[tokio::test]
async fn a_stream_token_opens_only_its_own_prediction() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let a = created(&system, "demo/echo", json!({"prompt": "a"}), &[("prefer", "wait")]).await;
    let b = created(&system, "demo/echo", json!({"prompt": "b"}), &[("prefer", "wait")]).await;
    let token_of_a = stream_url(&a).split_once("token=").expect("token").1.to_owned();
    let b_id = b["id"].as_str().expect("id");
    let foreign = system.anonymous(Method::GET, &format!("/v1/predictions/{b_id}/stream?token={token_of_a}"));
    let response = foreign.send().await.expect("sent");
    assert_eq!(response.status(), 401, "a token opens only the prediction it was made for");
    assert_eq!(response.json_body().await["code"], "AUTH_INVALID_TOKEN");
    let tampered = format!("{}x", stream_url(&b));
    assert_eq!(system.http().get(tampered).send().await.expect("sent").status(), 401);
    let bare = system.anonymous(Method::GET, &format!("/v1/predictions/{b_id}/stream"));
    assert_eq!(bare.send().await.expect("sent").status(), 401, "without a token the API key is required");
    let replicate = system.http().get(stream_url(&b).replace("/v1/", "/replicate/v1/")).send().await.expect("sent");
    assert_eq!(joined(&sse_events(replicate).await, "output"), "b", "the token opens it on both surfaces");
}
