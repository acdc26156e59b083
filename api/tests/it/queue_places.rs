//! The queue a waiting prediction sees: its position under the scheduler's rules (its own
//! lane in order, other lanes' turns between), falling as jobs start, and the estimate; and the
//! tickets behind it, taken in blocks by a busy lane.

use std::time::Duration;

use serde_json::{Value, json};
use testkit::eventually;

use api::state::tickets::{HOLD, TicketDesk};
use common::{
    domain::AccountId,
    lane::Lane,
    samples,
    store::{Batching, commands::query_shapes},
};

use crate::harness::{JsonBody, Options, System};

async fn sleep_of(system: &System, key: &str, seconds: f64) -> String {
    let created = system
        .with_key(reqwest::Method::POST, "/v1/models/demo/sleep/predictions", key)
        .json(&json!({"input": {"seconds": seconds}}))
        .send()
        .await
        .expect("sent")
        .json_body()
        .await;
    created["id"].as_str().expect("id").to_owned()
}

async fn queue_of(system: &System, id: &str) -> Value {
    system.get(&format!("/v1/predictions/{id}")).await.json_body().await["queue"].clone()
}

#[tokio::test]
async fn queued_predictions_stand_one_to_ten_in_order_and_move_up_as_jobs_start() {
    let system = System::start_with(Options { runner: false, notifier: false, ..Options::default() }).await;
    system.register_models_only().await;
    let key = system.admin_key.clone();
    let mut ids = Vec::new();
    for _ in 0..10 {
        ids.push(sleep_of(&system, &key, 0.3).await);
    }
    for (i, id) in ids.iter().enumerate() {
        let queue = queue_of(&system, id).await;
        assert_eq!(queue["position"], i as u64 + 1, "{id}: {queue}");
        assert_eq!(queue["estimated_start_at"], Value::Null, "nothing has run yet");
    }
    let replicate = system.get(&format!("/replicate/v1/predictions/{}", ids[2])).await.json_body().await;
    assert_eq!(replicate["queue"]["position"], 3, "the Replicate surface carries it too");

    // Another account's three jobs take their turns between this account's.
    let other = system.bootstrap_account("other").await;
    for _ in 0..3 {
        sleep_of(&system, &other, 0.3).await;
    }
    // The model's part of the queue (the other lanes) is reused for up to a second.
    tokio::time::sleep(api::state::queue_places::MODEL_QUEUE_TTL).await;
    assert_eq!(queue_of(&system, &ids[0]).await["position"], 1);
    assert_eq!(queue_of(&system, &ids[1]).await["position"], 3, "one turn of the other lane first");
    assert_eq!(queue_of(&system, &ids[4]).await["position"], 1 + 4 + 3);

    // Runners start them: the last one moves up, gets an estimate, and loses its queue once it runs.
    system.start_runner();
    let last = ids.last().expect("ten").clone();
    let moved = eventually(Duration::from_secs(30), || async {
        let queue = queue_of(&system, &last).await;
        (queue.is_object() && queue["position"].as_u64().is_some_and(|p| p < 13)).then_some(queue)
    })
    .await
    .expect("the position falls as jobs start");
    assert!(moved["estimated_start_at"].is_string() || moved["estimated_start_at"].is_null(), "{moved}");
    let done = system.wait_for_terminal(&last, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "succeeded");
    assert_eq!(queue_of(&system, &last).await, Value::Null, "an ended prediction has no queue");
}

#[tokio::test]
async fn a_prediction_canceled_while_waiting_gives_its_place_to_those_behind_it() {
    let system = System::start_with(Options { runner: false, notifier: false, ..Options::default() }).await;
    system.register_models_only().await;
    let key = system.admin_key.clone();
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(sleep_of(&system, &key, 0.3).await);
    }
    assert_eq!(queue_of(&system, &ids[4]).await["position"], 5);
    let canceled = system.post_json(&format!("/v1/predictions/{}/cancel", ids[1]), &json!({})).await;
    assert_eq!(canceled.status(), 200);
    assert_eq!(queue_of(&system, &ids[0]).await["position"], 1, "the one ahead of it keeps its place");
    assert_eq!(queue_of(&system, &ids[4]).await["position"], 4, "those behind it move up");
    assert_eq!(queue_of(&system, &ids[5]).await["position"], 5);

    system.start_runner();
    let done = system.wait_for_terminal(&ids[5], Duration::from_secs(60)).await;
    assert_eq!(done["status"], "succeeded");
}

/// Many waiting predictions, each read: their places come from their lane's tickets and the
/// model's running count and run times from the runners' records, and no query goes over the
/// predictions by status (a count grows with the queue, and under load the queue grows with
/// the cost of the reads: the overload that would not end).
#[tokio::test]
async fn a_waiting_predictions_place_costs_no_query_that_grows_with_the_queue() {
    let env = vec![("MONGODB_QUERY_SHAPES", "true".into())];
    let system = System::start_with(Options { runner: false, notifier: false, env }).await;
    system.register_models_only().await;
    let key = system.admin_key.clone();
    let mut ids = Vec::new();
    for _ in 0..40 {
        ids.push(sleep_of(&system, &key, 0.3).await);
    }
    for (i, id) in ids.iter().enumerate().rev() {
        assert_eq!(queue_of(&system, id).await["position"], i as u64 + 1);
    }
    let over_predictions: Vec<_> = query_shapes(&system.ctx.database)
        .into_iter()
        .filter(|shape| shape.collection == "predictions" && shape.filter.iter().any(|f| f == "status"))
        .collect();
    assert!(over_predictions.is_empty(), "queries over the waiting predictions: {over_predictions:#?}");

    // Every read of predictions and lanes made for these requests stops on the server at its
    // time limit (`maxTimeMS`).
    assert_eq!(system.get("/v1/predictions?limit=5").await.status(), 200);
    let unlimited: Vec<_> = query_shapes(&system.ctx.database)
        .into_iter()
        .filter(|shape| matches!(shape.collection.as_str(), "predictions" | "queue_lanes"))
        .filter(|shape| matches!(shape.command.as_str(), "find" | "aggregate") && !shape.time_limited)
        .collect();
    assert!(unlimited.is_empty(), "reads without a time limit: {unlimited:#?}");
}

#[tokio::test]
async fn the_estimate_comes_from_recent_runs_and_busy_slots() {
    let system = System::start_with(Options {
        notifier: false,
        env: vec![("RUNNER_CONCURRENCY", "1".into())],
        ..Options::default()
    })
    .await;
    let key = system.admin_key.clone();
    let first = sleep_of(&system, &key, 0.2).await;
    system.wait_for_terminal(&first, Duration::from_secs(20)).await;
    let running = sleep_of(&system, &key, 8.0).await;
    eventually(Duration::from_secs(10), || async {
        let p = system.get(&format!("/v1/predictions/{running}")).await.json_body().await;
        (p["status"] == "processing").then_some(())
    })
    .await
    .expect("the long one runs");
    let waiting = sleep_of(&system, &key, 0.2).await;
    // The runner reports what it runs within a second of a change, and the api reads the
    // runners' records every 2 s.
    let queue = eventually(Duration::from_secs(5), || async {
        let queue = queue_of(&system, &waiting).await;
        queue["estimated_start_at"].is_string().then_some(queue)
    })
    .await
    .expect("an estimate once the runner reported its run");
    assert_eq!(queue["position"], 1);
    let at =
        chrono::DateTime::parse_from_rfc3339(queue["estimated_start_at"].as_str().expect("an estimate")).expect("time");
    let ahead = at.signed_duration_since(chrono::Utc::now());
    // Half of the 0.2 s average run from when the get answered: about now.
    assert!(ahead > chrono::Duration::seconds(-2) && ahead < chrono::Duration::seconds(2), "{ahead}");
}

#[tokio::test]
async fn past_the_queue_bound_a_create_is_refused_with_retry_after_and_another_account_still_gets_in() {
    let env = vec![("API_MAX_QUEUE_SECONDS", "1".to_owned())];
    let system = System::start_with(Options { env, notifier: false, ..Options::default() }).await;
    let key = system.admin_key.clone();
    let create = |key: String| {
        let request = system
            .with_key(reqwest::Method::POST, "/v1/models/demo/sleep/predictions", &key)
            .json(&json!({"input": {"seconds": 0.2}}));
        async move { request.send().await.expect("sent") }
    };
    // The runner starts them at up to 20 a second (4 slots, 0.2 s each); the api learns the
    // rate from the lanes' start marks as it reads them, over at least 2 s of readings (25
    // creates 0.1 s apart take longer than that).
    let mut accepted = Vec::new();
    for _ in 0..25 {
        let created = create(key.clone()).await;
        assert_eq!(created.status(), 201, "below the bound");
        accepted.push(created.json_body().await["id"].as_str().expect("id").to_owned());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A burst: past about a second of waiting, each create is refused at once. The 100 are
    // sent at once, so they find the same last reading of the lanes: the api counts what it
    // admitted since. (Sent one after another, a machine answering fewer than 20 creates a
    // second would never fill the queue: the test would count on the machine's speed.)
    let mut refused = 0;
    let burst = futures::future::join_all((0..100).map(|_| create(key.clone()))).await;
    for answer in burst {
        match answer.status().as_u16() {
            201 => accepted.push(answer.json_body().await["id"].as_str().expect("id").to_owned()),
            503 => {
                let retry_after: u64 =
                    answer.headers()["retry-after"].to_str().expect("ascii").parse().expect("seconds");
                assert!(retry_after >= 1);
                assert_eq!(answer.headers()["content-type"], "application/problem+json");
                refused += 1;
            }
            other => panic!("a create answered {other}"),
        }
    }
    assert!(refused > 0, "a burst of 100 against a queue that starts 20 a second is refused in part");
    assert!(accepted.len() < 125);

    // Another account's lane is empty: it starts on its first turn, so it gets in.
    let other = system.bootstrap_account("other").await;
    assert_eq!(create(other).await.status(), 201, "the other account waits for one turn only");

    for id in &accepted {
        let done = system.wait_for_terminal(id, Duration::from_secs(60)).await;
        assert_eq!(done["status"], "succeeded", "{id}: nothing accepted is lost");
    }
}

/// Sets lane `of`'s last write `ago` back, as if it had been idle since.
async fn idle_for(system: &System, of: &str, ago: Duration, also: bson::Document) {
    let store = system.ctx.store().await;
    let p = store.predictions().get(&common::domain::PredictionId::parse(of).expect("id")).await.expect("read");
    let lane = common::lane::Lane::of(&p.expect("stored"));
    let at = bson::DateTime::from_millis(bson::DateTime::now().timestamp_millis() - ago.as_millis() as i64);
    let mut set = bson::doc! { "touched_at": at };
    set.extend(also);
    let lanes = store.database().collection::<bson::Document>("queue_lanes");
    lanes.update_one(bson::doc! { "_id": lane.store_key() }, bson::doc! { "$set": set }).await.expect("set");
}

/// Waits until the lane of prediction `of` has given out exactly `tickets`: no block of it is
/// held by the api any more (see `api::state::tickets`).
async fn tickets_settled(system: &System, of: &str, tickets: i64) {
    let store = system.ctx.store().await;
    let p = store.predictions().get(&common::domain::PredictionId::parse(of).expect("id")).await.expect("read");
    let lane = common::lane::Lane::of(&p.expect("stored"));
    let settled = eventually(Duration::from_secs(30), || async {
        let taken = store.queue_lanes().get(&lane).await.expect("read").map(|l| l.taken);
        (taken == Some(tickets)).then_some(())
    })
    .await;
    assert!(settled.is_some(), "the lane's held tickets were not given back");
}

async fn lane_count(system: &System) -> u64 {
    let lanes = system.ctx.store().await.database().collection::<bson::Document>("queue_lanes");
    lanes.count_documents(bson::doc! {}).await.expect("counted")
}

/// A lane of a new account `name` with nothing in it (its one prediction canceled), unused
/// for `unused`.
async fn empty_lane(system: &System, name: &str, unused: Duration) {
    let key = system.bootstrap_account(name).await;
    let gone = sleep_of(system, &key, 0.3).await;
    let canceled = system.with_key(reqwest::Method::POST, &format!("/v1/predictions/{gone}/cancel"), &key).send().await;
    assert_eq!(canceled.expect("sent").status(), 200);
    idle_for(system, &gone, unused, bson::doc! {}).await;
}

/// The runners' retention sweep over the system's store.
async fn sweeper(system: &System) -> runner::retention::Sweeper {
    let hour = Duration::from_secs(3600);
    runner::retention::Sweeper::new(system.ctx.store().await, system.files().await, hour, hour)
}

#[tokio::test]
async fn a_lane_that_lost_give_backs_is_recounted_once_idle_and_a_lane_unused_for_an_hour_is_removed() {
    let system = System::start_with(Options { runner: false, notifier: false, ..Options::default() }).await;
    system.register_models_only().await;
    let key = system.admin_key.clone();
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(sleep_of(&system, &key, 0.3).await);
    }
    for i in [1, 3] {
        let canceled = system.post_json(&format!("/v1/predictions/{}/cancel", ids[i]), &json!({})).await;
        assert_eq!(canceled.status(), 200);
    }
    // The six came quickly: the api may hold a block of the lane's tickets, given back within
    // a quarter of a second (a write to the lane); the lane is idle only after that.
    tickets_settled(&system, &ids[0], 6).await;
    // Their give-backs are lost (as if written by a process killed before them), and the lane
    // is left alone for three minutes.
    idle_for(&system, &ids[0], Duration::from_secs(180), bson::doc! { "skipped": [] }).await;
    tokio::time::sleep(api::state::queue_places::MODEL_QUEUE_TTL).await;
    assert_eq!(queue_of(&system, &ids[5]).await["position"], 6, "the canceled two still count");

    // Another account's lane, empty (its one prediction canceled) and unused for two hours,
    // and a third's, unused as long but with a prediction waiting.
    empty_lane(&system, "other", Duration::from_secs(7200)).await;
    let third = system.bootstrap_account("third").await;
    let waits = sleep_of(&system, &third, 0.3).await;
    idle_for(&system, &waits, Duration::from_secs(7200), bson::doc! {}).await;
    assert_eq!(lane_count(&system).await, 3);

    let tended = sweeper(&system).await.tend_lanes().await;
    assert_eq!(tended.failed, 0, "{tended:?}");
    assert_eq!(lane_count(&system).await, 2, "the empty lane unused for two hours is removed, the third's kept");
    tokio::time::sleep(api::state::queue_places::MODEL_QUEUE_TTL).await;
    let store = system.ctx.store().await;
    let first = store.predictions().get(&common::domain::PredictionId::parse(&ids[0]).expect("id")).await;
    let lane = common::lane::Lane::of(&first.expect("read").expect("stored"));
    let counters = store.queue_lanes().get(&lane).await.expect("read").expect("kept: four wait in it");
    assert_eq!(counters.waiting(), 4, "recounted: {counters:?}");
    // The first, third and fifth wait ahead of the sixth, and the third account's one takes
    // its turn between.
    assert_eq!(queue_of(&system, &ids[5]).await["position"], 3 + 1 + 1);
}

#[tokio::test]
async fn lanes_that_need_nothing_do_not_keep_the_others_from_the_sweep() {
    let system = System::start_with(Options { runner: false, notifier: false, ..Options::default() }).await;
    system.register_models_only().await;
    // The longest idle lane has a prediction waiting (a version no runner serves, say): it is
    // kept and needs no correction, pass after pass.
    let waiting = system.bootstrap_account("waiting").await;
    let waits = sleep_of(&system, &waiting, 0.3).await;
    idle_for(&system, &waits, Duration::from_secs(7300), bson::doc! {}).await;
    // Behind it, an empty lane unused for two hours.
    empty_lane(&system, "other", Duration::from_secs(7200)).await;
    assert_eq!(lane_count(&system).await, 2);

    // One lane a pass: the first pass tends the waiting one, the next must reach the other.
    let sweeper = sweeper(&system).await.with_lanes_per_pass(1);
    for _ in 0..2 {
        let tended = sweeper.tend_lanes().await;
        assert_eq!(tended.failed, 0, "{tended:?}");
    }
    assert_eq!(lane_count(&system).await, 1, "the empty lane was reached and removed, the waiting one kept");
}

/// A lane that takes tickets one create at a time, quickly, takes them in blocks (far fewer
/// writes than tickets) and hands them out in order; once a block has been held for the hold
/// time, what it did not hand out goes back, so the lane's counter ends at the last ticket
/// given and the next one follows on.
#[tokio::test]
async fn a_busy_lane_takes_its_tickets_in_blocks_and_gives_back_the_rest() {
    let store = testkit::TestContext::new().store().await;
    let batching = Batching { linger: Duration::ZERO, max_batch: 64, max_in_flight: 4 };
    let desk = TicketDesk::start(store.queue_lanes(), batching);
    let p = samples::starting_prediction(AccountId::generate(), "demo/sleep".parse().expect("model"), json!({}));
    let writes = || store.command_counts().snapshot().get("findAndModify").copied().unwrap_or(0);
    let before = writes();
    let mut tickets = Vec::new();
    for _ in 0..40 {
        tickets.push(desk.take(&p).await.expect("a ticket"));
    }
    let taken_with = writes() - before;
    assert_eq!(tickets, (1..=40).collect::<Vec<i64>>(), "in order, none twice, none missing");
    assert!(taken_with <= 20, "{taken_with} writes for 40 tickets taken one after another");

    let lane = Lane::of(&p);
    let settled = eventually(HOLD * 120, || async {
        let taken = store.queue_lanes().get(&lane).await.expect("read").expect("the lane").taken;
        (taken == 40).then_some(taken)
    })
    .await;
    assert_eq!(settled, Some(40), "the held tickets not handed out went back");
    assert_eq!(desk.take(&p).await.expect("a ticket"), 41);
}
