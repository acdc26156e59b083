//! Retries, durability across a killed notifier, filters and throttling.

use std::{process::Stdio, time::Duration};

use common::{domain::WebhookEvent, messages::Announcement, store::webhook_attempts::AttemptOutcome};
use testkit::eventually;

use receiver::{Answer, Receiver};

use crate::fixture::Fixture;

#[tokio::test]
async fn a_receiver_that_fails_twice_gets_three_attempts_with_one_webhook_id_all_recorded() {
    let fixture = Fixture::new(&[]).await;
    let receiver = Receiver::scripted(vec![Answer::Status(500), Answer::Status(500)]).await;
    fixture.start_notifier();
    let p = fixture.prediction(&receiver.url(), Some(vec![WebhookEvent::Completed]));
    fixture.publish(&p, WebhookEvent::Completed, 3).await;

    let attempts = fixture.attempts_until(&p.id, Duration::from_secs(20), |a| a.len() == 3).await;
    let outcomes: Vec<_> = attempts.iter().map(|a| (a.attempt, a.status_code, a.outcome)).collect();
    assert_eq!(
        outcomes,
        vec![
            (1, Some(500), AttemptOutcome::WillRetry),
            (2, Some(500), AttemptOutcome::WillRetry),
            (3, Some(200), AttemptOutcome::Delivered)
        ]
    );
    let received = receiver.deliveries();
    assert_eq!(received.len(), 3);
    assert!(received.iter().all(|r| r.header("webhook-id") == attempts[0].webhook_id), "one webhook-id");
    assert!(received.iter().all(|r| r.header("webhook-sequence") == "3"));
}

#[tokio::test]
async fn after_the_last_attempt_the_delivery_is_recorded_as_failed() {
    let fixture = Fixture::new(&[("NOTIFIER_RETRY_SCHEDULE", "0.1")]).await;
    let receiver = Receiver::always(Answer::Status(503)).await;
    fixture.start_notifier();
    let p = fixture.prediction(&receiver.url(), None);
    fixture.publish(&p, WebhookEvent::Completed, 1).await;
    let attempts = fixture.attempts_until(&p.id, Duration::from_secs(20), |a| a.len() == 2).await;
    assert_eq!(attempts[1].outcome, AttemptOutcome::Failed);
    let settled =
        eventually(Duration::from_secs(2), || async { (receiver.deliveries().len() > 2).then_some(()) }).await;
    assert!(settled.is_none(), "no attempt after the last one");
}

#[tokio::test]
async fn a_notifier_killed_between_attempts_loses_nothing() {
    let fixture = Fixture::new(&[("NOTIFIER_RETRY_SCHEDULE", "1"), ("NOTIFIER_TIMEOUT_SECONDS", "1")]).await;
    let receiver = Receiver::scripted(vec![Answer::Status(500)]).await;
    let mut doomed = std::process::Command::new(env!("CARGO_BIN_EXE_notifier"))
        .env_clear()
        .envs(&fixture.vars)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start a notifier process");
    let p = fixture.prediction(&receiver.url(), None);
    fixture.publish(&p, WebhookEvent::Completed, 2).await;
    fixture.attempts_until(&p.id, Duration::from_secs(20), |a| a.len() == 1).await;
    doomed.kill().expect("SIGKILL the notifier");
    doomed.wait().expect("reap it");

    fixture.start_notifier();
    let attempts = fixture.attempts_until(&p.id, Duration::from_secs(20), |a| a.len() == 2).await;
    assert_eq!(attempts[1].outcome, AttemptOutcome::Delivered);
    assert_eq!(attempts[1].attempt, 2);
    let received = receiver.deliveries();
    assert_eq!(received.len(), 2);
    assert_eq!(received[0].header("webhook-id"), received[1].header("webhook-id"));
}

#[tokio::test]
async fn the_filter_delivers_exactly_the_listed_events() {
    let fixture = Fixture::new(&[]).await;
    let receiver = Receiver::scripted(vec![]).await;
    fixture.start_notifier();
    let p = fixture.prediction(&receiver.url(), Some(vec![WebhookEvent::Start, WebhookEvent::Completed]));
    fixture.publish(&p, WebhookEvent::Start, 1).await;
    fixture.publish(&p, WebhookEvent::Logs, 2).await;
    fixture.publish(&p, WebhookEvent::Output, 2).await;
    fixture.publish(&p, WebhookEvent::Completed, 3).await;
    fixture
        .attempts_until(&p.id, Duration::from_secs(20), |a| a.iter().any(|x| x.event == WebhookEvent::Completed))
        .await;
    let events: Vec<String> = receiver.deliveries().iter().map(|r| r.header("webhook-event").to_owned()).collect();
    assert_eq!(events, vec!["start", "completed"]);
}

#[tokio::test]
async fn output_is_throttled_the_latest_state_wins_and_completed_comes_last() {
    let fixture = Fixture::new(&[]).await;
    let receiver = Receiver::scripted(vec![]).await;
    fixture.start_notifier();
    let mut p = fixture.prediction(&receiver.url(), None);
    for seq in 1..=8 {
        p.output = Some(format!("step {seq}").into());
        fixture.publish(&p, WebhookEvent::Output, seq).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    p.output = Some("final".into());
    fixture.publish(&p, WebhookEvent::Completed, 9).await;
    fixture
        .attempts_until(&p.id, Duration::from_secs(20), |a| a.iter().any(|x| x.event == WebhookEvent::Completed))
        .await;

    let received = receiver.deliveries();
    assert_eq!(received.last().map(|r| r.header("webhook-event")), Some("completed"));
    let outputs: Vec<_> = received.iter().filter(|r| r.header("webhook-event") == "output").collect();
    assert!(outputs.len() < 8, "superseded output events were dropped: {}", outputs.len());
    for pair in outputs.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(gap >= Duration::from_millis(450), "outputs {gap:?} apart");
    }
    let seqs: Vec<i64> = received.iter().filter_map(|r| r.header("webhook-sequence").parse().ok()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "deliveries in order: {seqs:?}");
}

#[tokio::test]
async fn an_undecodable_event_is_recorded_as_a_dead_letter() {
    let fixture = Fixture::new(&[]).await;
    fixture.start_notifier();
    let subject = format!("{}.bogus", fixture.bus.subjects().all_events().trim_end_matches(".>"));
    fixture
        .bus
        .jetstream()
        .publish(subject, "{\"kind\":\"mystery.v9\"}".into())
        .await
        .expect("publish")
        .await
        .expect("stored");
    let letters = eventually(Duration::from_secs(20), || async {
        let found = fixture.store.dead_letters().of_service("notifier").await.ok()?;
        (!found.is_empty()).then_some(found)
    })
    .await
    .expect("a dead letter");
    assert!(letters[0].error.contains("mystery.v9") || letters[0].error.contains("variant"), "{}", letters[0].error);
}

#[tokio::test]
async fn a_completed_event_republished_after_the_duplicate_window_is_not_delivered_again() {
    let fixture = Fixture::new(&[]).await;
    let receiver = Receiver::always(Answer::Status(200)).await;
    let (stop, first) = fixture.start_stoppable_notifier();
    let p = fixture.prediction(&receiver.url(), Some(vec![WebhookEvent::Completed]));
    fixture.publish(&p, WebhookEvent::Completed, 2).await;
    fixture.attempts_until(&p.id, Duration::from_secs(20), |a| a.len() == 1).await;
    stop.cancel();
    first.await.expect("stopped");

    // The same event again, as a runner republishes it once JetStream's window forgot the first.
    let mut again = p.clone();
    again.seq = 2;
    let links = common::links::Links::new("http://api.test", fixture.master.clone());
    let copy = common::messages::StatusEvent::PredictionChangedV1(common::messages::PredictionChanged::of(
        &again,
        WebhookEvent::Completed,
        &links,
    ));
    let subject = fixture.bus.subjects().events(&p.id);
    let payload = serde_json::to_vec(&copy).expect("json");
    fixture.bus.jetstream().publish(subject, payload.into()).await.expect("publish").await.expect("stored");
    fixture.start_notifier(); // a replica that never saw the first

    let consumer_name = fixture.bus.subjects().notifier_consumer();
    let stream = fixture.bus.jetstream().get_stream(fixture.bus.subjects().events_stream()).await.expect("stream");
    let settled = eventually(Duration::from_secs(20), || {
        let (stream, name) = (stream.clone(), consumer_name.clone());
        async move {
            let mut consumer: async_nats::jetstream::consumer::PullConsumer = stream.get_consumer(&name).await.ok()?;
            let info = consumer.info().await.ok()?;
            (info.num_pending == 0 && info.num_ack_pending == 0).then_some(())
        }
    })
    .await;
    assert!(settled.is_some(), "the copy was taken and settled");
    assert_eq!(receiver.deliveries().len(), 1, "one completed webhook, not two");
}

#[tokio::test]
async fn a_completed_event_announced_by_its_writer_is_sent_without_looking_for_earlier_attempts() {
    let fixture = Fixture::new(&[]).await;
    let receiver = Receiver::always(Answer::Status(200)).await;
    let p = fixture.prediction(&receiver.url(), Some(vec![WebhookEvent::Completed]));
    let mut ended = p.clone();
    ended.seq = 2;
    let links = common::links::Links::new("http://api.test", fixture.master.clone());
    let webhook_id = common::messages::PredictionChanged::of(&ended, WebhookEvent::Completed, &links).message_id();
    // A record of this event exists already: announced again, the event would be taken for a
    // copy and not sent; announced first, no lookup is made, so it is sent.
    let mut earlier = crate::recording::attempt_of(&p, 1);
    earlier.webhook_id = webhook_id.clone();
    fixture.store.webhook_attempts().record(&earlier).await.expect("earlier record");

    fixture.start_notifier();
    fixture.announce(&p, WebhookEvent::Completed, 2, Announcement::First).await;
    let received = eventually(Duration::from_secs(20), || async {
        let received = receiver.deliveries();
        (!received.is_empty()).then_some(received)
    })
    .await
    .expect("the first announcement was delivered");
    assert_eq!(received[0].header("webhook-id"), webhook_id);
}
