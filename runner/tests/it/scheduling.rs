//! Scheduling: a runner serving any number of models starts a waiting job as soon as it has a
//! free slot, and shares its slots fairly between busy models and between the accounts of a
//! model.

use std::time::Duration;

use common::domain::{AccountId, PredictionStatus};
use serde_json::json;

use crate::fixture::{Fixture, finished, start_delay};

#[tokio::test]
async fn the_default_model_set_starts_jobs_without_idle_slots() {
    let fixture = Fixture::new(&[]).await;
    fixture.start_runner_with("*", &[("RUNNER_CONCURRENCY", "4")]);
    fixture.await_consuming("demo/sleep", json!({"seconds": 0})).await;
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
    fixture.await_consuming("demo/sleep", json!({"seconds": 0})).await;
    let mut flood = Vec::new();
    for _ in 0..10 {
        flood.push(fixture.create("demo/sleep", json!({"seconds": 1})).await);
    }
    fixture.await_running(&flood, 2).await; // both slots are taken by the flood
    let echo = fixture.create("demo/echo", json!({"prompt": "me too"})).await;
    let echo = fixture.wait_until(&echo.id, Duration::from_secs(30), |p| p.status.is_terminal()).await;
    assert_eq!(echo.status, PredictionStatus::Succeeded);
    assert!(start_delay(&echo) < 1_500, "it takes the next free slot, about one run time: {} ms", start_delay(&echo));
    let flood = finished(&fixture, &flood).await;
    let after_echo = flood.iter().filter(|p| p.started_at > echo.started_at).count();
    assert!(after_echo >= 6, "the echo did not wait behind the flood ({after_echo} of 10 started after it)");
}

#[tokio::test]
async fn a_heavy_account_does_not_starve_a_light_one() {
    let fixture = Fixture::new(&[]).await;
    fixture.start_runner_with("demo/sleep", &[("RUNNER_CONCURRENCY", "2")]);
    fixture.await_consuming("demo/sleep", json!({"seconds": 0})).await;
    let (heavy, light) = (AccountId::generate(), AccountId::generate());
    let mut backlog = Vec::new();
    for _ in 0..30 {
        backlog.push(fixture.create_of(&heavy, "demo/sleep", json!({"seconds": 1})).await);
    }
    fixture.await_running(&backlog, 2).await; // the heavy account holds both slots
    let single = fixture.create_of(&light, "demo/sleep", json!({"seconds": 1})).await;
    let single = fixture.wait_until(&single.id, Duration::from_secs(30), |p| p.status.is_terminal()).await;
    let delay = start_delay(&single);
    eprintln!("the light account's start delay behind a backlog of 30: {delay} ms");
    assert!(delay < 2_000, "under two model run times, whatever the backlog: {delay} ms");
    let mut waiting = 0;
    for p in &backlog {
        let p = fixture.current(&p.id).await;
        if p.started_at.is_none_or(|s| s > single.started_at.expect("started")) {
            waiting += 1;
        }
    }
    assert!(waiting >= 20, "most of the backlog was still waiting ({waiting} of 30)");
}

#[tokio::test]
async fn steady_arrivals_start_at_once_while_slots_are_free() {
    let fixture = Fixture::new(&[]).await;
    fixture.start_runner_with("*", &[("RUNNER_CONCURRENCY", "8")]);
    fixture.await_consuming("demo/sleep", json!({"seconds": 0})).await;
    let account = AccountId::generate();
    let mut created = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(125));
    for _ in 0..40 {
        tick.tick().await;
        created.push(fixture.create_of(&account, "demo/sleep", json!({"seconds": 0.5})).await);
    }
    let done = finished(&fixture, &created).await;
    let mut delays: Vec<i64> = done.iter().map(start_delay).collect();
    eprintln!("start delays at half of capacity (ms): {delays:?}");
    delays.sort_unstable();
    assert!(delays[delays.len() * 99 / 100] < 250, "{delays:?}");
}
