//! A runner killed with SIGKILL mid-job: another runner finishes the job.

use std::{process::Stdio, time::Duration};

use common::domain::PredictionStatus;
use serde_json::json;

use crate::fixture::Fixture;

/// A runner process serving demo/sleep, with the fixture's settings and `extra`.
fn runner_process(fixture: &Fixture, extra: &[(&str, &str)]) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_runner"))
        .env_clear()
        .envs(&fixture.vars)
        .envs(extra.iter().copied())
        .env("RUNNER_MODELS", "demo/sleep")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start a runner process")
}

#[tokio::test]
async fn a_job_of_a_runner_killed_mid_run_is_finished_by_another_runner() {
    let fixture = Fixture::new(&[]).await;
    let mut doomed = runner_process(&fixture, &[]);

    let p = fixture.create("demo/sleep", json!({"seconds": 3})).await;
    fixture.wait_until(&p.id, Duration::from_secs(30), |p| p.status == PredictionStatus::Processing).await;
    doomed.kill().expect("SIGKILL the runner");
    doomed.wait().expect("reap it");
    assert_eq!(fixture.current(&p.id).await.status, PredictionStatus::Processing, "killed mid-run");

    fixture.start_runner("demo/sleep");
    let done = fixture.wait_until(&p.id, Duration::from_secs(30), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Succeeded);
    assert_eq!(done.output.as_ref().and_then(serde_json::Value::as_str), Some("slept 3 s"));
    assert!(done.logs.ends_with("slept 3 of 3 s\n"), "{:?}", done.logs);
}

#[tokio::test]
async fn an_undecodable_job_is_recorded_and_never_redelivered() {
    let fixture = Fixture::new(&[]).await;
    fixture.start_runner("demo/echo");
    let id = common::domain::PredictionId::parse("aaaaaaaaaaaaaaaaaaaaaaaaaa").expect("id");
    let subject = fixture.bus.subjects().job(
        &"demo/echo".parse().expect("model"),
        &common::domain::Route {
            version: crate::fixture::builtin_version(&"demo/echo".parse().expect("model")).expect("built in"),
            pool: None,
        },
        &common::domain::AccountId::generate(),
        common::domain::Priority::Normal,
        &id,
    );
    let ack = fixture.bus.jetstream().publish(subject, "not a job".into()).await.expect("publish");
    ack.await.expect("stored");
    let letters = testkit::eventually(Duration::from_secs(20), || async {
        let found = fixture.store.dead_letters().of_service("runner").await.ok()?;
        (!found.is_empty()).then_some(found)
    })
    .await
    .expect("a dead letter");
    assert_eq!(letters[0].payload, "not a job");
    let mut jobs = fixture.bus.jetstream().get_stream(fixture.bus.subjects().jobs_stream()).await.expect("stream");
    assert_eq!(jobs.info().await.expect("info").state.messages, 0, "terminated, not waiting for redelivery");
}

#[tokio::test]
async fn with_the_default_ack_wait_a_killed_runners_prediction_resumes_elsewhere_within_ten_seconds() {
    let fixture = Fixture::new(&[]).await;
    let default_ack_wait = [("RUNNER_ACK_WAIT_SECONDS", "6")];
    let mut doomed = runner_process(&fixture, &default_ack_wait);
    let p = fixture.create("demo/sleep", json!({"seconds": 3})).await;
    fixture.wait_until(&p.id, Duration::from_secs(30), |p| p.status == PredictionStatus::Processing).await;
    fixture.start_runner_with("demo/sleep", &default_ack_wait);
    tokio::time::sleep(Duration::from_secs(1)).await; // the other runner is up

    doomed.kill().expect("SIGKILL the runner");
    let killed_at = bson::DateTime::now();
    doomed.wait().expect("reap it");
    let done = fixture.wait_until(&p.id, Duration::from_secs(30), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Succeeded);
    let resumed_after = done.completed_at.expect("ended").timestamp_millis() - killed_at.timestamp_millis() - 3_000;
    eprintln!("resumed about {resumed_after} ms after the kill");
    assert!(resumed_after < 10_000, "resumed {resumed_after} ms after the kill (the 3 s run subtracted)");
}
