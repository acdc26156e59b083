//! A runner killed with SIGKILL mid-job: another runner finishes the job.

use std::time::Duration;

use common::domain::PredictionStatus;
use serde_json::json;
use testkit::eventually;

use crate::fixture::{Fixture, signal};

#[tokio::test]
async fn a_job_of_a_runner_killed_mid_run_is_finished_by_another_runner() {
    let fixture = Fixture::new(&[]).await;
    let mut doomed = fixture.runner_process(&[]);

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
    // The message is terminated right after its dead letter is written.
    let jobs = fixture.bus.jetstream().get_stream(fixture.bus.subjects().jobs_stream()).await.expect("stream");
    let gone = eventually(Duration::from_secs(20), || {
        let mut jobs = jobs.clone();
        async move { (jobs.info().await.ok()?.state.messages == 0).then_some(()) }
    })
    .await;
    assert!(gone.is_some(), "terminated, not waiting for redelivery");
}

/// With the default ack wait, a killed runner's job is delivered again within 6 s, and taken
/// over once its presence is 7 s old (it is written every 5 s): about 8 s after the kill at
/// worst, bounded at 15 here.
#[tokio::test]
async fn with_the_default_ack_wait_a_killed_runners_prediction_resumes_elsewhere_within_fifteen_seconds() {
    let fixture = Fixture::new(&[]).await;
    let default_ack_wait = [("RUNNER_ACK_WAIT_SECONDS", "6")];
    let mut doomed = fixture.runner_process(&default_ack_wait);
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
    assert!(resumed_after < 15_000, "resumed {resumed_after} ms after the kill (the 3 s run subtracted)");
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
    let mut holder = None;
    for n in 1..=2 {
        let mut doomed = fixture.runner_process(&[]);
        delivered(&fixture, &p, n).await;
        // It runs there: held by this runner (a redelivery takes it over once the last
        // holder is known gone).
        let running = fixture
            .wait_until(&p.id, Duration::from_secs(30), |p| {
                p.status == PredictionStatus::Processing && p.held_by.is_some() && p.held_by != holder
            })
            .await;
        holder = running.held_by;
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

/// How many model calls of `model` the runner serving metrics at `addr` has ended, once none
/// runs there (at most 30 s).
async fn runs_ended(addr: std::net::SocketAddr, model: &str) -> u64 {
    let url = format!("http://{addr}/metrics");
    let text = eventually(Duration::from_secs(30), || {
        let url = url.clone();
        async move {
            let text = reqwest::get(url).await.ok()?.text().await.ok()?;
            let in_flight = format!(r#"runner_jobs_in_flight{{model="{model}"}} "#);
            let busy = text.lines().filter_map(|l| l.strip_prefix(&in_flight)).any(|n| n.trim() != "0");
            (!busy).then_some(text)
        }
    })
    .await
    .expect("the runner's model calls ended");
    let counted = format!(r#"runner_model_run_duration_seconds_count{{model="{model}","#);
    text.lines()
        .filter(|l| l.starts_with(&counted))
        .filter_map(|l| l.rsplit(' ').next()?.trim().parse::<u64>().ok())
        .sum()
}

/// A runner that stops sending progress for longer than the ack wait (starved of CPU, or
/// cut off while a JetStream leader is elected) still runs its job when the job is delivered
/// again: the delivery waits for it instead of running the model a second time.
#[tokio::test]
async fn a_job_delivered_again_while_its_runner_still_runs_it_runs_once() {
    let fixture = Fixture::new(&[]).await;
    let (first_metrics, second_metrics) = (testkit::free_addr(), testkit::free_addr());
    let mut first = fixture.runner_process(&[("RUNNER_METRICS_BIND", &first_metrics.to_string())]);
    let p = fixture.create("demo/sleep", json!({"seconds": 4})).await;
    fixture.wait_until(&p.id, Duration::from_secs(30), |p| p.status == PredictionStatus::Processing).await;
    let mut second = fixture.runner_process(&[("RUNNER_METRICS_BIND", &second_metrics.to_string())]);

    // Frozen past the ack wait (2 s here): its job is delivered again, while it still holds it.
    signal(&first, "-STOP");
    delivered(&fixture, &p, 2).await;
    signal(&first, "-CONT");

    let done = fixture.wait_until(&p.id, Duration::from_secs(60), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Succeeded, "{:?}", done.error);
    let runs = runs_ended(first_metrics, "demo/sleep").await + runs_ended(second_metrics, "demo/sleep").await;
    assert_eq!(runs, 1, "the model ran once across both runners");
    for runner in [&mut first, &mut second] {
        runner.kill().expect("stop the runner");
        runner.wait().expect("reap it");
    }
}
