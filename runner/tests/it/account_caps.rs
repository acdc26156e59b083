//! Concurrency caps per account: held on NATS across every runner, jobs past the cap wait (and
//! other accounts' jobs take the free slots), and a killed runner's slot frees itself.

use std::time::Duration;

use common::{
    crypto::MasterKey,
    domain::{AccountId, Prediction, PredictionStatus},
    store::Account,
};
use serde_json::json;
use testkit::eventually;

use crate::fixture::{Fixture, finished, signal, start_delay};

/// Stores an account capped at `max` running predictions.
async fn capped_account(fixture: &Fixture, max: u32) -> AccountId {
    let master = MasterKey::from_base64(&MasterKey::generate_base64()).expect("key");
    let (account, _) = Account::new(&format!("capped-{}", AccountId::generate()), &master);
    fixture.store.accounts().insert(&account).await.expect("insert");
    assert!(fixture.store.accounts().set_max_concurrency(&account.id, Some(max)).await.expect("cap"));
    account.id
}

/// The bucket of account slots, as the runners made it.
async fn slots_bucket(fixture: &Fixture) -> async_nats::jetstream::kv::Store {
    let bucket = fixture.bus.subjects().account_slots_bucket();
    fixture.bus.jetstream().get_key_value(bucket).await.expect("the runners made the bucket")
}

/// How far apart two runners' stamps of one moment may be. Each runner stamps the database's
/// clock as it last measured it, off by up to half that measure's round trip
/// (`common::store::clock`): on one loaded core (`taskset -c 0`) a job that ended on one
/// runner and the next that started on the other overlapped by their stamps, once, though the
/// second took the account's slot only when the first gave it back.
const STAMP_SKEW_MS: i64 = 250;

/// The most predictions of `done` that ran at the same moment: each with those started no
/// later that were still running [`STAMP_SKEW_MS`] after it started (every job here runs for
/// far longer than that, so a job that truly ran beside it counts).
fn most_at_once(done: &[Prediction]) -> usize {
    let millis = |t: Option<bson::DateTime>| t.map(|t| t.timestamp_millis());
    done.iter()
        .map(|p| {
            let started = millis(p.started_at).expect("started");
            let beside = done.iter().filter(|q| {
                q.id != p.id
                    && millis(q.started_at).is_some_and(|s| s <= started)
                    && millis(q.completed_at).is_some_and(|c| c > started + STAMP_SKEW_MS)
            });
            1 + beside.count()
        })
        .max()
        .unwrap_or(0)
}

#[tokio::test]
async fn an_account_capped_at_two_never_runs_more_than_two_over_two_runners_while_another_fills_the_rest() {
    let fixture = Fixture::new(&[]).await;
    let capped = capped_account(&fixture, 2).await;
    let free = AccountId::generate();
    for _ in 0..2 {
        fixture.start_runner_with("demo/sleep", &[("RUNNER_CONCURRENCY", "4")]);
    }
    // Both runners are up: both announced themselves (each does so just before it consumes),
    // and a probe ran.
    let both = eventually(Duration::from_secs(60), || async {
        let live = fixture.store.runners().live(bson::DateTime::now()).await.ok()?;
        (live.len() == 2).then_some(())
    })
    .await;
    assert!(both.is_some(), "both runners announced themselves");
    fixture.await_consuming("demo/sleep", json!({"seconds": 0})).await;
    let mut of_capped = Vec::new();
    for _ in 0..8 {
        of_capped.push(fixture.create_of(&capped, "demo/sleep", json!({"seconds": 1})).await);
    }
    fixture.await_running(&of_capped, 2).await; // the capped account took its two slots
    let mut of_free = Vec::new();
    for _ in 0..6 {
        of_free.push(fixture.create_of(&free, "demo/sleep", json!({"seconds": 1})).await);
    }
    let of_capped = finished(&fixture, &of_capped).await;
    let of_free = finished(&fixture, &of_free).await;
    assert!(of_capped.iter().chain(&of_free).all(|p| p.status == PredictionStatus::Succeeded), "nothing refused");
    assert_eq!(most_at_once(&of_capped), 2, "the cap holds across both runners, and is used");
    let mut delays: Vec<i64> = of_free.iter().map(start_delay).collect();
    delays.sort_unstable();
    eprintln!("the other account's start delays beside a capped backlog (ms): {delays:?}");
    assert!(delays[5] < 800, "the other account's six jobs take the six free slots at once: {delays:?} ms");
    let first = of_capped.iter().filter_map(|p| p.started_at).min().expect("started");
    let last = of_capped.iter().filter_map(|p| p.completed_at).max().expect("ended");
    let span = last.timestamp_millis() - first.timestamp_millis();
    assert!(span >= 3_900, "eight one-second jobs two at a time take about four seconds, took {span} ms");
}

#[tokio::test]
async fn the_slot_of_a_runner_killed_mid_job_frees_within_the_lease() {
    let lease = runner::scheduler::account_slots::LEASE_FLOOR;
    let fixture = Fixture::new(&[]).await;
    let capped = capped_account(&fixture, 1).await;
    let mut doomed = fixture.runner_process(&[]);
    let long = fixture.create_of(&capped, "demo/sleep", json!({"seconds": 3})).await;
    fixture.wait_until(&long.id, Duration::from_secs(30), |p| p.status == PredictionStatus::Processing).await;
    let kv = slots_bucket(&fixture).await;
    let slot = format!("{capped}.0");
    assert!(kv.get(&slot).await.expect("read").is_some(), "the running job holds the account's one slot");

    doomed.kill().expect("SIGKILL the runner");
    let killed_at = std::time::Instant::now();
    doomed.wait().expect("reap it");
    let freed = eventually(lease * 3, || async { kv.get(&slot).await.ok()?.is_none().then_some(()) }).await;
    assert!(freed.is_some(), "the slot never freed");
    eprintln!("the killed runner's slot freed {} ms after the kill", killed_at.elapsed().as_millis());

    fixture.start_runner("demo/sleep");
    let next = fixture.create_of(&capped, "demo/sleep", json!({"seconds": 0.1})).await;
    for p in [&long, &next] {
        let done = fixture.wait_until(&p.id, Duration::from_secs(60), |p| p.status.is_terminal()).await;
        assert_eq!(done.status, PredictionStatus::Succeeded, "both jobs of the account run after the kill");
    }
}

/// A runner that cannot write for a while (starved of CPU, or cut off while a NATS leader is
/// elected) keeps its account slots: another runner does not start a second job of an
/// account capped at one meanwhile.
#[tokio::test]
async fn a_runner_frozen_past_its_ack_wait_keeps_its_account_slot() {
    let fixture = Fixture::new(&[]).await;
    let capped = capped_account(&fixture, 1).await;
    let mut frozen = fixture.runner_process(&[]);
    let long = fixture.create_of(&capped, "demo/sleep", json!({"seconds": 3})).await;
    fixture.wait_until(&long.id, Duration::from_secs(30), |p| p.status == PredictionStatus::Processing).await;
    fixture.start_runner("demo/sleep");
    let next = fixture.create_of(&capped, "demo/sleep", json!({"seconds": 0.1})).await;

    // Frozen for three ack waits (2 s here): its job is delivered again meanwhile.
    signal(&frozen, "-STOP");
    tokio::time::sleep(Duration::from_secs(6)).await;
    signal(&frozen, "-CONT");

    let done: Vec<Prediction> = {
        let mut done = Vec::new();
        for p in [&long, &next] {
            done.push(fixture.wait_until(&p.id, Duration::from_secs(60), |p| p.status.is_terminal()).await);
        }
        done
    };
    assert!(done.iter().all(|p| p.status == PredictionStatus::Succeeded), "{done:?}");
    assert_eq!(most_at_once(&done), 1, "the account's second job waited for the first: {done:?}");
    frozen.kill().expect("stop the runner");
    frozen.wait().expect("reap it");
}

#[tokio::test]
async fn an_account_without_a_cap_takes_every_slot() {
    let fixture = Fixture::new(&[]).await;
    let master = MasterKey::from_base64(&MasterKey::generate_base64()).expect("key");
    let (account, _) = Account::new("uncapped", &master);
    fixture.store.accounts().insert(&account).await.expect("insert");
    fixture.start_runner_with("demo/sleep", &[("RUNNER_CONCURRENCY", "4")]);
    fixture.await_consuming("demo/sleep", json!({"seconds": 0})).await;
    let mut created = Vec::new();
    for _ in 0..4 {
        created.push(fixture.create_of(&account.id, "demo/sleep", json!({"seconds": 1})).await);
    }
    let done = finished(&fixture, &created).await;
    assert_eq!(most_at_once(&done), 4);
    let kv = slots_bucket(&fixture).await;
    assert!(kv.get(format!("{}.0", account.id)).await.expect("read").is_none(), "no slot is taken for it");
}
