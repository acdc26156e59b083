//! One receiver cannot hold up another; private addresses are refused unless allowed.

use std::time::Duration;

use common::{domain::WebhookEvent, store::webhook_attempts::AttemptOutcome};
use testkit::eventually;

use receiver::{Answer, Receiver};

use crate::fixture::Fixture;

#[tokio::test]
async fn a_hanging_receiver_does_not_delay_deliveries_to_another() {
    let fixture = Fixture::new(&[
        ("NOTIFIER_CONCURRENCY", "4"),
        ("NOTIFIER_PER_TARGET", "2"),
        ("NOTIFIER_TIMEOUT_SECONDS", "10"),
    ])
    .await;
    let hanging = Receiver::always(Answer::Hang(Duration::from_secs(30))).await;
    let healthy = Receiver::scripted(vec![]).await;
    fixture.start_notifier();
    for _ in 0..10 {
        let p = fixture.prediction(&hanging.url(), None);
        fixture.publish(&p, WebhookEvent::Completed, 1).await;
    }
    let started = tokio::time::Instant::now();
    let p = fixture.prediction(&healthy.url(), None);
    fixture.publish(&p, WebhookEvent::Completed, 1).await;
    let arrived =
        eventually(Duration::from_secs(5), || async { (!healthy.deliveries().is_empty()).then_some(()) }).await;
    assert!(arrived.is_some(), "the healthy receiver got its webhook within 5 s despite 10 hanging deliveries");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(hanging.deliveries().len() <= 2, "at most 2 deliveries at once to one target");
}

#[tokio::test]
async fn private_targets_are_refused_unless_allowed() {
    let fixture = Fixture::new(&[("NOTIFIER_ALLOW_PRIVATE_TARGETS", "false")]).await;
    let receiver = Receiver::scripted(vec![]).await;
    fixture.start_notifier();
    let literal = fixture.prediction(&receiver.url(), None);
    let by_name = fixture.prediction(&format!("http://localhost:{}/hook", receiver.port()), None);
    fixture.publish(&literal, WebhookEvent::Completed, 1).await;
    fixture.publish(&by_name, WebhookEvent::Completed, 1).await;
    for p in [&literal, &by_name] {
        let attempts = fixture.attempts_until(&p.id, Duration::from_secs(20), |a| !a.is_empty()).await;
        assert_eq!(attempts.len(), 1);
        assert_eq!(attempts[0].outcome, AttemptOutcome::Refused, "{:?}", attempts[0].error);
    }
    assert!(receiver.deliveries().is_empty(), "nothing reached the private address");
}

/// Isolation (docs/webhooks.md): 1,500 events wait for retries at a receiver that answers 503 to
/// everything (more than JetStream's default window of 1,000 unacknowledged messages, which
/// held every retry until the backlog moved to MongoDB); another account's 50 webhooks
/// each arrive within 5 s of their event, and the dead receiver's retries still come on the
/// schedule, never sooner.
#[tokio::test]
async fn a_dead_receivers_retries_do_not_hold_back_another_accounts_webhooks() {
    const DEAD_EVENTS: usize = 1_500;
    let fixture = Fixture::new(&[("NOTIFIER_RETRY_SCHEDULE", "3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3,3")]).await;
    let dead = Receiver::always(Answer::Status(503)).await;
    let healthy = Receiver::scripted(vec![]).await;
    let other = fixture.another_account("other").await;
    fixture.start_notifier();
    for _ in 0..DEAD_EVENTS {
        let p = fixture.prediction(&dead.url(), None);
        fixture.publish(&p, WebhookEvent::Completed, 1).await;
    }
    // Every one of them attempted once and now waiting for its retry.
    let first_attempts = eventually(Duration::from_secs(120), || async {
        (dead.with_deliveries(|d| d.len()) >= DEAD_EVENTS).then_some(())
    })
    .await;
    assert!(first_attempts.is_some(), "the dead receiver saw every event's first attempt");

    for i in 0..50 {
        let p = fixture.prediction_of(&other, &healthy.url());
        let published = tokio::time::Instant::now();
        fixture.publish(&p, WebhookEvent::Completed, 1).await;
        let arrived = eventually(Duration::from_secs(5), || async {
            healthy.with_deliveries(|d| d.iter().any(|d| d.json()["id"] == p.id.as_str())).then_some(())
        })
        .await;
        assert!(arrived.is_some(), "webhook {i} of the healthy account arrived within 5 s of its event");
        assert!(published.elapsed() < Duration::from_secs(5));
    }

    // The dead receiver's events still get their retries, none sooner than the schedule's
    // 3 s less its 20 % jitter.
    let retried = eventually(Duration::from_secs(120), || async {
        let gaps = dead.with_deliveries(receiver::retry_gaps);
        (gaps.len() >= DEAD_EVENTS).then_some(gaps)
    })
    .await
    .expect("every dead event was retried");
    let soonest = retried.iter().flatten().min().expect("retries");
    assert!(*soonest >= Duration::from_millis(2_400), "no retry came sooner than the schedule: {soonest:?}");
}

/// The backlog's claims: a receiver is worked by one notifier at a time, and a due event is
/// taken once until its lease ends.
#[tokio::test]
async fn a_receiver_and_its_due_events_are_taken_once_at_a_time() {
    use notifier::store::{NotifierCollections, webhook_retries::WaitingRetry};
    let fixture = Fixture::new(&[]).await;
    let backlog = fixture.store.webhook_retries();
    let p = fixture.prediction("http://127.0.0.1:9/hook", None);
    for i in 0..40 {
        let about = (p.id.clone(), p.account_id.clone(), WebhookEvent::Completed);
        let due = bson::DateTime::from_millis(bson::DateTime::now().timestamp_millis() - 1_000 + i);
        let retry = WaitingRetry::new(format!("w{i}"), "127.0.0.1:9".into(), about, 1, due, b"{}");
        backlog.schedule(&retry).await.expect("scheduled");
    }
    let lease = Duration::from_secs(60);
    let claim = backlog.claim_target(lease).await.expect("claim").expect("a receiver is due");
    assert_eq!(claim.target, "127.0.0.1:9");
    assert!(backlog.claim_target(lease).await.expect("claim").is_none(), "held by the first claim");
    let about = (p.id.clone(), p.account_id.clone(), WebhookEvent::Completed);
    let late = WaitingRetry::new("w-late".into(), "127.0.0.1:9".into(), about, 1, bson::DateTime::now(), b"{}");
    backlog.schedule(&late).await.expect("scheduled");
    assert!(backlog.claim_target(lease).await.expect("claim").is_none(), "still held after another event came");
    let first = backlog.take_due(&claim.target, lease, 32).await.expect("taken");
    let second = backlog.take_due(&claim.target, lease, 32).await.expect("taken");
    assert_eq!((first.len(), second.len()), (32, 9), "the first due first, each once");
    let ids: std::collections::HashSet<_> = first.iter().chain(&second).map(|r| r.webhook_id.clone()).collect();
    assert_eq!(ids.len(), 41);
    assert!(first.iter().all(|r| !r.taken), "as they were before they were taken");
    assert!(backlog.take_due(&claim.target, lease, 32).await.expect("taken").is_empty());
    backlog.put_back("w0", Duration::ZERO, 2).await.expect("put back");
    backlog.release_target(&claim).await.expect("released");
    let again = backlog.claim_target(lease).await.expect("claim").expect("due again with w0");
    let retaken = backlog.take_due(&again.target, lease, 32).await.expect("taken");
    assert_eq!(retaken.iter().map(|r| (r.webhook_id.as_str(), r.attempts)).collect::<Vec<_>>(), vec![("w0", 2)]);
}
