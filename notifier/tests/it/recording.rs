//! Attempt records: stored by the time `record` returns (so before a message is acknowledged),
//! several per write, and a failed write is reported to everyone waiting on it.

use std::time::Duration;

use bson::DateTime;
use common::{
    domain::{Prediction, WebhookEvent},
    store::{
        GroupCommitError, Store,
        commands::Monitoring,
        webhook_attempts::{AttemptOutcome, WebhookAttempt},
    },
};
use futures::future::join_all;
use notifier::recorder::{AttemptRecorder, RecordError};

use crate::fixture::Fixture;

/// A delivered attempt number `attempt` of `p`'s `completed` event.
pub fn attempt_of(p: &Prediction, attempt: u32) -> WebhookAttempt {
    WebhookAttempt {
        prediction_id: p.id.clone(),
        account_id: p.account_id.clone(),
        webhook_id: format!("msg_{}_{attempt}", p.id.as_str()),
        event: WebhookEvent::Completed,
        seq: 1,
        attempt,
        url: "http://127.0.0.1:9/hook".into(),
        status_code: Some(200),
        latency_ms: 1,
        error: None,
        outcome: AttemptOutcome::Delivered,
        at: DateTime::now(),
    }
}

fn inserts(store: &Store) -> u64 {
    store.command_counts().snapshot().get("insert").copied().unwrap_or(0)
}

#[tokio::test]
async fn attempts_finishing_together_are_all_stored_with_one_write() {
    let fixture = Fixture::new(&[]).await;
    let recorder = AttemptRecorder::start(fixture.store.webhook_attempts(), Duration::from_millis(300));
    let p = fixture.prediction("http://127.0.0.1:9/hook", None);
    let before = inserts(&fixture.store);

    let results = join_all((1..=10).map(|n| recorder.record(attempt_of(&p, n)))).await;

    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(inserts(&fixture.store) - before, 1, "one insert for the ten records");
    let stored = fixture.store.webhook_attempts().for_prediction(&p.id).await.expect("read attempts");
    let mut numbers: Vec<u32> = stored.iter().map(|a| a.attempt).collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=10).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_record_is_stored_by_the_time_record_returns() {
    let fixture = Fixture::new(&[]).await;
    let recorder = AttemptRecorder::start(fixture.store.webhook_attempts(), Duration::from_millis(50));
    let p = fixture.prediction("http://127.0.0.1:9/hook", None);
    let record = attempt_of(&p, 1);
    let webhook_id = record.webhook_id.clone();

    recorder.record(record).await.expect("recorded");

    assert_eq!(fixture.store.webhook_attempts().count_for_webhook(&webhook_id).await.expect("count"), 1);
}

#[tokio::test]
async fn a_failed_write_is_reported_to_every_waiting_attempt() {
    let fixture = Fixture::new(&[]).await;
    // Nothing listens on port 1: server selection fails after the store's 5 s timeout.
    let unreachable =
        Store::connect("mongodb://127.0.0.1:1/?directConnection=true", "nowhere", "test", Monitoring::Off)
            .await
            .expect("a lazy client");
    let recorder = AttemptRecorder::start(unreachable.webhook_attempts(), Duration::from_millis(50));
    let p = fixture.prediction("http://127.0.0.1:9/hook", None);

    let results = join_all((1..=3).map(|n| recorder.record(attempt_of(&p, n)))).await;

    assert!(results.iter().all(|r| matches!(r, Err(RecordError(GroupCommitError::Write(_))))), "{results:?}");
}

#[tokio::test]
async fn an_attempt_whose_record_cannot_be_stored_is_not_acked_but_made_again() {
    let fixture = Fixture::new(&[]).await;
    let receiver = receiver::Receiver::always(receiver::Answer::Status(200)).await;
    // A `start` event: a `completed` one with a record already would be taken for a copy.
    let p = fixture.prediction(&receiver.url(), Some(vec![WebhookEvent::Start]));
    let mut published = p.clone();
    published.seq = 1;
    let webhook_id = common::messages::PredictionChanged::of(
        &published,
        WebhookEvent::Start,
        &common::links::Links::new("http://api.test", fixture.master.clone()),
    )
    .message_id();
    // Records of this event are refused: a unique index on (webhook id, attempt) ...
    let attempts = fixture.store.database().collection::<WebhookAttempt>("webhook_attempts");
    let unique = mongodb::IndexModel::builder()
        .keys(bson::doc! { "webhook_id": 1, "attempt": 1 })
        .options(mongodb::options::IndexOptions::builder().unique(true).name("refuse_test".to_owned()).build())
        .build();
    attempts.create_index(unique).await.expect("index");
    // A first delivery is attempt 1, and a record of attempt 1 is there already: each new
    // record of it is refused, as a write to a failing database would be.
    let mut blocker = attempt_of(&p, 1);
    blocker.webhook_id = webhook_id.clone();
    attempts.insert_one(&blocker).await.expect("blocker");

    fixture.start_notifier();
    fixture.publish(&p, WebhookEvent::Start, 1).await;
    let copies = testkit::eventually(Duration::from_secs(15), || async {
        let received = receiver.deliveries();
        (received.len() >= 2).then_some(received)
    })
    .await
    .expect("the event was sent again after its record was refused");
    assert!(copies.iter().all(|r| r.header("webhook-id") == webhook_id), "the same webhook-id each time");
}
