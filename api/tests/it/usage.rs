//! `GET /v1/usage`: what an account ran, counted once per prediction from running totals, as
//! JSON and CSV; bad parameters named; another account's usage apart; a prediction whose
//! writer died before counting it counted once by the sweep; its usage kept when retention
//! removes its data.

use std::time::Duration;

use common::{domain::PredictionStatus, usage::UsageLedger};
use reqwest::Method;
use serde_json::{Value, json};
use testkit::eventually;

use crate::harness::{JsonBody, Options, System};

/// The account's usage by model and status, once its totals reach `expected` predictions.
async fn usage_when_counted(system: &System, key: &str, query: &str, expected: i64) -> Value {
    let counted = eventually(Duration::from_secs(20), || async {
        let body = system.with_key(Method::GET, &format!("/v1/usage{query}"), key).send().await.ok()?.json_body().await;
        let count = &body["totals"]["count"];
        let total = ["succeeded", "failed", "canceled"].iter().map(|s| count[s].as_i64().unwrap_or(0)).sum::<i64>();
        (total == expected).then_some(body)
    })
    .await;
    counted.unwrap_or_else(|| panic!("the usage did not reach {expected} predictions"))
}

fn group<'a>(body: &'a Value, model: &str) -> &'a Value {
    let groups = body["results"][0]["groups"].as_array().expect("groups");
    groups.iter().find(|g| g["model"] == model).unwrap_or_else(|| panic!("no group of {model}: {body}"))
}

#[tokio::test]
async fn an_accounts_predictions_are_counted_once_each_by_model_and_status_in_json_and_csv() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let mut predict_time = 0.0;
    for n in 0..5 {
        let done = system.run("demo/echo", json!({"prompt": format!("hi {n}")})).await;
        assert_eq!(done["status"], "succeeded");
        predict_time += done["metrics"]["predict_time"].as_f64().expect("predict_time");
    }
    for _ in 0..2 {
        assert_eq!(system.run("demo/fail", json!({"message": "no"})).await["status"], "failed");
    }
    let slow = system.post_json("/v1/models/demo/sleep/predictions", &json!({"input": {"seconds": 30}})).await;
    let id = slow.json_body().await["id"].as_str().expect("id").to_owned();
    let canceled = system.post_json(&format!("/v1/predictions/{id}/cancel"), &json!({})).await.json_body().await;
    assert_eq!(canceled["status"], "canceled");
    // Another account's prediction is not this one's usage.
    let other = system.bootstrap_account("other").await;
    let response = system
        .with_key(Method::POST, "/v1/models/demo/echo/predictions", &other)
        .header("prefer", "wait=30")
        .json(&json!({"input": {"prompt": "theirs"}}))
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), 201);

    let body = usage_when_counted(&system, &system.admin_key, "", 8).await;
    assert_eq!(body["bucket"], "day");
    assert_eq!(body["group_by"], json!(["model"]));
    assert_eq!(body["results"].as_array().expect("buckets").len(), 1, "{body}");
    let echo = group(&body, "demo/echo");
    assert_eq!(echo["count"], json!({"succeeded": 5, "failed": 0, "canceled": 0}));
    let summed = echo["predict_time"].as_f64().expect("sum");
    assert!((summed - predict_time).abs() < 0.002, "{summed} against {predict_time}");
    assert_eq!(group(&body, "demo/fail")["count"], json!({"succeeded": 0, "failed": 2, "canceled": 0}));
    assert_eq!(group(&body, "demo/sleep")["count"], json!({"succeeded": 0, "failed": 0, "canceled": 1}));
    assert_eq!(body["totals"]["count"], json!({"succeeded": 5, "failed": 2, "canceled": 1}));
    assert_eq!(usage_when_counted(&system, &other, "", 1).await["totals"]["count"]["succeeded"], 1);

    // The same as CSV.
    let csv = system.request(Method::GET, "/v1/usage").header("accept", "text/csv").send().await.expect("sent");
    assert_eq!(csv.status(), 200);
    assert!(csv.headers()["content-type"].to_str().expect("type").starts_with("text/csv"));
    let csv = csv.text().await.expect("body");
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("bucket_start,bucket_end,model,succeeded,failed,canceled,predict_time,total_time,cost")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let row = |model: &str| rows.iter().find(|r| r[2] == model).unwrap_or_else(|| panic!("no row of {model}: {csv}"));
    assert_eq!(&row("demo/echo")[3..6], ["5", "0", "0"]);
    assert_eq!(&row("demo/fail")[3..6], ["0", "2", "0"]);
    assert_eq!(&row("demo/sleep")[3..6], ["0", "0", "1"]);
    assert_eq!(row("demo/echo")[6].parse::<f64>().expect("number"), echo["predict_time"].as_f64().expect("sum"));

    // For operators, every account's (or one's), from the same totals.
    let env = common::config::Env::from_fn(|k| system.vars.get(k).cloned());
    let config = api::config::ApiConfig::from_env(&env).expect("configuration");
    let every = api::admin::usage(&config, None, None, true).await.expect("usage");
    assert!(every.starts_with("account,bucket_start,bucket_end,model,"), "{every}");
    assert!(every.lines().any(|l| l.starts_with("test-account,") && l.contains(",demo/echo,5,0,0,")), "{every}");
    assert!(every.lines().any(|l| l.starts_with("other,") && l.contains(",demo/echo,1,0,0,")), "{every}");
    let one = api::admin::usage(&config, Some("other"), None, false).await.expect("usage");
    assert!(one.contains("demo/echo") && !one.contains("demo/fail"), "{one}");
    assert!(api::admin::usage(&config, Some("nobody"), None, false).await.is_err());
    assert!(api::admin::usage(&config, None, Some("last week"), false).await.is_err(), "a bad --since");

    // By hour, kind and key.
    let by = system.get("/v1/usage?bucket=hour&group_by=kind,api_key").await.json_body().await;
    assert_eq!(by["results"][0]["groups"][0]["kind"], "prediction");
    assert!(by["results"][0]["groups"][0]["api_key"].as_str().is_some_and(|k| k.starts_with("key_")), "{by}");
}

#[tokio::test]
async fn bad_usage_parameters_are_400_naming_them() {
    let system = System::start_with(Options { runner: false, notifier: false, ..Options::default() }).await;
    for (query, field) in [
        ("bucket=week", "bucket"),
        ("group_by=model,colour", "group_by"),
        ("start=yesterday", "start"),
        ("end=2026-13-40T00:00:00Z", "end"),
    ] {
        let response = system.get(&format!("/v1/usage?{query}")).await;
        assert_eq!(response.status(), 400, "{query}");
        assert_eq!(response.headers()["content-type"], "application/problem+json");
        assert_eq!(response.json_body().await["errors"][0]["field"], field, "{query}");
    }
    // What the OpenAPI document allows is answered: any range (the document sets no bound),
    // one that ends before it starts as an empty one, on both surfaces.
    for root in ["/v1", "/replicate/v1"] {
        for query in ["start=2000-01-01T00:00:00Z", "start=2030-01-01T00:00:00Z&end=2029-01-01T00:00:00Z"] {
            let response = system.get(&format!("{root}/usage?{query}")).await;
            assert_eq!(response.status(), 200, "{root} {query}");
            assert_eq!(response.json_body().await["totals"]["predict_time"], 0.0, "{root} {query}");
        }
    }
}

#[tokio::test]
async fn a_prediction_whose_writer_died_is_counted_once_by_the_sweep() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let done = system.run("demo/echo", json!({"prompt": "once"})).await;
    usage_when_counted(&system, &system.admin_key, "", 1).await;
    let store = system.ctx.store().await;
    let predictions = store.database().collection::<bson::Document>("predictions");
    let id = done["id"].as_str().expect("id");
    // As if its writer died after adding it but before marking it counted.
    predictions
        .update_one(bson::doc! { "_id": id }, bson::doc! { "$set": { "usage.pending": true } })
        .await
        .expect("set");
    // And another, ended with its usage pending, whose writer died before claiming it.
    let mut lost = store
        .predictions()
        .get(&common::domain::PredictionId::parse(id).expect("id"))
        .await
        .expect("read")
        .expect("stored");
    lost.id = common::domain::PredictionId::generate();
    lost.status = PredictionStatus::Failed;
    lost.usage = Some(common::domain::prediction::UsageMark { pending: true, writer: None, seq: None });
    store.predictions().insert(&lost).await.expect("inserted");

    let ledger = UsageLedger::start(&store);
    assert_eq!(ledger.recover_ended_before(Duration::ZERO, 100).await.expect("recovered"), 2);
    let body = usage_when_counted(&system, &system.admin_key, "", 2).await;
    assert_eq!(body["totals"]["count"], json!({"succeeded": 1, "failed": 1, "canceled": 0}), "each once");
    assert_eq!(ledger.recover_ended_before(Duration::ZERO, 100).await.expect("recovered"), 0, "nothing pending");
    // A later sweep changes nothing.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = system.get("/v1/usage").await.json_body().await;
    assert_eq!(again["totals"]["count"], json!({"succeeded": 1, "failed": 1, "canceled": 0}));
}

#[tokio::test]
async fn removing_a_predictions_data_keeps_its_usage() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let done = system.run("demo/echo", json!({"prompt": "kept"})).await;
    usage_when_counted(&system, &system.admin_key, "", 1).await;
    let store = system.ctx.store().await;
    let sweeper =
        runner::retention::Sweeper::new(store, system.files().await, Duration::ZERO, Duration::from_secs(3600));
    assert_eq!(sweeper.pass().await.failed, 0, "swept");
    let id = done["id"].as_str().expect("id");
    assert_eq!(system.get(&format!("/v1/predictions/{id}")).await.json_body().await["data_removed"], true);
    let body = system.get("/v1/usage").await.json_body().await;
    assert_eq!(body["totals"]["count"], json!({"succeeded": 1, "failed": 0, "canceled": 0}));
}

/// Every process start writes totals of its own; once an hour is settled they are folded into
/// one document per account, hour and group, with the same sums, even when two sweeps fold
/// the same document at once; an hour still open is left as it is.
#[tokio::test]
async fn the_totals_of_a_settled_hour_are_folded_into_one_per_group_and_sum_the_same() {
    use common::{
        domain::{AccountId, Metrics, Micros},
        store::usage::{Counted, FOLDED_WRITER, UsageGroup},
    };
    let context = testkit::TestContext::new();
    let store = context.store().await;
    let totals = store.usage_totals();
    let account = AccountId::generate();
    let hour = |hours_ago: i64| {
        let now = bson::DateTime::now().timestamp_millis();
        bson::DateTime::from_millis(now - now.rem_euclid(3_600_000) - hours_ago * 3_600_000)
    };
    let group = UsageGroup {
        model: "demo/echo".into(),
        deployment: None,
        hardware: None,
        api_key: None,
        kind: "prediction".into(),
    };
    let one = |at, status| {
        let metrics = Metrics { predict_time: 1.5, total_time: 2.0, cost: Micros(10) };
        Counted::one(account.clone(), at, group.clone(), status, metrics)
    };
    // Three process starts counted in an hour five hours ago; one counts in this hour.
    for (writer, status) in
        [("w1", PredictionStatus::Succeeded), ("w2", PredictionStatus::Failed), ("w3", PredictionStatus::Succeeded)]
    {
        assert!(totals.add(writer, 1, &one(hour(5), status)).await.expect("added"));
    }
    assert!(totals.add("w3", 2, &one(hour(0), PredictionStatus::Canceled)).await.expect("added"));
    let before = totals.between(Some(&account), hour(6), hour(-1)).await.expect("read");
    assert_eq!(before.len(), 4);

    // Two sweeps read the same document, and both fold it.
    let stale = before.iter().find(|t| t.id.starts_with("w1|")).expect("w1's").clone();
    totals.fold_one(&stale).await.expect("folded");
    totals.fold_one(&stale).await.expect("folded again");
    let ledger = UsageLedger::start(&store);
    assert_eq!(ledger.fold_settled_hours(100).await.expect("folded"), 2, "w2's and w3's of the settled hour");

    let after = totals.between(Some(&account), hour(6), hour(-1)).await.expect("read");
    assert_eq!(after.len(), 2, "one folded total for the settled hour, the open hour's as it was: {after:?}");
    let folded = after.iter().find(|t| t.hour == hour(5)).expect("the settled hour");
    assert!(folded.id.starts_with(&format!("{FOLDED_WRITER}|")));
    assert_eq!((folded.succeeded, folded.failed, folded.canceled), (2, 1, 0), "w1 counted once");
    assert_eq!(folded.cost, Micros(30));
    assert!((folded.predict_time - 4.5).abs() < 1e-9);
    let spent = totals.spent_since(&account, hour(6)).await.expect("read");
    assert_eq!(spent, Micros(40), "the same spending before and after");
}
