//! Signatures: checked by an independent verifier, and only the new secret's once a
//! rotation's window has closed.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::Duration,
};

use bson::DateTime;
use common::{domain::WebhookEvent, signing, store::Account};

use receiver::Receiver;

use crate::fixture::Fixture;

#[tokio::test]
async fn deliveries_verify_with_an_independent_python_verifier() {
    let fixture = Fixture::new(&[]).await;
    let port = testkit::free_port();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/local/webhook-receiver");
    let mut verifier = Command::new("python3")
        .args([script, "--port", &port.to_string(), "--secret", fixture.secret.expose()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the Python receiver");
    let mut lines = BufReader::new(verifier.stdout.take().expect("stdout")).lines();
    assert!(lines.next().and_then(Result::ok).is_some_and(|l| l.starts_with("listening")));

    fixture.start_notifier();
    let p = fixture.prediction(&format!("http://127.0.0.1:{port}/hook"), None);
    fixture.publish(&p, WebhookEvent::Completed, 1).await;
    let line = tokio::task::spawn_blocking(move || lines.next().and_then(Result::ok)).await.expect("join");
    let _ = verifier.kill();
    let _ = verifier.wait();
    let line = line.expect("the receiver printed a delivery");
    assert!(line.contains("[signature valid]"), "{line}");
}

#[tokio::test]
async fn after_the_transition_window_only_the_new_secret_signs() {
    let mut fixture = Fixture::new(&[]).await;
    let now = DateTime::now();
    let (sealed, new_secret) = fixture.account.rotated(&fixture.master, now, -1000);
    assert!(
        fixture
            .store
            .accounts()
            .replace_secrets(&fixture.account.id, &fixture.account.webhook_secret.current, &sealed)
            .await
            .expect("rotate")
    );
    fixture.account = Account { webhook_secret: sealed, ..fixture.account.clone() };

    let receiver = Receiver::scripted(vec![]).await;
    fixture.start_notifier();
    let p = fixture.prediction(&receiver.url(), None);
    fixture.publish(&p, WebhookEvent::Completed, 1).await;
    fixture.attempts_until(&p.id, Duration::from_secs(20), |a| !a.is_empty()).await;
    let hook = &receiver.deliveries()[0];
    let header = hook.header("webhook-signature");
    assert_eq!(header.split(' ').count(), 1, "one signature: {header}");
    let ts: i64 = hook.header("webhook-timestamp").parse().expect("timestamp");
    assert!(signing::verify(&new_secret, hook.header("webhook-id"), ts, &hook.body, header));
    assert!(!signing::verify(&fixture.secret, hook.header("webhook-id"), ts, &hook.body, header));
}
