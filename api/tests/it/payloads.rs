//! Values too large for a prediction's document (past 64 KiB of JSON) live in the file store:
//! the document holds `null` and names a payload file, and every answer (the create with
//! `Prefer: wait`, `GET`, the list, the stream, the webhook) shows them whole. Payload files
//! are never listed among the account's files, and go with the prediction's data.

use std::time::Duration;

use common::domain::PredictionId;
use reqwest::Method;
use serde_json::{Value, json};
use testkit::eventually;

use receiver::Receiver;

use crate::harness::{JsonBody, Options, System};

const KIB: usize = 1024;

#[tokio::test]
async fn a_large_input_and_output_are_kept_out_of_the_document_and_shown_whole_everywhere() {
    let system = System::start_with(Options::default()).await;
    let receiver = Receiver::start().await;
    let prompt = format!("large {}", "x".repeat(200 * KIB));
    let created = system
        .request(Method::POST, "/v1/models/demo/echo/predictions")
        .header("prefer", "wait=30")
        .json(&json!({"input": {"prompt": prompt}, "webhook": receiver.url(), "webhook_events_filter": ["completed"]}))
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), 201);
    let waited = created.json_body().await;
    assert_eq!(waited["status"], "succeeded", "{}", waited["error"]);
    assert_eq!(waited["input"]["prompt"], prompt, "the wait shows the input whole");
    assert_eq!(waited["output"], prompt, "and the output");
    let id = waited["id"].as_str().expect("id").to_owned();

    // As stored: both values out of the document, each in a payload file of the account.
    let stored = system.ctx.store().await.predictions().get(&PredictionId::parse(&id).expect("id")).await;
    let stored = stored.expect("read").expect("stored");
    assert_eq!((stored.input.clone(), stored.output.clone()), (Value::Null, None), "nothing large in the document");
    let (input_file, output_file) = (stored.spilled.input.clone(), stored.spilled.output.clone());
    let files = system.files().await;
    for file in [input_file.expect("input spilled"), output_file.expect("output spilled")] {
        let record = files.get(&file).await.expect("read").expect("a payload file");
        assert!(record.payload && record.prediction_id.as_ref().map(PredictionId::as_str) == Some(id.as_str()));
        assert_eq!((record.sha256.as_str(), record.md5.as_str()), ("", ""), "written without checksums");
        let shown = system.get(&format!("/v1/files/{file}")).await;
        assert_eq!(shown.status(), 404, "a payload file is not one of the account's files to read");
    }

    let got = system.get(&format!("/v1/predictions/{id}")).await.json_body().await;
    assert_eq!((&got["input"]["prompt"], &got["output"]), (&json!(prompt), &json!(prompt)), "GET shows them whole");
    let replicate = system.get(&format!("/replicate/v1/predictions/{id}")).await.json_body().await;
    assert_eq!(replicate["output"], prompt, "on both surfaces");
    let listed = system.get("/v1/predictions").await.json_body().await;
    assert_eq!(listed["results"][0]["input"]["prompt"], prompt, "the list too");
    let events = crate::streaming::streamed(&system, &id, None).await;
    assert_eq!(crate::streaming::joined(&events, "output"), prompt, "the stream sends the output whole");
    let webhook = eventually(Duration::from_secs(30), || async { receiver.of_event("completed").pop() })
        .await
        .expect("the completed webhook arrives");
    let body: Value = webhook.json();
    assert_eq!((&body["input"]["prompt"], &body["output"]), (&json!(prompt), &json!(prompt)), "the webhook too");

    let account_files = system.get("/v1/files").await.json_body().await;
    assert_eq!(account_files["total_count"], 0, "payload files are not the account's listed files: {account_files}");
}

#[tokio::test]
async fn a_small_input_and_output_stay_in_the_document() {
    let system = System::start_with(Options::default()).await;
    let done = system.run("demo/echo", json!({"prompt": "small"})).await;
    let id = PredictionId::parse(done["id"].as_str().expect("id")).expect("id");
    let stored = system.ctx.store().await.predictions().get(&id).await.expect("read").expect("stored");
    assert_eq!(stored.input["prompt"], "small");
    assert_eq!(stored.output, Some(json!("small")));
    assert!(stored.spilled.is_empty());
}

#[tokio::test]
async fn the_api_shows_the_payloads_it_wrote_or_read_without_reading_the_store_again() {
    let system = System::start_with(Options::default()).await;
    let prompt = format!("large {}", "y".repeat(100 * KIB));
    let created = system
        .request(Method::POST, "/v1/models/demo/echo/predictions")
        .header("prefer", "wait=30")
        .json(&json!({"input": {"prompt": prompt}}))
        .send()
        .await
        .expect("create");
    let waited = created.json_body().await;
    assert_eq!(waited["output"], prompt, "{waited}");
    let id = PredictionId::parse(waited["id"].as_str().expect("id")).expect("id");

    // Both payload files gone from the store: a read of the store would show neither value.
    let stored = system.ctx.store().await.predictions().get(&id).await.expect("read").expect("stored");
    let files = system.files().await;
    for file in [stored.spilled.input.expect("input spilled"), stored.spilled.output.expect("output spilled")] {
        assert!(files.delete(&file).await.expect("deleted"));
    }
    let got = system.get(&format!("/v1/predictions/{id}")).await.json_body().await;
    assert_eq!(
        (&got["input"]["prompt"], &got["output"]),
        (&json!(prompt), &json!(prompt)),
        "the api kept the input it wrote and the output it read for the wait"
    );
}
