//! The queue's depth per model, waiting and running counted apart (the metrics
//! `runner_jobs_waiting` and `runner_jobs_running` are set from these counts at each scan).

use std::time::Duration;

use common::domain::{AccountId, ModelRef};
use futures::StreamExt;
use runner::lanes::Lanes;
use serde_json::json;

use crate::fixture::Fixture;

#[tokio::test]
async fn a_taken_job_counts_as_running_and_the_rest_as_waiting() {
    let fixture = Fixture::new(&[]).await;
    let subjects = fixture.bus.subjects().clone();
    let stream = fixture.bus.jetstream().get_stream(subjects.jobs_stream()).await.expect("jobs stream");
    let lanes = Lanes::new(stream, subjects, Duration::from_secs(30), 5);
    let model: ModelRef = "demo/echo".parse().expect("model");
    let (a, b) = (AccountId::generate(), AccountId::generate());
    for account in [&a, &a, &a, &b] {
        fixture.create_of(account, "demo/echo", json!({"prompt": "x"})).await;
    }
    let (found, jobs) = lanes.with_jobs(&model).await.expect("scan");
    assert_eq!((found.len(), jobs), (2, 4), "two lanes, four jobs");
    let models = [model.clone(), "demo/sleep".parse().expect("model")];
    let running = async |lanes: &Lanes| lanes.running(&models).await.expect("count").get(&model).copied().unwrap_or(0);
    assert_eq!(running(&lanes).await, 0, "no lane consumer yet: nothing taken");

    let lane_of_a = found.iter().find(|k| k.account.as_ref() == Some(&a)).expect("a's lane");
    let consumer = lanes.open(lane_of_a).await.expect("open");
    let mut taken = consumer.fetch().max_messages(2).messages().await.expect("fetch");
    let mut held = Vec::new();
    while let Some(message) = taken.next().await {
        held.push(message.expect("a job"));
    }
    assert_eq!(held.len(), 2);
    assert_eq!(running(&lanes).await, 2, "two taken, not acked: running");
    for message in &held {
        message.double_ack().await.expect("ack, confirmed");
    }
    let (_, jobs) = lanes.with_jobs(&model).await.expect("scan");
    assert_eq!(jobs, 2, "the two acked jobs left the work queue");
    assert_eq!(running(&lanes).await, 0, "the rest wait");
}
