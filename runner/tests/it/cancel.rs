//! A prediction canceled through the api while a runner holds it: the model call stops, and
//! the `completed` event goes out even when the api's own publish of it was lost.

use std::time::Duration;

use bson::{DateTime, doc};
use common::{
    domain::{Prediction, PredictionStatus, WebhookEvent},
    messages::{PredictionChanged, StatusEvent},
};
use futures::StreamExt;
use serde_json::json;

use crate::fixture::Fixture;

/// Cancels `p` the way the api does (a conditional update from `processing`), but publishes
/// no event, as if the api's publish had failed.
async fn cancel_without_event(fixture: &Fixture, p: &Prediction) -> Prediction {
    fixture
        .store
        .predictions()
        .transition_from(
            &p.id,
            PredictionStatus::Processing,
            PredictionStatus::Canceled,
            doc! {
                "completed_at": DateTime::now()
            },
        )
        .await
        .expect("update")
        .expect("it was processing")
}

/// The next `completed` event of the subscription, waiting at most `limit`.
pub async fn next_completed(events: &mut async_nats::Subscriber, limit: Duration) -> Option<PredictionChanged> {
    let find = async {
        while let Some(message) = events.next().await {
            if let Ok(StatusEvent::PredictionChangedV1(change)) = serde_json::from_slice(&message.payload)
                && change.event == WebhookEvent::Completed
            {
                return Some(change);
            }
        }
        None
    };
    tokio::time::timeout(limit, find).await.ok().flatten()
}

/// A runner, a 30 s demo/sleep prediction it is running (`input` added), and a subscription to
/// its events.
async fn a_long_prediction_running(input: serde_json::Value) -> (Fixture, Prediction, async_nats::Subscriber) {
    let fixture = Fixture::new(&[]).await;
    fixture.start_runner("demo/sleep");
    let mut full = json!({"seconds": 30});
    full.as_object_mut().expect("object").extend(input.as_object().cloned().unwrap_or_default());
    let p = fixture.create("demo/sleep", full).await;
    fixture.wait_until(&p.id, Duration::from_secs(30), |p| p.status == PredictionStatus::Processing).await;
    let events = fixture.bus.client().subscribe(fixture.bus.subjects().events(&p.id)).await.expect("subscribe");
    (fixture, p, events)
}

#[tokio::test]
async fn a_running_prediction_canceled_by_broadcast_gets_its_completed_event_from_the_runner() {
    let (fixture, p, mut events) = a_long_prediction_running(json!({})).await;

    let canceled = cancel_without_event(&fixture, &p).await;
    fixture.bus.publish_cancel(&p.id).await.expect("broadcast");

    let completed = next_completed(&mut events, Duration::from_secs(10)).await.expect("a completed event");
    assert_eq!(completed.prediction.map(|p| p.status), Some(PredictionStatus::Canceled.into()));
    assert_eq!(completed.seq, canceled.seq, "the same change the api would have announced");
}

#[tokio::test]
async fn a_cancel_noticed_by_the_status_check_also_gets_its_completed_event() {
    let (fixture, p, mut events) = a_long_prediction_running(json!({})).await;

    // No broadcast: the runner's next flush or status check finds it canceled.
    let canceled = cancel_without_event(&fixture, &p).await;

    let completed = next_completed(&mut events, Duration::from_secs(15)).await.expect("a completed event");
    assert_eq!(completed.prediction.map(|p| p.status), Some(PredictionStatus::Canceled.into()));
    assert_eq!(completed.seq, canceled.seq);
}

#[tokio::test]
async fn a_silent_model_whose_cancel_broadcast_was_lost_stops_at_its_next_status_checks() {
    let (fixture, p, mut events) = a_long_prediction_running(json!({"quiet": true})).await;

    // No broadcast and no logs to flush: only the status check can find it canceled.
    let started = tokio::time::Instant::now();
    cancel_without_event(&fixture, &p).await;

    let completed = next_completed(&mut events, Duration::from_secs(10)).await.expect("a completed event");
    assert_eq!(completed.prediction.map(|p| p.status), Some(PredictionStatus::Canceled.into()));
    // Found by a status check (every 2 s), not by the prediction's own end 30 s on; three
    // checks' time leaves a slow machine room.
    let checks = runner::execute::STATUS_CHECK_INTERVAL * 3;
    assert!(started.elapsed() < checks, "noticed after {:?}", started.elapsed());
    assert_eq!(fixture.current(&p.id).await.logs, "", "the model stayed silent");
}

#[tokio::test]
async fn a_starting_prediction_canceled_without_its_event_gets_it_from_the_runner_that_takes_its_job() {
    let fixture = Fixture::new(&[]).await;
    let p = fixture.create("demo/sleep", json!({"seconds": 30})).await;
    let mut events = fixture.bus.client().subscribe(fixture.bus.subjects().events(&p.id)).await.expect("subscribe");
    // The api's cancel of a `starting` prediction, its publish of the event lost.
    let canceled = fixture
        .store
        .predictions()
        .transition_from(
            &p.id,
            PredictionStatus::Starting,
            PredictionStatus::Canceled,
            doc! { "completed_at": DateTime::now() },
        )
        .await
        .expect("update")
        .expect("it was starting");

    fixture.start_runner("demo/sleep");
    let completed = next_completed(&mut events, Duration::from_secs(15)).await.expect("a completed event");
    assert_eq!(completed.prediction.map(|p| p.status), Some(PredictionStatus::Canceled.into()));
    assert_eq!(completed.seq, canceled.seq);
    assert_eq!(fixture.current(&p.id).await.started_at, None, "the model never ran");
}
