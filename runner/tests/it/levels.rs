//! Priority levels in the runner's pick: higher levels start first, turns between accounts
//! hold within a level, and a job waiting past `PRIORITY_AGING_SECONDS` counts one level
//! higher, so low priority never starves.

use std::time::Duration;

use common::domain::{AccountId, Prediction, PredictionStatus, Priority};
use futures::StreamExt;
use serde_json::json;

use crate::fixture::{Fixture, finished, start_delay};

fn started(p: &Prediction) -> i64 {
    p.started_at.expect("started").timestamp_millis()
}

/// The check: 24 normal one-second jobs queued on a 4-slot runner; 4 high ones start
/// within about one run time, and 2 low ones start after every normal one.
#[tokio::test]
async fn high_jobs_start_first_and_low_ones_after_every_normal_one() {
    let fixture = Fixture::new(&[]).await;
    fixture.start_runner_with("demo/sleep", &[("RUNNER_CONCURRENCY", "4")]);
    fixture.await_consuming("demo/sleep", json!({"seconds": 0})).await; // its consumers are up
    let (batch, other, urgent) = (AccountId::generate(), AccountId::generate(), AccountId::generate());
    let one_second = || json!({"seconds": 1});
    let mut normal = Vec::new();
    for _ in 0..24 {
        normal.push(fixture.create_at(&batch, Priority::Normal, "demo/sleep", one_second()).await);
    }
    let mut low = Vec::new();
    for _ in 0..2 {
        low.push(fixture.create_at(&other, Priority::Low, "demo/sleep", one_second()).await);
    }
    let mut high = Vec::new();
    for _ in 0..4 {
        high.push(fixture.create_at(&urgent, Priority::High, "demo/sleep", one_second()).await);
    }
    let high = finished(&fixture, &high).await;
    let normal = finished(&fixture, &normal).await;
    let low = finished(&fixture, &low).await;
    assert!(high.iter().chain(&normal).chain(&low).all(|p| p.status == PredictionStatus::Succeeded));
    let mut delays: Vec<i64> = high.iter().map(start_delay).collect();
    delays.sort_unstable();
    eprintln!("start delays of 4 high jobs behind 20 waiting normal ones on 4 busy slots (ms): {delays:?}");
    assert!(delays[3] < 1_800, "all four take the slots the first normal jobs free, about one run time: {delays:?}");
    let last_normal = normal.iter().map(started).max().expect("24");
    for p in &low {
        assert!(started(p) >= last_normal, "a low job started before a normal one that waited");
    }
    let first_high = high.iter().map(started).min().expect("4");
    let normal_after = normal.iter().filter(|p| started(p) > first_high).count();
    assert!(normal_after >= 16, "the high jobs went ahead of the normal backlog ({normal_after} of 24 after)");
}

/// A low job behind a steady stream of fresh normal work counts as normal once it has waited
/// the aging bound, and then takes its account's turn among the normal lanes.
#[tokio::test]
async fn a_low_job_waiting_past_the_aging_bound_takes_the_next_turn() {
    let fixture = std::sync::Arc::new(Fixture::new(&[]).await);
    fixture.start_runner_with("demo/sleep", &[("RUNNER_CONCURRENCY", "1"), ("PRIORITY_AGING_SECONDS", "2")]);
    fixture.await_consuming("demo/sleep", json!({"seconds": 0})).await;
    let (batch, other) = (AccountId::generate(), AccountId::generate());
    // Half-second jobs arriving every 0.4 s keep the one slot busy, each waiting little.
    let feed = {
        let fixture = fixture.clone();
        tokio::spawn(async move {
            let mut fed = Vec::new();
            for _ in 0..20 {
                fed.push(fixture.create_at(&batch, Priority::Normal, "demo/sleep", json!({"seconds": 0.5})).await);
                tokio::time::sleep(Duration::from_millis(400)).await;
            }
            fed
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let low = fixture.create_at(&other, Priority::Low, "demo/sleep", json!({"seconds": 0.5})).await;
    let low = fixture.wait_until(&low.id, Duration::from_secs(30), |p| p.status.is_terminal()).await;
    let normal = finished(&fixture, &feed.await.expect("fed")).await;
    let delay = start_delay(&low);
    eprintln!("a low job's start delay beside a steady normal stream on one slot, aging 2 s: {delay} ms");
    assert!(delay >= 1_900, "normal work went first until it aged: {delay} ms");
    assert!(delay < 3_500, "within the aging bound and one run time (plus slack): {delay} ms");
    let after = normal.iter().filter(|p| started(p) > started(&low)).count();
    assert!(after >= 5, "it went ahead of the normal jobs still waiting or to come ({after} of 20 after it)");
}

/// Behind a backlog that has aged too (normal jobs waiting past the bound count as high), a
/// low job counts one more level higher for each bound it waits, so it never starves.
#[tokio::test]
async fn a_low_job_behind_an_aged_backlog_goes_after_twice_the_aging_bound() {
    let fixture = Fixture::new(&[]).await;
    fixture.start_runner_with("demo/sleep", &[("RUNNER_CONCURRENCY", "1"), ("PRIORITY_AGING_SECONDS", "2")]);
    fixture.await_consuming("demo/sleep", json!({"seconds": 0})).await;
    let (batch, other) = (AccountId::generate(), AccountId::generate());
    let mut normal = Vec::new();
    for _ in 0..14 {
        normal.push(fixture.create_at(&batch, Priority::Normal, "demo/sleep", json!({"seconds": 0.5})).await);
    }
    let low = fixture.create_at(&other, Priority::Low, "demo/sleep", json!({"seconds": 0.5})).await;
    let low = fixture.wait_until(&low.id, Duration::from_secs(30), |p| p.status.is_terminal()).await;
    let normal = finished(&fixture, &normal).await;
    let delay = start_delay(&low);
    eprintln!("a low job's start delay behind 14 normal half-second jobs on one slot, aging 2 s: {delay} ms");
    assert!(delay >= 3_500, "the backlog aged with it and stayed a level above until twice the bound: {delay} ms");
    assert!(delay < 5_500, "then it counts as high and takes the next turn: {delay} ms");
    let after = normal.iter().filter(|p| started(p) > started(&low)).count();
    assert!(after >= 3, "it went ahead of the rest of the backlog ({after} of 14 started after it)");
}

/// Every lane is a consumer of the jobs stream, and nats-server 2.15 allows a stream 1,000
/// unless it says otherwise: the lane past the thousandth opens too (before, its predictions
/// never started).
#[tokio::test]
async fn more_than_a_thousand_lanes_open() {
    let fixture = Fixture::new(&[]).await;
    let stream = fixture.bus.jetstream().get_stream(fixture.bus.subjects().jobs_stream()).await.expect("jobs stream");
    let lanes = runner::lanes::Lanes::new(stream, fixture.bus.subjects().clone(), Duration::from_secs(6), 5);
    let model: common::domain::ModelRef = "demo/echo".parse().expect("model");
    let route = common::domain::Route { version: "v1".into(), pool: None };
    let opened = futures::stream::iter(0..1_001)
        .map(|_| {
            let key = common::lane::Lane {
                model: model.clone(),
                route: route.clone(),
                account: AccountId::generate(),
                level: Priority::Normal,
            };
            let lanes = &lanes;
            async move { lanes.open(&key).await.map(|_| ()) }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    let failed: Vec<String> = opened.into_iter().filter_map(|r| r.err().map(|e| format!("{e:#}"))).collect();
    assert!(failed.is_empty(), "{} lanes did not open, e.g. {:?}", failed.len(), failed.first());
}
