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
