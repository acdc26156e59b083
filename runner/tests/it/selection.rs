//! Runners serve only the models they are given.

use std::time::Duration;

use common::domain::PredictionStatus;
use serde_json::json;
use testkit::eventually;

use crate::fixture::Fixture;

#[tokio::test]
async fn runners_with_disjoint_model_sets_each_take_only_their_own_jobs() {
    let fixture = Fixture::new(&[]).await;
    fixture.start_runner("demo/echo");
    let sleep = fixture.create("demo/sleep", json!({"seconds": 0})).await;
    let echo = fixture.create("demo/echo", json!({"prompt": "mine"})).await;

    let done = fixture.wait_until(&echo.id, Duration::from_secs(30), |p| p.status.is_terminal()).await;
    assert_eq!(done.output.as_ref().and_then(serde_json::Value::as_str), Some("mine"));
    // The echo job leaves the work queue when its acknowledgement lands, a moment after the
    // prediction's last write: the sleep job is then the one left.
    let jobs = fixture.bus.jetstream().get_stream(fixture.bus.subjects().jobs_stream()).await.expect("stream");
    let left = eventually(Duration::from_secs(30), || {
        let mut jobs = jobs.clone();
        async move { jobs.info().await.ok().map(|i| i.state.messages).filter(|n| *n <= 1) }
    })
    .await;
    assert_eq!(left, Some(1), "the sleep job waits for its runner");
    assert_eq!(fixture.current(&sleep.id).await.status, PredictionStatus::Starting);

    fixture.start_runner("demo/sleep");
    let done = fixture.wait_until(&sleep.id, Duration::from_secs(30), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Succeeded);
}

#[tokio::test]
async fn a_model_limit_of_one_runs_that_models_predictions_one_at_a_time() {
    let fixture = Fixture::new(&[]).await;
    fixture.start_runner_with("demo/sleep", &[("RUNNER_MODEL_CONCURRENCY", "1"), ("RUNNER_CONCURRENCY", "4")]);
    let first = fixture.create("demo/sleep", json!({"seconds": 1})).await;
    let second = fixture.create("demo/sleep", json!({"seconds": 1})).await;
    let a = fixture.wait_until(&first.id, Duration::from_secs(30), |p| p.status.is_terminal()).await;
    let b = fixture.wait_until(&second.id, Duration::from_secs(30), |p| p.status.is_terminal()).await;
    let (earlier, later) = if a.started_at <= b.started_at { (a, b) } else { (b, a) };
    assert!(later.started_at >= earlier.completed_at, "the second started only after the first completed");
}

#[tokio::test]
async fn the_runner_serves_its_mongodb_command_counts_when_asked() {
    let fixture = Fixture::new(&[]).await;
    let addr = testkit::free_addr();
    fixture.start_runner_with("demo/echo", &[("RUNNER_METRICS_BIND", &addr.to_string())]);
    let p = fixture.create("demo/echo", json!({"prompt": "counted"})).await;
    fixture.wait_until(&p.id, Duration::from_secs(30), |p| p.status.is_terminal()).await;
    let text = reqwest::get(format!("http://{addr}/metrics")).await.expect("scrape").text().await.expect("text");
    let sample = |series: String| {
        text.lines().find_map(|l| l.strip_prefix(&format!("{series} "))).and_then(|n| n.trim().parse::<u64>().ok())
    };
    let count = |command: &str| sample(format!(r#"mongodb_commands_total{{command="{command}"}}"#));
    // The job carried its prediction: processing and succeeded are both written without a
    // read-back (an `update` each).
    assert!(count("update").is_some_and(|n| n >= 2), "processing and succeeded were counted: {text}");
    assert_eq!(count("findAndModify").unwrap_or(0), 0, "nothing read back: {text}");
    let timed = sample(r#"mongodb_command_duration_seconds_count{command="update"}"#.to_owned());
    assert!(timed.is_some_and(|n| n >= 2), "the updates' answers were timed: {text}");
    assert!(text.trim_end().ends_with("# EOF"));
    let health = reqwest::get(format!("http://{addr}/health")).await.expect("probe");
    assert_eq!(health.status(), 200);
}
