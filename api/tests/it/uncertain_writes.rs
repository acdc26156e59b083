//! Writes whose outcome is unknown are settled by reading, not guessing: MongoDB's answer to a
//! write is lost after the write applied (a primary stepping down, a cut connection), which
//! the stand-in never does by itself, so a wire-level proxy
//! ([`common::testkit::mongo_faults`]) drops it, as `failCommand` would on a real server.

use std::time::Duration;

use common::testkit::{
    eventually, infra,
    mongo_faults::{Fault, MongoFaults},
};
use reqwest::Method;
use serde_json::{Value, json};

use crate::harness::{JsonBody, Options, System};

/// A system whose services reach MongoDB through a fault proxy.
async fn system_behind_faults(runner: bool) -> (System, MongoFaults) {
    let real = infra().mongodb_uri.clone();
    let faults = MongoFaults::start(common::testkit::host_port(&real)).await.expect("proxy");
    let env = vec![("MONGODB_URI", faults.uri(&real))];
    (System::start_with(Options { runner, notifier: false, env }).await, faults)
}

/// The account's succeeded predictions in its usage, once they reach `expected` (or what
/// they are after 20 s).
async fn succeeded_in_usage(system: &System, expected: i64) -> i64 {
    let read = || async {
        let body: Value = system.request(Method::GET, "/v1/usage").send().await.ok()?.json_body().await;
        body["totals"]["count"]["succeeded"].as_i64()
    };
    match eventually(Duration::from_secs(20), || async { read().await.filter(|n| *n == expected) }).await {
        Some(n) => n,
        None => read().await.unwrap_or(-1),
    }
}

#[tokio::test]
async fn a_usage_claim_whose_answer_was_lost_is_counted_once_with_the_writers_next_batch() {
    let (system, faults) = system_behind_faults(true).await;
    // The ledger's claim of its first batch applies, and its answer is lost.
    faults.inject(1, Fault::LoseReply, |c| c.name == "update" && c.collection == "predictions" && c.mentions("usage.writer"));
    let first = system.run("demo/echo", json!({"prompt": "first"})).await;
    assert_eq!(first["status"], "succeeded");
    let dropped = eventually(Duration::from_secs(10), || async { (faults.injected().len() == 1).then_some(()) });
    assert!(dropped.await.is_some(), "the claim's answer was dropped");
    // The writer's next batch goes into the same totals, under a higher number.
    let second = system.run("demo/echo", json!({"prompt": "second"})).await;
    assert_eq!(second["status"], "succeeded");
    // Counted once each, well before the sweep (30 s after they ended) would look at them.
    assert_eq!(succeeded_in_usage(&system, 2).await, 2, "both predictions counted, once");
}
