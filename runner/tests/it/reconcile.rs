//! The reconciler: lost jobs are republished, overdue predictions are failed.

use std::time::Duration;

use bson::{DateTime, doc};
use common::domain::PredictionStatus;
use serde_json::json;

use crate::fixture::Fixture;

#[tokio::test]
async fn a_starting_prediction_whose_job_never_reached_the_stream_is_republished_and_run() {
    let fixture = Fixture::new(&[]).await;
    let p = fixture.store_prediction("demo/echo", json!({"prompt": "found"}), Duration::from_secs(1800)).await;
    // As if the api stored it 40 s ago and its publish failed.
    let long_ago = DateTime::from_millis(DateTime::now().timestamp_millis() - 40_000);
    let coll = fixture.store.database().collection::<bson::Document>("predictions");
    coll.update_one(doc! {"_id": p.id.as_str()}, doc! {"$set": {"created_at": long_ago}}).await.expect("update");

    fixture.start_runner("demo/echo");
    let done = fixture.wait_until(&p.id, Duration::from_secs(20), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Succeeded);
    assert_eq!(done.output.as_ref().and_then(serde_json::Value::as_str), Some("found"));
}

#[tokio::test]
async fn a_processing_prediction_whose_runner_is_gone_fails_at_its_deadline() {
    let fixture = Fixture::new(&[]).await;
    let p = fixture.store_prediction("demo/sleep", json!({"seconds": 1}), Duration::from_secs(1)).await;
    // Taken by a runner that died, its job given up by JetStream: nothing will run it again.
    let coll = fixture.store.database().collection::<bson::Document>("predictions");
    coll.update_one(
        doc! {"_id": p.id.as_str()},
        doc! {"$set": {"status": "processing", "started_at": DateTime::now()}},
    )
    .await
    .expect("update");

    fixture.start_runner("demo/echo");
    let done = fixture.wait_until(&p.id, Duration::from_secs(20), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Failed);
    assert_eq!(done.error.as_ref().map(|e| e.code.as_str()), Some("PREDICTION_TIMEOUT"));
    assert!(done.completed_at.is_some() && done.metrics.is_some());
}

#[tokio::test]
async fn a_processing_prediction_whose_job_and_runner_are_gone_gets_one_new_job_and_runs() {
    let fixture = Fixture::new(&[]).await;
    let p = fixture.store_prediction("demo/echo", json!({"prompt": "again"}), Duration::from_secs(1800)).await;
    // Started 40 s ago by a runner that is gone, its job no longer in the stream: a job
    // acknowledged before its result was stored, or a database restored older than its streams.
    let long_ago = DateTime::from_millis(DateTime::now().timestamp_millis() - 40_000);
    let coll = fixture.store.database().collection::<bson::Document>("predictions");
    let stranded = doc! {"status": "processing", "created_at": long_ago, "started_at": long_ago, "held_by": "runner-gone", "job_seq": 7_i64};
    coll.update_one(doc! {"_id": p.id.as_str()}, doc! {"$set": stranded.clone()}).await.expect("update");

    fixture.start_runner("demo/echo");
    let done = fixture.wait_until(&p.id, Duration::from_secs(20), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Succeeded, "{:?}", done.error);
    assert_eq!(done.output.as_ref().and_then(serde_json::Value::as_str), Some("again"));
    let stored = coll.find_one(doc! {"_id": p.id.as_str()}).await.expect("read").expect("stored");
    assert!(stored.get_datetime("requeued_at").is_ok(), "marked as given its new job");

    // Once only: stranded again after that, it is left to its deadline (a model that takes
    // its runner down runs at most once more).
    let again = fixture.store_prediction("demo/echo", json!({"prompt": "twice"}), Duration::from_secs(3)).await;
    let mut twice = stranded;
    twice.insert("requeued_at", long_ago);
    coll.update_one(doc! {"_id": again.id.as_str()}, doc! {"$set": twice}).await.expect("update");
    let ended = fixture.wait_until(&again.id, Duration::from_secs(30), |p| p.status.is_terminal()).await;
    assert_eq!(ended.error.as_ref().map(|e| e.code.as_str()), Some("PREDICTION_TIMEOUT"), "{:?}", ended.status);
}

#[tokio::test]
async fn a_processing_prediction_whose_runner_is_gone_is_canceled_at_its_clients_deadline() {
    let fixture = Fixture::new(&[]).await;
    let p = fixture.store_prediction("demo/sleep", json!({"seconds": 1}), Duration::from_secs(1)).await;
    // Its deadline was the client's (Cancel-After), and its runner died while it ran.
    let coll = fixture.store.database().collection::<bson::Document>("predictions");
    coll.update_one(
        doc! {"_id": p.id.as_str()},
        doc! {"$set": {"status": "processing", "started_at": DateTime::now(), "deadline_asked": true}},
    )
    .await
    .expect("update");

    fixture.start_runner("demo/echo");
    let done = fixture.wait_until(&p.id, Duration::from_secs(20), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Canceled, "{:?}", done.error);
    assert_eq!(done.error.as_ref().map(|e| e.code.as_str()), Some("PREDICTION_DEADLINE_REACHED"));
    assert!(done.metrics.is_some_and(|m| m.predict_time > 0.0), "charged for the time it ran");
}

#[tokio::test]
async fn a_canceled_prediction_whose_completed_event_was_lost_gets_it_published() {
    let fixture = Fixture::new(&[]).await;
    let p = fixture.store_prediction("demo/echo", json!({"prompt": "x"}), Duration::from_secs(1800)).await;
    // As if the api canceled it a minute ago and then failed to publish its event, and its
    // job never reached the stream: nothing else would ever announce it.
    let a_minute_ago = DateTime::from_millis(DateTime::now().timestamp_millis() - 60_000);
    let coll = fixture.store.database().collection::<bson::Document>("predictions");
    coll.update_one(
        doc! {"_id": p.id.as_str()},
        doc! {"$set": {"status": "canceled", "completed_at": a_minute_ago, "created_at": a_minute_ago}},
    )
    .await
    .expect("update");
    let canceled = fixture.current(&p.id).await;
    assert!(!fixture.bus.completed_event_exists(&canceled).await.expect("readable"));

    fixture.start_runner_with("demo/echo", &[("RUNNER_RECONCILE_SECONDS", "0.2")]);
    let announced = testkit::eventually(Duration::from_secs(20), || async {
        fixture.bus.completed_event_exists(&canceled).await.ok().filter(|found| *found)
    })
    .await;
    assert_eq!(announced, Some(true), "the reconciler published the completed event");
}

#[tokio::test]
async fn an_orphan_behind_a_backlog_of_waiting_predictions_is_found() {
    let fixture = Fixture::new(&[]).await;
    let coll = fixture.store.database().collection::<bson::Document>("predictions");
    let at = |seconds_ago: i64| DateTime::from_millis(DateTime::now().timestamp_millis() - seconds_ago * 1000);
    // 120 predictions of a model no runner here serves, waiting with their jobs in the stream:
    // older than the orphan, so a reconciler that reads the oldest 100 each pass never reaches it.
    for n in 0..120 {
        let p = fixture.store_prediction("demo/sleep", json!({"seconds": 1}), Duration::from_secs(1800)).await;
        fixture.publish_job(&p).await;
        coll.update_one(doc! {"_id": p.id.as_str()}, doc! {"$set": {"created_at": at(200 - n)}}).await.expect("update");
    }
    let orphan = fixture.store_prediction("demo/echo", json!({"prompt": "found"}), Duration::from_secs(1800)).await;
    coll.update_one(doc! {"_id": orphan.id.as_str()}, doc! {"$set": {"created_at": at(40)}}).await.expect("update");

    fixture.start_runner("demo/echo");

    let done = fixture.wait_until(&orphan.id, Duration::from_secs(20), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Succeeded);
}
