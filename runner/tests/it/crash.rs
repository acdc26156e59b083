//! A runner killed with SIGKILL mid-job: another runner finishes the job.

use std::{process::Stdio, time::Duration};

use common::domain::PredictionStatus;
use serde_json::json;
use testkit::eventually;

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
    let letters = eventually(Duration::from_secs(20), || async {
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

/// The `n`-th delivery of `p`'s job has reached a runner: its consumer redelivered it `n - 1`
/// times (at most a minute).
async fn delivered(fixture: &Fixture, p: &common::domain::Prediction, n: usize) {
    let stream = fixture.bus.jetstream().get_stream(fixture.bus.subjects().jobs_stream()).await.expect("stream");
    let name = common::lane::Lane::of(p).consumer(fixture.bus.subjects());
    let reached = eventually(Duration::from_secs(60), || {
        let (stream, name) = (stream.clone(), name.clone());
        async move {
            let mut consumer: async_nats::jetstream::consumer::PullConsumer = stream.get_consumer(&name).await.ok()?;
            let info = consumer.info().await.ok()?;
            (info.num_redelivered + 1 >= n && info.num_ack_pending == 1).then_some(())
        }
    })
    .await;
    assert!(reached.is_some(), "delivery {n} of the job never reached a runner");
}

/// A job whose runner dies on every delivery (a model that brings its process down, say) is
/// not delivered for ever, nor left undelivered with its prediction `processing` until its
/// deadline: on its last delivery the prediction fails with a code of its own, the job is
/// removed, and the model is not run again.
#[tokio::test]
async fn a_job_whose_runner_dies_on_every_delivery_fails_on_its_last_with_its_code() {
    let fixture = Fixture::new(&[("RUNNER_MAX_DELIVER", "3")]).await;
    let p = fixture.create("demo/sleep", json!({"seconds": 60})).await;
    for n in 1..=2 {
        let mut doomed = runner_process(&fixture, &[]);
        delivered(&fixture, &p, n).await;
        fixture.wait_until(&p.id, Duration::from_secs(30), |p| p.status == PredictionStatus::Processing).await;
        doomed.kill().expect("SIGKILL the runner");
        doomed.wait().expect("reap it");
    }
    fixture.start_runner("demo/sleep");
    let done = fixture.wait_until(&p.id, Duration::from_secs(60), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Failed);
    let error = done.error.as_ref().expect("an error");
    assert_eq!(error.code, "JOB_DELIVERIES_EXHAUSTED", "{error:?}");
    assert!(error.message.contains("2 deliveries"), "{error:?}");
    let jobs = fixture.bus.jetstream().get_stream(fixture.bus.subjects().jobs_stream()).await.expect("stream");
    let removed = eventually(Duration::from_secs(10), || {
        let mut jobs = jobs.clone();
        async move { (jobs.info().await.ok()?.state.messages == 0).then_some(()) }
    })
    .await;
    assert!(removed.is_some(), "the job left the stream");
}
