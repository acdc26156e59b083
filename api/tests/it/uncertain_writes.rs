//! Writes whose outcome is unknown are settled by reading, not guessing: MongoDB's answer to a
//! write is lost after the write applied (a primary stepping down, a cut connection), or says
//! its wait for the majority timed out (code 64) though it applied on the primary, while a
//! majority read does not see it yet. The stand-in does none of this by itself, so a
//! wire-level proxy ([`mongo_faults`]) drops the answer, adds the error, or answers the
//! lagging read, as `failCommand` and a lagging replica would on a real server.

use std::time::Duration;

use mongo_faults::{Fault, MongoFaults};
use reqwest::Method;
use serde_json::{Value, json};
use testkit::{eventually, infra};

use crate::harness::{JsonBody, Options, System};

/// A system whose services reach MongoDB through a fault proxy.
async fn system_behind_faults(runner: bool) -> (System, MongoFaults) {
    let real = infra().mongodb_uri.clone();
    let faults = MongoFaults::start(testkit::host_port(&real)).await.expect("proxy");
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
    faults.inject(1, Fault::LoseReply, |c| {
        c.name == "update" && c.collection == "predictions" && c.mentions("usage.writer")
    });
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

fn create(system: &System, key: &str) -> reqwest::RequestBuilder {
    system
        .request(Method::POST, "/v1/predictions")
        .header("idempotency-key", key)
        .json(&json!({"version": "demo/echo", "input": {"prompt": key}}))
}

#[tokio::test]
async fn a_create_whose_write_applied_but_whose_answer_was_lost_is_made_once_and_its_key_replays_it() {
    let (system, faults) = system_behind_faults(true).await;
    faults.inject(1, Fault::LoseReply, |c| c.name == "insert" && c.collection == "predictions");
    let created = create(&system, "lost").send().await.expect("sent");
    assert_eq!(faults.injected().len(), 1, "the insert's answer was dropped");
    assert_eq!(created.status(), 201, "settled as stored: {}", created.text().await.unwrap_or_default());
    let created: Value = created.json().await.expect("json");
    let id = created["id"].as_str().expect("id");
    assert_eq!(system.wait_for_terminal(id, Duration::from_secs(30)).await["status"], "succeeded");

    let again = create(&system, "lost").send().await.expect("sent");
    assert_eq!(again.status(), 201);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.json_body().await["id"], id);
    let listed = system.get("/v1/predictions").await.json_body().await;
    assert_eq!(listed["results"].as_array().expect("results").len(), 1, "made once: {listed}");
}

#[tokio::test]
async fn a_create_whose_key_could_not_be_claimed_is_not_made_and_its_retry_is_made_once() {
    let (system, faults) = system_behind_faults(true).await;
    // Every insert of the claim fails before the server sees it (HostUnreachable): the claim is
    // never stored, so the create must not go on without it.
    faults.inject(3, Fault::Error { code: 6 }, |c| c.name == "insert" && c.collection == "idempotency_keys");
    let first = create(&system, "unclaimed").send().await.expect("sent");
    assert_eq!(faults.injected().len(), 3, "every try of the claim failed");
    assert_eq!(first.status(), 503, "told to retry: {}", first.text().await.unwrap_or_default());
    // Its retries make one prediction, which the key replays from then on.
    let made = create(&system, "unclaimed").send().await.expect("sent");
    assert_eq!(made.status(), 201);
    let id = made.json_body().await["id"].clone();
    let again = create(&system, "unclaimed").send().await.expect("sent");
    assert_eq!((again.status().as_u16(), again.json_body().await["id"].clone()), (201, id));
    let listed = system.get("/v1/predictions").await.json_body().await;
    assert_eq!(listed["results"].as_array().expect("results").len(), 1, "made once: {listed}");
}

#[tokio::test]
async fn a_key_whose_prediction_was_never_stored_is_taken_over_once_its_claim_is_stale() {
    use common::domain::PredictionId;
    // Past the request deadline (1 s here) and a margin of 5 s, the request that claimed a key
    // stores nothing any more.
    const STALE_CLAIM_MS: i64 = 6_000;
    let env = vec![("API_REQUEST_DEADLINE_SECONDS", "1".to_owned())];
    let system = System::start_with(Options { runner: true, notifier: false, env }).await;
    let store = system.ctx.store().await;
    let account = store.accounts().find_by_name("test-account").await.expect("read").expect("the account");
    // A create claimed the key, then could tell neither whether its prediction was stored nor
    // release the key: the claim names a prediction that does not exist.
    let now = bson::DateTime::now().timestamp_millis();
    let claim = |age_ms: i64, key: &str| {
        bson::doc! {
            "_id": format!("{}:{key}", account.id), "prediction_id": PredictionId::generate().as_str(),
            "created_at": bson::DateTime::from_millis(now - age_ms),
            "expires_at": bson::DateTime::from_millis(now - age_ms + 24 * 3600 * 1000),
        }
    };
    let keys = store.database().collection::<bson::Document>("idempotency_keys");
    keys.insert_one(claim(STALE_CLAIM_MS + 1_000, "stale")).await.expect("a stale claim");
    keys.insert_one(claim(1_000, "fresh")).await.expect("a fresh claim");

    // A fresh claim may be a create still storing: the retry is told to come back.
    assert_eq!(create(&system, "fresh").send().await.expect("sent").status(), 409);
    // A stale one is taken over: the create is made, once, and the key then replays it.
    let made = create(&system, "stale").send().await.expect("sent");
    assert_eq!(made.status(), 201);
    assert!(made.headers().get("idempotent-replayed").is_none(), "a new prediction");
    let id = made.json_body().await["id"].clone();
    let replayed = create(&system, "stale").send().await.expect("sent");
    assert_eq!((replayed.status().as_u16(), replayed.json_body().await["id"].clone()), (201, id));
}

#[tokio::test]
async fn a_result_whose_write_fails_is_stored_again_without_running_the_model_again() {
    let real = infra().mongodb_uri.clone();
    let faults = MongoFaults::start(testkit::host_port(&real)).await.expect("proxy");
    let metrics = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("address").to_string()
    };
    let env = vec![("MONGODB_URI", faults.uri(&real)), ("RUNNER_METRICS_BIND", metrics.clone())];
    let system = System::start_with(Options { runner: true, notifier: false, env }).await;
    // The final write (the one that sets `completed_at`) is refused three times over, with a
    // code no write retries.
    faults.inject(3, Fault::Error { code: 1 }, |c| {
        c.name == "update" && c.collection == "predictions" && c.mentions("completed_at")
    });
    let done = system.run("demo/echo", json!({"prompt": "once"})).await;
    assert_eq!((done["status"].clone(), done["output"].clone()), (json!("succeeded"), json!("once")));
    assert_eq!(faults.injected().len(), 3, "the result's write failed three times");
    let text = system.http().get(format!("http://{metrics}/metrics")).send().await.expect("metrics").text().await;
    let runs = text.expect("text");
    assert!(
        runs.contains(r#"runner_model_run_duration_seconds_count{model="demo/echo",outcome="succeeded"} 1"#),
        "the model ran once: {runs}"
    );
}

#[tokio::test]
async fn an_upload_whose_record_is_unconfirmed_keeps_its_bytes_though_a_majority_read_misses_it() {
    use std::sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    };
    let (system, faults) = system_behind_faults(false).await;
    // The record's insert applies on the primary, and its answer says its wait for the
    // majority timed out (code 64); the next majority read of the records, as one that lags
    // behind the primary, does not see it yet.
    let inserted = Arc::new(AtomicBool::new(false));
    let seen = inserted.clone();
    faults.inject(1, Fault::Unconfirmed, move |c| {
        let it = c.name == "insert" && c.collection == "file_records";
        seen.fetch_or(it, Ordering::AcqRel);
        it
    });
    let lagging = inserted.clone();
    faults.inject(1, Fault::Answer(Vec::new()), move |c| {
        lagging.load(Ordering::Acquire)
            && c.name == "find"
            && c.collection == "file_records"
            && c.read_concern() != Some("local")
    });
    let bytes: Vec<u8> = (0..50_000).map(|i| (i % 251) as u8).collect();
    let part = reqwest::multipart::Part::bytes(bytes.clone()).file_name("kept.bin");
    let form = reqwest::multipart::Form::new().part("content", part);
    let response = system.request(Method::POST, "/v1/files").multipart(form).send().await.expect("sent");
    let status = response.status();
    let file = response.json_body().await;
    assert_eq!(status, 201, "settled as stored: {file}");
    assert_eq!(faults.injected().first(), Some(&("insert".to_owned(), "file_records".to_owned())));
    // Its record and its bytes were kept (read directly: the proxy's lagging read still waits
    // for a majority read of the records).
    let id = common::domain::FileId::parse(file["id"].as_str().expect("id")).expect("a file id");
    let files = system.files().await;
    let record = files.get(&id).await.expect("read").expect("its record is stored");
    assert_eq!(files.read_all(&record).await.expect("its bytes are kept"), bytes);
}

#[tokio::test]
async fn a_stale_claim_whose_prediction_a_majority_read_misses_is_replayed_not_taken_over() {
    use common::domain::PredictionId;
    let real = infra().mongodb_uri.clone();
    let faults = MongoFaults::start(testkit::host_port(&real)).await.expect("proxy");
    // Past the request deadline (1 s here) and a margin of 5 s, a claim is stale.
    let env = vec![("MONGODB_URI", faults.uri(&real)), ("API_REQUEST_DEADLINE_SECONDS", "1".to_owned())];
    let system = System::start_with(Options { runner: true, notifier: false, env }).await;
    let made = create(&system, "made").send().await.expect("sent");
    assert_eq!(made.status(), 201);
    let id = made.json_body().await["id"].as_str().expect("id").to_owned();
    // A claim old enough to be stale, whose create stored its prediction on the primary and
    // then could tell nothing (its majority acknowledgment timed out): the prediction is there,
    // and the next majority read of it, lagging behind the primary, does not see it.
    let store = system.ctx.store().await;
    let account = store.accounts().find_by_name("test-account").await.expect("read").expect("the account");
    let now = bson::DateTime::now().timestamp_millis();
    let keys = store.database().collection::<bson::Document>("idempotency_keys");
    let claim = bson::doc! {
        "_id": format!("{}:stale", account.id), "prediction_id": PredictionId::parse(&id).expect("id").as_str(),
        "created_at": bson::DateTime::from_millis(now - 60_000),
        "expires_at": bson::DateTime::from_millis(now + 24 * 3600 * 1000),
    };
    keys.insert_one(claim).await.expect("the claim");
    faults.inject(1, Fault::Answer(Vec::new()), |c| c.collection == "predictions" && c.lagging_read_by_id().is_some());

    // Taking the key over would make a second prediction and a second job.
    let again = create(&system, "stale").send().await.expect("sent");
    assert_eq!(again.status(), 201);
    assert_eq!(again.headers().get("idempotent-replayed").map(|v| v.as_bytes()), Some(&b"true"[..]), "replayed");
    assert_eq!(again.json_body().await["id"], id.as_str());
    let listed = system.get("/v1/predictions").await.json_body().await;
    assert_eq!(listed["results"].as_array().expect("results").len(), 1, "made once: {listed}");
}
