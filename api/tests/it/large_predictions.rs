//! Predictions larger than a NATS message, or with a value kept in the file store: their
//! events name the prediction instead of carrying it (`prediction_changed_ref.v1`), and the
//! notifier, a `Prefer: wait` and a stream read it from MongoDB, so every webhook still arrives
//! whole. Values past 64 KiB live in the
//! file store, so the documents stay small, and every answer shows them whole.

use std::{collections::BTreeMap, time::Duration};

use futures::StreamExt;
use serde_json::{Value, json};
use testkit::eventually;

use receiver::{Delivery, Receiver};

use crate::{
    harness::{JsonBody, Options, System},
    streaming::{joined, streamed},
};

/// The first delivery of each `webhook-id`.
fn distinct_webhooks(deliveries: &[Delivery]) -> BTreeMap<&str, &Delivery> {
    let mut first = BTreeMap::new();
    for delivery in deliveries {
        first.entry(delivery.header("webhook-id")).or_insert(delivery);
    }
    first
}

/// A prompt of `kib` KiB whose text says which prediction it is.
fn prompt(n: usize, kib: usize) -> String {
    let head = format!("prediction {n:04} ");
    format!("{head}{}", "p".repeat(kib * 1024 - head.len()))
}

// The api, the runner and the notifier of a `System` run on the test's runtime: on the default
// one-thread runtime every create of this test waited behind the runner's and the notifier's
// work on 115 MB of JSON (about 0.3 s of CPU a prediction in a debug build), and some got no
// answer within the client's 30 s on a 2-core machine. Two workers let the api answer while
// the others work, as separate processes do.
//
// The values go to the file store (S3Proxy here), not into the documents: each prediction's
// input and output are a payload file (`common::files::payloads`). The creates go as a client
// of a busy service sends them: 32 at a time, and a 503 is sent again after its `Retry-After`
// (every answer comes within the request deadline; what the service cannot take in time it
// refuses; a create answered 503 while its write was under way may still be stored, so each
// create carries an Idempotency-Key and its retry answers the stored prediction).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_and_twenty_eight_predictions_of_900_kb_on_64_slots_succeed_whole_and_each_webhook_arrives() {
    let options =
        Options { env: vec![("RUNNER_CONCURRENCY", "64".into()), ("FILES_STORE", "s3".into())], ..Default::default() };
    let system = System::start_with(options).await;
    let receiver = Receiver::start().await;
    // Readiness is polled throughout, as an orchestrator's probe would: the replica is busy,
    // not unreachable, and must stay in rotation (a 503 would move its load onto the others).
    let probing = tokio_util::sync::CancellationToken::new();
    let probe = tokio::spawn(probe_readiness(system.url("/ready"), probing.clone()));

    let creates = futures::stream::iter(0..128).map(|n| {
        let body = json!({"input": {"prompt": prompt(n, 900)}, "webhook": receiver.url(), "webhook_events_filter": ["completed"]});
        let system = &system;
        async move {
            let started = std::time::Instant::now();
            loop {
                // With an Idempotency-Key, as a client that retries must send: a create answered
                // 503 at its deadline may still be stored, and its retry then answers it.
                let response = system
                    .request(reqwest::Method::POST, "/v1/models/demo/echo/predictions")
                    .header("idempotency-key", format!("large-{n}"))
                    .json(&body)
                    .send()
                    .await
                    .expect("sent");
                let again = matches!(response.status().as_u16(), 503 | 409);
                if again && started.elapsed() < Duration::from_secs(120) {
                    let retry_after = response.headers().get("retry-after").and_then(|v| v.to_str().ok()?.parse().ok());
                    tokio::time::sleep(Duration::from_secs(retry_after.unwrap_or(1))).await;
                    continue;
                }
                assert_eq!(response.status(), 201);
                return response.json_body().await["id"].as_str().expect("an id").to_owned();
            }
        }
    });
    let ids: Vec<String> = creates.buffered(32).collect().await;

    // Delivery is at least once: a busy machine may time an attempt out after the receiver got
    // it, and the retry carries the same `webhook-id`. So count webhooks by that id.
    let arrived = eventually(Duration::from_secs(120), || async {
        let completed = receiver.of_event("completed");
        (distinct_webhooks(&completed).len() >= 128).then_some(completed)
    })
    .await
    .unwrap_or_else(|| panic!("{} of 128 completed webhooks arrived", receiver.of_event("completed").len()));
    let webhooks = distinct_webhooks(&arrived);
    assert_eq!(webhooks.len(), 128, "one webhook each");
    for delivery in &arrived {
        let first = webhooks[delivery.header("webhook-id")];
        assert_eq!(delivery.body, first.body, "a repeat of {} is the same webhook", delivery.header("webhook-id"));
    }
    for delivery in webhooks.into_values() {
        let body: Value = delivery.json();
        let id = body["id"].as_str().expect("an id");
        let n = ids.iter().position(|i| i == id).expect("one of ours");
        assert_eq!(body["status"], "succeeded", "{id}");
        assert_eq!(body["output"].as_str().map(str::len), Some(900 * 1024), "the whole output of {id}");
        assert_eq!(body["output"], body["input"]["prompt"], "echoed whole");
        assert_eq!(body["input"]["prompt"], prompt(n, 900));
    }
    probing.cancel();
    let (probes, unready) = probe.await.expect("the probe ran");
    assert!(probes > 0, "readiness was probed");
    assert!(
        unready.is_empty(),
        "{} of {probes} readiness probes during the load were not 200: {unready:?}",
        unready.len()
    );
}

/// Asks `/ready` every 250 ms until `stop`: how many times, and every answer that was not 200
/// (or no answer within 10 s, a probe's generous timeout), with when it came.
async fn probe_readiness(url: String, stop: tokio_util::sync::CancellationToken) -> (usize, Vec<String>) {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("client");
    let (started, mut probes, mut unready) = (std::time::Instant::now(), 0, Vec::new());
    while !stop.is_cancelled() {
        probes += 1;
        match http.get(&url).send().await {
            Ok(r) if r.status() == 200 => {}
            Ok(r) => unready.push(format!("{} at {:?}", r.status(), started.elapsed())),
            Err(e) => unready.push(format!("{e} at {:?}", started.elapsed())),
        }
        tokio::select! {
            () = stop.cancelled() => {}
            () = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
    }
    (probes, unready)
}

// Two workers, as above: the three services share the test's runtime, and each of them works
// on the 5 MB value in a debug build. The wait is the longest there is, and the client waits
// past it: with the client's 30 s against a 30 s wait, a machine slow enough to use the wait
// whole saw the client give up first, as it raced the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_five_mb_output_reaches_its_webhook_a_wait_and_a_stream_whole() {
    let options = Options { env: vec![("PREDICTION_MAX_OUTPUT_BYTES", "8388608".into())], ..Default::default() };
    let system = System::start_with(options).await;
    let receiver = Receiver::start().await;
    let output_kib = 5 * 1024;

    let response = system
        .request(reqwest::Method::POST, "/v1/models/demo/chatty/predictions")
        .timeout(Duration::from_secs(90))
        .header("prefer", "wait=60")
        .json(&json!({"input": {"log_kib": 2, "output_kib": output_kib}, "webhook": receiver.url()}))
        .send()
        .await
        .expect("create");
    assert_eq!(response.status(), 201);
    let waited = response.json_body().await;
    assert_eq!(waited["status"], "succeeded", "the wait answers the end, read from MongoDB");
    assert_eq!(waited["output"].as_str().map(str::len), Some(output_kib * 1024));
    let id = waited["id"].as_str().expect("an id");

    let completed = eventually(Duration::from_secs(60), || async { receiver.of_event("completed").pop() })
        .await
        .expect("the completed webhook arrives");
    let body = completed.json();
    assert_eq!((body["id"].as_str(), body["status"].as_str()), (Some(id), Some("succeeded")));
    assert_eq!(body["output"], waited["output"], "the webhook carries the whole output");

    // Resuming replays the events stream, whose events name the prediction.
    let events = streamed(&system, id, Some(0)).await;
    assert_eq!(joined(&events, "output").len(), output_kib * 1024, "the stream sends the whole output");
    assert_eq!(events.last().map(|e| e.event.as_str()), Some("done"), "and ends");
}

// A prediction whose prompt is a payload (past 64 KiB): its events name it rather than carry
// the prompt, so the stream reads its output from the store at each event, and each webhook
// the filter lets through is read whole by the notifier before it is signed.
#[tokio::test]
async fn a_stream_and_every_webhook_of_a_prediction_with_a_large_prompt_show_it_whole() {
    let system = System::start().await;
    let receiver = Receiver::start().await;
    let prompt = prompt(0, 80);
    let body = json!({
        "input": {"prompt": prompt, "repeat": 3},
        "webhook": receiver.url(), "webhook_events_filter": ["start", "output", "completed"],
    });
    let created = system
        .request(reqwest::Method::POST, "/v1/models/demo/echo/predictions")
        .json(&body)
        .send()
        .await
        .expect("sent");
    assert_eq!(created.status(), 201);
    let created = created.json_body().await;
    let id = created["id"].as_str().expect("an id");
    assert_eq!(created["input"]["prompt"], prompt, "the create answers the whole input");

    let events = streamed(&system, id, None).await;
    let echoed = [prompt.as_str(); 3].join(" ");
    assert_eq!(joined(&events, "output"), echoed, "the stream sends the whole output");
    assert_eq!(events.last().map(|e| e.event.as_str()), Some("done"), "and ends");

    let completed = eventually(Duration::from_secs(30), || async { receiver.of_event("completed").pop() })
        .await
        .expect("the completed webhook arrives");
    assert_eq!(completed.json()["output"], echoed.as_str(), "the webhook carries the whole output");
    // An earlier event may be dropped for a newer state (superseded); each that arrives is whole.
    for delivery in receiver.deliveries() {
        let body = delivery.json();
        assert_eq!(body["id"], id);
        assert_eq!(
            body["input"]["prompt"],
            prompt,
            "a {} webhook carries the whole input",
            delivery.header("webhook-event")
        );
    }
}
