//! The runner's last state change: written without reading the prediction back when nothing
//! changed it since the runner's own last write, and never over a change it did not make;
//! results that are ready together share one `update` command (`runner::group_update::GroupUpdate`),
//! and each runner still learns whether its own was applied.

use std::time::Duration;

use bson::doc;
use common::{
    domain::{Prediction, PredictionStatus},
    store::{Batching, ConditionalUpdate, Predictions, Store},
};
use futures::future::join_all;
use runner::group_update::{GroupUpdate, GroupUpdateError};
use serde_json::json;

use crate::fixture::Fixture;

#[tokio::test]
async fn a_result_is_written_only_over_the_change_the_runner_last_made() {
    let fixture = Fixture::new(&[]).await;
    let p = fixture.store_prediction("demo/echo", json!({"prompt": "x"}), Duration::from_secs(60)).await;
    let predictions = fixture.store.predictions();
    let processing = predictions
        .transition(&p.id, PredictionStatus::Processing, doc! {})
        .await
        .expect("write")
        .expect("it was starting");
    let (done, seq) = (PredictionStatus::Succeeded, processing.seq);

    let stale = predictions.transition_at_seq(&p.id, PredictionStatus::Processing, seq - 1, done, doc! {}).await;
    assert!(!stale.expect("write"), "an older sequence does not match");
    assert_eq!(fixture.current(&p.id).await.status, PredictionStatus::Processing);

    let written =
        predictions.transition_at_seq(&p.id, PredictionStatus::Processing, seq, done, doc! {"output": "x"}).await;
    assert!(written.expect("write"));
    let stored = fixture.current(&p.id).await;
    assert_eq!(
        (stored.status, stored.seq, stored.output.as_ref().and_then(serde_json::Value::as_str)),
        (done, seq + 1, Some("x"))
    );

    let again = predictions.transition_at_seq(&p.id, PredictionStatus::Processing, seq + 1, done, doc! {}).await;
    assert!(!again.expect("write"), "a terminal prediction does not change again");
}

#[tokio::test]
async fn the_completed_event_carries_what_was_stored() {
    let fixture = Fixture::new(&[]).await;
    let mut events = fixture.bus.client().subscribe(fixture.bus.subjects().all_events()).await.expect("subscribe");
    fixture.start_runner("demo/echo");
    let p = fixture.create("demo/echo", json!({"prompt": "hi", "repeat": 2})).await;
    let completed = tokio::time::timeout(Duration::from_secs(30), async {
        use futures::StreamExt;
        while let Some(m) = events.next().await {
            let event: serde_json::Value = serde_json::from_slice(&m.payload).expect("json");
            if event["event"] == "completed" && event["prediction_id"] == p.id.as_str() {
                return event;
            }
        }
        panic!("the events ended");
    })
    .await
    .expect("a completed event");
    let stored = fixture.current(&p.id).await;
    assert_eq!(completed["seq"], stored.seq, "the event names the stored change");
    let view = &completed["prediction"];
    assert_eq!(view["status"], "succeeded");
    assert_eq!(view["output"], "hi hi");
    assert_eq!(view["logs"], stored.logs.as_str());
    let stored_completed_at = stored.completed_at.expect("completed").try_to_rfc3339_string().expect("rfc3339");
    assert_eq!(
        view["completed_at"].as_str().map(|t| &t[..19]),
        Some(&stored_completed_at[..19]),
        "the time the runner wrote"
    );
    assert!(view["metrics"]["predict_time"].is_number(), "{view}");
}

/// One write at a time, gathering long enough that every update a test sends joins it.
const TOGETHER: Batching = Batching { linger: Duration::from_millis(300), max_batch: 64, max_in_flight: 1 };

fn update_commands(store: &Store) -> u64 {
    store.command_counts().snapshot().get("update").copied().unwrap_or(0)
}

/// `count` predictions of demo/echo, each moved to `processing`.
async fn processing(fixture: &Fixture, count: usize) -> Vec<Prediction> {
    let mut moved = Vec::new();
    for _ in 0..count {
        let p = fixture.store_prediction("demo/echo", json!({"prompt": "x"}), Duration::from_secs(60)).await;
        let processing = fixture.store.predictions().transition(&p.id, PredictionStatus::Processing, doc! {}).await;
        moved.push(processing.expect("write").expect("it was starting"));
    }
    moved
}

fn success_of(p: &Prediction) -> ConditionalUpdate {
    let change = doc! { "output": format!("done {}", p.id) };
    Predictions::change_at_seq(&p.id, PredictionStatus::Processing, p.seq, PredictionStatus::Succeeded, change)
        .expect("processing may succeed")
}

#[tokio::test]
async fn results_ready_together_share_one_update_command_and_each_is_applied() {
    let fixture = Fixture::new(&[]).await;
    let running = processing(&fixture, 5).await;
    let writer = GroupUpdate::start(fixture.store.predictions().collection(), TOGETHER);
    let before = update_commands(&fixture.store);

    let applied = join_all(running.iter().map(|p| writer.apply(success_of(p)))).await;

    assert!(applied.iter().all(|a| matches!(a, Ok(true))), "{applied:?}");
    assert_eq!(update_commands(&fixture.store) - before, 1, "one update command for the five results");
    for p in &running {
        let stored = fixture.current(&p.id).await;
        assert_eq!((stored.status, stored.seq), (PredictionStatus::Succeeded, p.seq + 1));
        assert_eq!(stored.output, Some(format!("done {}", p.id).into()));
    }
}

#[tokio::test]
async fn in_a_shared_write_a_prediction_moved_meanwhile_is_left_as_it_is_and_its_runner_told() {
    let fixture = Fixture::new(&[]).await;
    let running = processing(&fixture, 3).await;
    let predictions = fixture.store.predictions();
    let canceled = predictions.transition(&running[1].id, PredictionStatus::Canceled, doc! {}).await;
    assert!(canceled.expect("write").is_some(), "canceled while running");
    let writer = GroupUpdate::start(predictions.collection(), TOGETHER);

    let applied = join_all(running.iter().map(|p| writer.apply(success_of(p)))).await;

    let applied: Vec<bool> = applied.into_iter().map(|a| a.expect("written")).collect();
    assert_eq!(applied, [true, false, true], "only the canceled prediction's result is not applied");
    assert_eq!(fixture.current(&running[1].id).await.status, PredictionStatus::Canceled);
    assert_eq!(fixture.current(&running[2].id).await.status, PredictionStatus::Succeeded);
}

#[tokio::test]
async fn an_update_the_database_refuses_fails_alone() {
    let fixture = Fixture::new(&[]).await;
    let running = processing(&fixture, 2).await;
    let writer = GroupUpdate::start(fixture.store.predictions().collection(), TOGETHER);
    // `_id` cannot change: the server refuses this statement, not the command.
    let mut refused = success_of(&running[0]);
    refused.update = doc! { "$set": { "_id": "another id" } };

    let (refused, accepted) = tokio::join!(writer.apply(refused), writer.apply(success_of(&running[1])));

    assert!(matches!(refused, Err(GroupUpdateError::Refused { .. })), "{refused:?}");
    assert!(matches!(accepted, Ok(true)), "{accepted:?}");
    assert_eq!(fixture.current(&running[0].id).await.status, PredictionStatus::Processing);
}

#[tokio::test]
async fn a_job_that_carries_its_prediction_as_created_starts_it_from_that_copy() {
    let fixture = Fixture::new(&[]).await;
    fixture.start_runner("demo/echo");
    let p = fixture.store_prediction("demo/echo", json!({"prompt": "stored"}), Duration::from_secs(60)).await;
    // A copy that differs from the stored prediction only where the runner would show it:
    // what it ran says which one it started from.
    let mut carried = p.clone();
    (carried.input, carried.model_input) = (json!({"prompt": "carried"}), json!({"prompt": "carried"}));

    fixture.bus.publish_job(&carried).await.expect("publish job");

    let done = fixture.wait_until(&p.id, Duration::from_secs(30), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Succeeded);
    assert_eq!(
        done.output.as_ref().and_then(serde_json::Value::as_str),
        Some("carried"),
        "started from the job's copy, nothing read back"
    );
    assert_eq!(done.seq, p.seq + 2, "two changes: processing, then succeeded");
}

#[tokio::test]
async fn a_job_whose_prediction_changed_since_it_was_created_starts_it_as_stored() {
    let fixture = Fixture::new(&[]).await;
    fixture.start_runner("demo/echo");
    let p = fixture.store_prediction("demo/echo", json!({"prompt": "x"}), Duration::from_secs(60)).await;
    let moved = fixture.store.database().collection::<bson::Document>("predictions");
    moved.update_one(doc! { "_id": p.id.as_str() }, doc! { "$inc": { "seq": 5 } }).await.expect("moved");

    fixture.publish_job(&p).await;

    let done = fixture.wait_until(&p.id, Duration::from_secs(30), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Succeeded, "the stale copy's change did not apply; the stored one did");
    assert_eq!(done.seq, p.seq + 5 + 2);
    assert_eq!(done.output.as_ref().and_then(serde_json::Value::as_str), Some("x"));
}

/// A context whose named store a failpoint can aim at, with `count` predictions moved to
/// `processing`, and a writer on that store.
async fn failing_writer(count: usize) -> (Fixture, Store, GroupUpdate, Vec<Prediction>) {
    let fixture = Fixture::new(&[]).await;
    let running = processing(&fixture, count).await;
    let named = fixture.ctx.named_store().await;
    let writer = GroupUpdate::start(named.predictions().collection(), TOGETHER);
    (fixture, named, writer, running)
}

#[tokio::test]
async fn a_shared_write_refused_by_a_stepping_down_primary_is_sent_again_and_applies_once() {
    let (fixture, named, writer, running) = failing_writer(3).await;
    fixture.ctx.fail_commands(&named, &["update"], doc! { "errorCode": 11602 }, 2).await;

    let applied = join_all(running.iter().map(|p| writer.apply(success_of(p)))).await;

    assert!(applied.iter().all(|a| matches!(a, Ok(true))), "{applied:?}");
    for p in &running {
        let stored = fixture.current(&p.id).await;
        assert_eq!((stored.status, stored.seq), (PredictionStatus::Succeeded, p.seq + 1), "applied once");
    }
}

#[tokio::test]
async fn a_shared_write_whose_reply_was_lost_after_it_applied_is_settled_by_reading_each_result() {
    let (fixture, named, writer, running) = failing_writer(3).await;
    // The command applies, then the primary steps down before the write is safe: the retry
    // matches nothing, and only a read tells that every result is stored.
    let lost = doc! { "writeConcernError": { "code": 91, "errmsg": "shutdown in progress" } };
    fixture.ctx.fail_commands(&named, &["update"], lost, 1).await;

    let applied = join_all(running.iter().map(|p| writer.apply(success_of(p)))).await;

    assert!(applied.iter().all(|a| matches!(a, Ok(true))), "each result is known applied: {applied:?}");
    for p in &running {
        assert_eq!(fixture.current(&p.id).await.status, PredictionStatus::Succeeded);
    }
}

#[tokio::test]
async fn results_larger_together_than_a_command_may_be_are_written_in_several_commands() {
    let fixture = Fixture::new(&[]).await;
    let running = processing(&fixture, 40).await;
    let writer = GroupUpdate::start(fixture.store.predictions().collection(), TOGETHER);
    let before = update_commands(&fixture.store);
    let large = "x".repeat(900 * 1024);
    let result_of = |p: &Prediction| {
        let change = doc! { "output": &large };
        Predictions::change_at_seq(&p.id, PredictionStatus::Processing, p.seq, PredictionStatus::Succeeded, change)
            .expect("processing may succeed")
    };

    let applied = join_all(running.iter().map(|p| writer.apply(result_of(p)))).await;

    assert!(applied.iter().all(|a| matches!(a, Ok(true))), "{applied:?}");
    let commands = update_commands(&fixture.store) - before;
    assert!((3..=8).contains(&commands), "36 MB of results in commands under 16 MiB each: {commands}");
    for p in &running {
        assert_eq!(fixture.current(&p.id).await.output.map(|o| o.as_str().map_or(0, str::len)), Some(large.len()));
    }
}
