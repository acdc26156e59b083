//! Deadlines: a prediction running past its time limit fails with `PREDICTION_TIMEOUT`.

use std::time::Duration;

use common::domain::PredictionStatus;
use serde_json::json;

use crate::fixture::Fixture;

#[tokio::test]
async fn a_prediction_past_its_deadline_fails_with_prediction_timeout() {
    let fixture = Fixture::new(&[]).await;
    fixture.start_runner("demo/sleep");
    let p = fixture.store_prediction("demo/sleep", json!({"seconds": 60}), Duration::from_secs(2)).await;
    fixture.publish_job(&p).await;
    let done = fixture.wait_until(&p.id, Duration::from_secs(15), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Failed);
    assert_eq!(done.error.as_ref().map(|e| e.code.as_str()), Some("PREDICTION_TIMEOUT"));
    let total = done.metrics.expect("metrics").total_time;
    assert!((1.9..5.0).contains(&total), "ended at the deadline, not after the model: {total}");
}
