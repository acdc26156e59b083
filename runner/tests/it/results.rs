//! The runner's last state change: written without reading the prediction back when nothing
//! changed it since the runner's own last write, and never over a change it did not make.

use std::time::Duration;

use bson::doc;
use common::domain::PredictionStatus;
use serde_json::json;

use crate::fixture::Fixture;

#[tokio::test]
async fn a_result_is_written_only_over_the_change_the_runner_last_made() {
    let fixture = Fixture::new(&[]).await;
    let p = fixture.store_prediction("demo/echo", json!({"prompt": "x"}), Duration::from_secs(60)).await;
    let predictions = fixture.store.predictions();
    let processing = predictions
        .transition(&p.id, PredictionStatus::Processing, doc! {})
        .await
        .expect("write")
        .expect("it was starting");
    let (done, seq) = (PredictionStatus::Succeeded, processing.seq);

    let stale = predictions.transition_at_seq(&p.id, PredictionStatus::Processing, seq - 1, done, doc! {}).await;
    assert!(!stale.expect("write"), "an older sequence does not match");
    assert_eq!(fixture.current(&p.id).await.status, PredictionStatus::Processing);

    let written =
        predictions.transition_at_seq(&p.id, PredictionStatus::Processing, seq, done, doc! {"output": "x"}).await;
    assert!(written.expect("write"));
    let stored = fixture.current(&p.id).await;
    assert_eq!((stored.status, stored.seq, stored.output.as_deref()), (done, seq + 1, Some("x")));

    let again = predictions.transition_at_seq(&p.id, PredictionStatus::Processing, seq + 1, done, doc! {}).await;
    assert!(!again.expect("write"), "a terminal prediction does not change again");
}

#[tokio::test]
async fn the_completed_event_carries_what_was_stored() {
    let fixture = Fixture::new(&[]).await;
    let mut events = fixture.bus.client().subscribe(fixture.bus.subjects().all_events()).await.expect("subscribe");
    fixture.start_runner("demo/echo");
    let p = fixture.create("demo/echo", json!({"prompt": "hi", "repeat": 2})).await;
    let completed = tokio::time::timeout(Duration::from_secs(30), async {
        use futures::StreamExt;
        while let Some(m) = events.next().await {
            let event: serde_json::Value = serde_json::from_slice(&m.payload).expect("json");
            if event["event"] == "completed" && event["prediction_id"] == p.id.as_str() {
                return event;
            }
        }
        panic!("the events ended");
    })
    .await
    .expect("a completed event");
    let stored = fixture.current(&p.id).await;
    assert_eq!(completed["seq"], stored.seq, "the event names the stored change");
    let view = &completed["prediction"];
    assert_eq!(view["status"], "succeeded");
    assert_eq!(view["output"], "hi hi");
    assert_eq!(view["logs"], stored.logs.as_str());
    let stored_completed_at = stored.completed_at.expect("completed").try_to_rfc3339_string().expect("rfc3339");
    assert_eq!(
        view["completed_at"].as_str().map(|t| &t[..19]),
        Some(&stored_completed_at[..19]),
        "the time the runner wrote"
    );
    assert!(view["metrics"]["predict_time"].is_number(), "{view}");
}
