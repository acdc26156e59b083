//! New predictions are stored by group commit (`common::store::GroupCommit`): creates that
//! arrive together share one `insert_many`, each caller learns the fate of its own prediction,
//! and concurrent creates through the api are each stored and answered.

use std::{collections::HashSet, time::Duration};

use common::{
    deadline::Deadline,
    domain::{AccountId, Prediction},
    samples,
    store::{Batching, GroupCommitError, Store},
};
use futures::future::join_all;
use serde_json::json;
use testkit::TestContext;

use crate::harness::{JsonBody, Options, System};

fn a_prediction(account: &AccountId) -> Prediction {
    samples::starting_prediction(account.clone(), "demo/echo".parse().expect("model"), json!({"prompt": "batched"}))
}

fn inserts(store: &Store) -> u64 {
    store.command_counts().snapshot().get("insert").copied().unwrap_or(0)
}

/// One write at a time, gathering for long enough that every test document joins it.
const GATHER: Batching = Batching { linger: Duration::from_millis(300), max_batch: 64, max_in_flight: 1 };

#[tokio::test]
async fn predictions_created_together_are_stored_with_one_write() {
    let store = TestContext::new().store().await;
    let writer = store.predictions().group_commit(GATHER);
    let account = AccountId::generate();
    let predictions: Vec<Prediction> = (0..10).map(|_| a_prediction(&account)).collect();
    let before = inserts(&store);

    let results = join_all(predictions.iter().map(|p| writer.insert(p.clone()))).await;

    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(inserts(&store) - before, 1, "one insert for the ten predictions");
    for p in &predictions {
        assert!(store.predictions().get(&p.id).await.expect("read").is_some(), "{} stored", p.id);
    }
}

#[tokio::test]
async fn a_refused_prediction_fails_alone_and_the_rest_of_its_write_is_stored() {
    let store = TestContext::new().store().await;
    let account = AccountId::generate();
    let existing = a_prediction(&account);
    store.predictions().insert(&existing).await.expect("first copy stored");
    let writer = store.predictions().group_commit(GATHER);
    let others: Vec<Prediction> = (0..3).map(|_| a_prediction(&account)).collect();

    let (duplicate, rest) =
        tokio::join!(writer.insert(existing.clone()), join_all(others.iter().map(|p| writer.insert(p.clone()))));

    assert!(matches!(&duplicate, Err(e) if e.is_duplicate_key()), "{duplicate:?}");
    assert!(rest.iter().all(Result::is_ok), "{rest:?}");
    for p in &others {
        assert!(store.predictions().get(&p.id).await.expect("read").is_some(), "{} stored", p.id);
    }
}

#[tokio::test]
async fn an_unreachable_database_fails_every_prediction_of_the_write() {
    // Nothing listens on port 1: server selection fails after the store's 5 s timeout.
    let unreachable = Store::connect(
        "mongodb://127.0.0.1:1/?directConnection=true",
        "nowhere",
        "test",
        common::store::commands::Monitoring::Off,
    )
    .await
    .expect("a lazy client");
    let writer = unreachable.predictions().group_commit(GATHER);
    let account = AccountId::generate();

    let results = join_all((0..3).map(|_| writer.insert(a_prediction(&account)))).await;

    assert!(results.iter().all(|r| matches!(r, Err(GroupCommitError::Write(_)))), "{results:?}");
}

#[tokio::test]
async fn a_prediction_whose_request_deadline_passed_while_it_queued_is_not_written() {
    let store = TestContext::new().store().await;
    // A long linger holds the batch past the short deadline of the first request.
    let writer = store.predictions().group_commit(GATHER);
    let account = AccountId::generate();
    let (late, on_time) = (a_prediction(&account), a_prediction(&account));
    let soon = tokio::time::Instant::now() + Duration::from_millis(50);
    let later = tokio::time::Instant::now() + Duration::from_secs(30);

    // Each insert is called within its request's deadline, as a create's is.
    let (late_result, on_time_result) = tokio::join!(
        common::deadline::within(Deadline::at(soon), async { writer.insert(late.clone()).await }),
        common::deadline::within(Deadline::at(later), async { writer.insert(on_time.clone()).await }),
    );

    assert!(matches!(late_result, Err(GroupCommitError::Abandoned)), "{late_result:?}");
    assert!(on_time_result.is_ok(), "{on_time_result:?}");
    assert!(store.predictions().get(&late.id).await.expect("read").is_none(), "the late one was not written");
    assert!(store.predictions().get(&on_time.id).await.expect("read").is_some());
}

#[tokio::test]
async fn concurrent_creates_are_each_stored_and_answered_with_their_own_prediction() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    system.register_models_only().await;
    let prompts: Vec<String> = (0..40).map(|i| format!("concurrent {i}")).collect();
    let system = &system;

    let created = join_all(prompts.iter().map(|prompt| async move {
        let response =
            system.post_json("/v1/models/demo/echo/predictions", &json!({"input": {"prompt": prompt}})).await;
        assert_eq!(response.status(), 201, "{prompt}");
        response.json_body().await
    }))
    .await;

    let ids: HashSet<&str> = created.iter().filter_map(|p| p["id"].as_str()).collect();
    assert_eq!(ids.len(), prompts.len(), "one distinct prediction per create");
    for (prompt, answer) in prompts.iter().zip(&created) {
        assert_eq!(answer["input"]["prompt"], prompt.as_str(), "each create answered with its own prediction");
        let stored = system.get(&format!("/v1/predictions/{}", answer["id"].as_str().expect("id"))).await;
        assert_eq!(stored.status(), 200);
        assert_eq!(stored.json_body().await["input"]["prompt"], prompt.as_str());
    }
}
