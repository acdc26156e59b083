//! What a prediction keeps of a model that says too much: MongoDB stores a prediction as one
//! document of at most 16 MiB, so logs keep their tail within `PREDICTION_MAX_LOG_BYTES` and a
//! text output past `PREDICTION_MAX_OUTPUT_BYTES` fails the prediction, instead of a
//! prediction that can no longer be updated and never ends.

use std::time::Duration;

use common::domain::PredictionStatus;
use serde_json::json;

use crate::fixture::Fixture;

#[tokio::test]
async fn a_model_whose_logs_pass_16_mib_ends_with_their_tail_kept() {
    let fixture = Fixture::new(&[]).await;
    fixture.start_runner("demo/chatty");

    let p = fixture.create("demo/chatty", json!({"log_kib": 17 * 1024, "output_kib": 1})).await;

    let done = fixture.wait_until(&p.id, Duration::from_secs(60), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Succeeded, "{:?}", done.error);
    assert!(done.logs.len() <= 1024 * 1024, "the default limit holds: {} bytes", done.logs.len());
    let (first, rest) = done.logs.split_once('\n').expect("lines");
    assert!(first.starts_with("[... ") && first.ends_with(" bytes of earlier logs cut ...]"), "{first}");
    let last = rest.lines().last().expect("a kept line");
    assert!(last.starts_with(&format!("line {:08} ", 17 * 1024 - 1)), "the newest line is kept: {}", &last[..20]);
}

#[tokio::test]
async fn a_text_output_past_its_limit_fails_the_prediction_with_output_too_large() {
    let fixture = Fixture::new(&[]).await;
    fixture.start_runner_with("demo/chatty", &[("PREDICTION_MAX_OUTPUT_BYTES", "65536")]);

    let over = fixture.create("demo/chatty", json!({"log_kib": 1, "output_kib": 65})).await;
    let within = fixture.create("demo/chatty", json!({"log_kib": 1, "output_kib": 64})).await;

    let over = fixture.wait_until(&over.id, Duration::from_secs(30), |p| p.status.is_terminal()).await;
    assert_eq!(over.status, PredictionStatus::Failed);
    assert_eq!(over.error.map(|e| e.code).as_deref(), Some("OUTPUT_TOO_LARGE"));
    let within = fixture.wait_until(&within.id, Duration::from_secs(30), |p| p.status.is_terminal()).await;
    assert_eq!(
        (within.status, within.output.map(|o| o.as_str().map_or(0, str::len))),
        (PredictionStatus::Succeeded, Some(65536))
    );
}
