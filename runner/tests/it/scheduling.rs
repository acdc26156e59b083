//! Scheduling: a runner serving any number of models starts a waiting job as soon as it has a
//! free slot, and shares its slots fairly between busy models.

use std::time::Duration;

use common::domain::{Prediction, PredictionStatus};
use serde_json::json;

use crate::fixture::Fixture;

/// Milliseconds from creation to start.
fn start_delay(p: &Prediction) -> i64 {
    p.started_at.expect("started").timestamp_millis() - p.created_at.timestamp_millis()
}

async fn finished(fixture: &Fixture, created: &[Prediction]) -> Vec<Prediction> {
    let mut done = Vec::new();
    for p in created {
        done.push(fixture.wait_until(&p.id, Duration::from_secs(60), |p| p.status.is_terminal()).await);
    }
    done
}

#[tokio::test]
async fn the_default_model_set_starts_jobs_without_idle_slots() {
    let fixture = Fixture::new(&[]).await;
    fixture.start_runner_with("*", &[("RUNNER_CONCURRENCY", "4")]);
    tokio::time::sleep(Duration::from_secs(1)).await; // its consumers are up
    let mut created = Vec::new();
    for _ in 0..8 {
        created.push(fixture.create("demo/sleep", json!({"seconds": 1})).await);
    }
    let done = finished(&fixture, &created).await;
    assert!(done.iter().all(|p| p.status == PredictionStatus::Succeeded));
    let mut delays: Vec<i64> = done.iter().map(start_delay).collect();
    delays.sort_unstable();
    eprintln!("start delays of 8 one-second predictions on 4 slots (ms): {delays:?}");
    // Four start at once; the next four as the first four end, about a second later.
    assert!(delays[3] < 500, "the first four start at once: {delays:?} ms");
    assert!(delays[7] < 1_800, "the last four start as soon as slots free up: {delays:?} ms");
    let first_start = done.iter().map(|p| p.started_at.expect("started")).min().expect("some");
    let last_end = done.iter().map(|p| p.completed_at.expect("ended")).max().expect("some");
    let makespan = last_end.timestamp_millis() - first_start.timestamp_millis();
    assert!(makespan < 3_000, "8 one-second predictions on 4 slots take about 2 s, took {makespan} ms");
    for p in &done {
        let overlapping = done.iter().filter(|q| q.started_at <= p.started_at && q.completed_at > p.started_at).count();
        assert!(overlapping <= 4, "never more than RUNNER_CONCURRENCY at once");
    }
}

#[tokio::test]
async fn a_busy_model_does_not_block_another() {
    let fixture = Fixture::new(&[]).await;
    fixture.start_runner_with("*", &[("RUNNER_CONCURRENCY", "2")]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut flood = Vec::new();
    for _ in 0..10 {
        flood.push(fixture.create("demo/sleep", json!({"seconds": 1})).await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await; // both slots are taken by the flood
    let echo = fixture.create("demo/echo", json!({"prompt": "me too"})).await;
    let echo = fixture.wait_until(&echo.id, Duration::from_secs(30), |p| p.status.is_terminal()).await;
    assert_eq!(echo.status, PredictionStatus::Succeeded);
    assert!(start_delay(&echo) < 1_500, "it takes the next free slot, about one run time: {} ms", start_delay(&echo));
    let flood = finished(&fixture, &flood).await;
    let after_echo = flood.iter().filter(|p| p.started_at > echo.started_at).count();
    assert!(after_echo >= 6, "the echo did not wait behind the flood ({after_echo} of 10 started after it)");
}
