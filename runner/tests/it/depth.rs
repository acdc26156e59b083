//! The queue's depth per model, waiting and running counted apart (the metrics
//! `runner_jobs_waiting` and `runner_jobs_running` are set from these counts at each scan).

use std::time::Duration;

use common::domain::{AccountId, ModelRef};
use futures::StreamExt;
use runner::lanes::Lanes;
use serde_json::json;

use crate::fixture::Fixture;

/// The lanes of the fixture's jobs stream (30 s ack wait, 5 deliveries).
async fn lanes_of(fixture: &Fixture) -> Lanes {
    let subjects = fixture.bus.subjects().clone();
    let stream = fixture.bus.jetstream().get_stream(subjects.jobs_stream()).await.expect("jobs stream");
    Lanes::new(stream, subjects, Duration::from_secs(30), 5)
}

#[tokio::test]
async fn a_taken_job_counts_as_running_and_the_rest_as_waiting() {
    let fixture = Fixture::new(&[]).await;
    let lanes = lanes_of(&fixture).await;
    let model: ModelRef = "demo/echo".parse().expect("model");
    let (a, b) = (AccountId::generate(), AccountId::generate());
    for account in [&a, &a, &a, &b] {
        fixture.create_of(account, "demo/echo", json!({"prompt": "x"})).await;
    }
    let (found, jobs) = lanes.with_jobs(&model).await.expect("scan");
    assert_eq!((found.len(), jobs), (2, 4), "two lanes, four jobs");
    let models = [model.clone(), "demo/sleep".parse().expect("model")];
    let running =
        async |lanes: &Lanes| lanes.census(&models).await.expect("count").models.get(&model).map_or(0, |c| c.running);
    assert_eq!(running(&lanes).await, 0, "no lane consumer yet: nothing taken");

    let lane_of_a = found.iter().find(|k| k.account == a).expect("a's lane");
    let consumer = lanes.open(lane_of_a).await.expect("open");
    // A batch that waits (up to 30 s) for its two: a fetch that does not wait may find the
    // consumer not yet holding what the stream has, on a busy machine.
    let batch = consumer.batch().max_messages(2).expires(std::time::Duration::from_secs(30));
    let mut taken = batch.messages().await.expect("fetch").take(2);
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

/// A lane's consumer keeps its state in memory (its state is MongoDB's), and a lane whose
/// consumer is gone is opened again after [`Lanes::reset`], while one that answers is kept.
#[tokio::test]
async fn a_lanes_consumer_is_kept_in_memory_and_one_that_is_gone_is_opened_again() {
    let fixture = Fixture::new(&[]).await;
    let subjects = fixture.bus.subjects().clone();
    let stream = fixture.bus.jetstream().get_stream(subjects.jobs_stream()).await.expect("jobs stream");
    let lanes = Lanes::new(stream.clone(), subjects.clone(), Duration::from_secs(30), 5);
    let lane = |account: AccountId| common::lane::Lane {
        model: "demo/echo".parse::<ModelRef>().expect("model"),
        route: common::domain::Route { version: "v1".into(), pool: None },
        account,
        level: common::domain::Priority::Normal,
    };

    let fresh = lane(AccountId::generate());
    let mut consumer = lanes.open(&fresh).await.expect("opened");
    let info = consumer.info().await.expect("info").clone();
    assert!(info.config.memory_storage, "in memory");

    // A consumer that answers is kept by a reset; one that is gone stays gone until opened.
    lanes.reset(&fresh).await;
    assert!(stream.consumer_info(fresh.consumer(&subjects)).await.is_ok(), "it answers: kept");
    stream.delete_consumer(&fresh.consumer(&subjects)).await.expect("deleted");
    lanes.reset(&fresh).await;
    let mut again = lanes.open(&fresh).await.expect("opened again");
    assert!(again.info().await.expect("info").config.memory_storage);
}

/// A scan counts the lanes by their consumers ([`Lanes::census`]): a lane whose consumer holds
/// jobs is found with how many wait and run, and the jobs of a lane no consumer holds are
/// counted as uncovered (what makes the scan list the subjects to find that lane).
#[tokio::test]
async fn a_census_finds_lanes_by_their_consumers_and_counts_jobs_no_consumer_holds() {
    let fixture = Fixture::new(&[]).await;
    let lanes = lanes_of(&fixture).await;
    let model: ModelRef = "demo/echo".parse().expect("model");
    let (a, b) = (AccountId::generate(), AccountId::generate());
    for account in [&a, &a, &a, &b, &b] {
        fixture.create_of(account, "demo/echo", json!({"prompt": "x"})).await;
    }
    let models = [model.clone()];
    let census = lanes.census(&models).await.expect("count");
    assert_eq!(census.uncovered, 5, "no lane has a consumer yet: every job is uncovered");
    assert!(census.models.get(&model).is_none_or(|c| c.lanes.is_empty()), "{census:?}");

    let (found, _) = lanes.with_jobs(&model).await.expect("listing");
    let lane_of = |account: &AccountId| found.iter().find(|k| &k.account == account).expect("lane").clone();
    let (lane_a, lane_b) = (lane_of(&a), lane_of(&b));
    let consumer = lanes.open(&lane_a).await.expect("open");
    let census = lanes.census(&models).await.expect("count");
    assert_eq!(census.uncovered, 2, "b's two jobs have no consumer: {census:?}");
    let count = census.models.get(&model).expect("a's lane counted");
    assert_eq!((count.lanes.as_slice(), count.waiting, count.running), (std::slice::from_ref(&lane_a), 3, 0));

    let batch = consumer.batch().max_messages(1).expires(std::time::Duration::from_secs(30));
    let mut taken = batch.messages().await.expect("fetch").take(1);
    let held = taken.next().await.expect("a job").expect("a job");
    lanes.open(&lane_b).await.expect("open");
    let census = lanes.census(&models).await.expect("count");
    assert_eq!(census.uncovered, 0, "every job is held by its lane's consumer: {census:?}");
    let count = census.models.get(&model).expect("counted");
    let mut counted = count.lanes.clone();
    counted.sort_by(|x, y| x.account.cmp(&y.account));
    let mut expected = vec![lane_a.clone(), lane_b.clone()];
    expected.sort_by(|x, y| x.account.cmp(&y.account));
    assert_eq!((counted, count.waiting, count.running), (expected, 4, 1), "one taken, four waiting");

    held.double_ack().await.expect("ack, confirmed");
    let census = lanes.census(&models).await.expect("count");
    let count = census.models.get(&model).expect("counted");
    assert_eq!((census.uncovered, count.waiting, count.running), (0, 4, 0), "the acked job left the stream");
}
