//! The numbers a Cog model records of its run (`record_metric`, as a token count), kept with
//! the prediction and shown in `metrics` on `/replicate/v1`, beside the service's own timings.

use std::time::Duration;

use serde_json::json;
use testkit::cog::{CogMode, CogServer};

use crate::harness::{JsonBody, Options, System};

#[tokio::test]
async fn a_cog_models_recorded_metrics_are_shown_beside_its_timings_on_replicate_only() {
    let server = CogServer::start_ready("echo", CogMode::Predict).await;
    let system = System::start_with(Options {
        notifier: false,
        env: vec![("RUNNER_COG", format!("acme/echo={}", server.url))],
        ..Options::default()
    })
    .await;
    system.registered_version("acme/echo").await;
    let done = system.run("acme/echo", json!({"prompt": "two words", "repeat": 3})).await;
    let id = done["id"].as_str().expect("an id").to_owned();
    let done = system.wait_for_terminal(&id, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "succeeded", "{done}");

    let replicate = system.get(&format!("/replicate/v1/predictions/{id}")).await.json_body().await;
    let metrics = &replicate["metrics"];
    assert_eq!(metrics["echoed_words"], 6, "what the model recorded: {metrics}");
    assert!(metrics["predict_time"].as_f64().is_some() && metrics["cost"].is_string(), "{metrics}");
    let canonical = &done["metrics"];
    assert!(canonical.get("echoed_words").is_none(), "/v1 keeps the interface's fields: {canonical}");
}
