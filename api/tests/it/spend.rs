//! Spend per account (prices, cost, budgets): each job's cost is its run time at the price
//! its pool had when it started, exact to the micro-dollar, and the usage totals add the
//! jobs' costs up exactly; an account whose monthly budget is spent is refused (402) on every
//! api replica within seconds, its admins may only lower the operator's budget, and raising
//! it lets creates through again.

use std::{collections::HashMap, time::Duration};

use common::domain::{Micros, PredictionId, Price};
use futures::StreamExt;
use reqwest::Method;
use serde_json::{Value, json};
use testkit::eventually;

use receiver::Receiver;

use crate::harness::{JsonBody, Options, System};

/// How long an announced price takes to reach the runners at most, in these tests: the
/// announcement is a NATS message the runners take without a read, so a price "set" means
/// "set and heard"; jobs that start from then on pay it.
const HEARD: Duration = Duration::from_millis(300);

/// Runs `n` predictions of demo/sleep (`seconds` each) on `/replicate/v1`, 16 at a time;
/// returns them as answered at their end.
async fn sleep_predictions(system: &System, n: usize, seconds: f64) -> Vec<Value> {
    futures::stream::iter(0..n)
        .map(|_| async move {
            let response = system
                .request(Method::POST, "/replicate/v1/models/demo/sleep/predictions")
                .header("prefer", "wait=60")
                .json(&json!({"input": {"seconds": seconds}}))
                .send()
                .await
                .expect("sent");
            assert_eq!(response.status(), 201);
            let body = response.json_body().await;
            assert_eq!(body["status"], "succeeded", "{body}");
            body
        })
        .buffer_unordered(16)
        .collect()
        .await
}

#[tokio::test]
async fn costs_follow_the_price_each_job_started_at_and_add_up_to_the_usage_total() {
    // 1,000 creates within a minute: past the default key's budget of 600.
    let env = vec![("DEFAULT_RATE_LIMIT_RPM", "1000000".to_owned())];
    let system = System::start_with(Options { runner: false, notifier: false, env }).await;
    system.start_runner_with(&[("RUNNER_HARDWARE", "cpu"), ("RUNNER_MODELS", "demo/sleep")]);
    system.start_runner_with(&[("RUNNER_HARDWARE", "gpu"), ("RUNNER_MODELS", "demo/sleep")]);
    let pools = eventually(Duration::from_secs(30), || async {
        let body = system.get("/v1/hardware").await.json_body().await;
        (body.as_array().map_or(0, Vec::len) == 2).then_some(body)
    })
    .await
    .expect("both pools live");
    assert!(
        pools.as_array().expect("pools").iter().all(|p| p["price_per_second"] == "0"),
        "free until priced: {pools}"
    );
    let unknown = api::admin::set_price(&system.admin_config(), "tpu", "1").await.expect_err("no such pool");
    assert!(unknown.to_string().contains("tpu"), "the error names the pool: {unknown}");

    let phases = [("0.000225", "0.0014"), ("0.0005", "0.002")];
    let mut prices_of: HashMap<String, Price> = HashMap::new();
    let mut ran: Vec<(Value, HashMap<String, Price>)> = Vec::new();
    for (cpu, gpu) in phases {
        system.set_price("cpu", cpu).await;
        system.set_price("gpu", gpu).await;
        tokio::time::sleep(HEARD).await;
        prices_of.insert("cpu".into(), Price::parse_dollars(cpu).expect("price"));
        prices_of.insert("gpu".into(), Price::parse_dollars(gpu).expect("price"));
        for done in sleep_predictions(&system, 500, 0.02).await {
            ran.push((done, prices_of.clone()));
        }
    }
    let hardware = system.get("/v1/hardware").await.json_body().await;
    let shown: Vec<&Value> = hardware.as_array().expect("pools").iter().map(|p| &p["price_per_second"]).collect();
    assert!(shown.contains(&&json!("0.0005")) && shown.contains(&&json!("0.002")), "{hardware}");

    // Each job's cost: its run time at the price its pool had when it started, as stored and
    // as /replicate/v1 shows it; /v1 keeps the interface's metrics.
    let store = system.ctx.store().await;
    let mut by_pool: HashMap<String, Micros> = HashMap::new();
    for (shown, prices) in &ran {
        let id = PredictionId::parse(shown["id"].as_str().expect("id")).expect("an id");
        let stored = store.predictions().get(&id).await.expect("read").expect("stored");
        let started_on = stored.started_on.as_ref().expect("the pool it started on is recorded");
        assert_eq!(started_on.price, prices[started_on.pool.as_str()], "the price in force when it started");
        let ran_ms = stored.completed_at.expect("ended").timestamp_millis()
            - stored.started_at.expect("started").timestamp_millis();
        let cost = stored.metrics.expect("metrics").cost;
        assert_eq!(cost, started_on.price.cost_of_millis(ran_ms));
        assert!(cost > Micros::ZERO, "20 ms at these prices costs something");
        assert_eq!(shown["metrics"]["cost"], cost.dollars(), "{shown}");
        *by_pool.entry(started_on.pool.to_string()).or_default() += cost;
    }
    assert_eq!(by_pool.len(), 2, "both pools ran predictions: {by_pool:?}");
    let canonical = system.get(&format!("/v1/predictions/{}", ran[0].0["id"].as_str().expect("id"))).await;
    let metrics = canonical.json_body().await["metrics"].clone();
    assert!(metrics.get("cost").is_none(), "the /v1 object keeps the interface's fields: {metrics}");

    // The usage totals add the per-job costs up exactly, per pool and in all, in JSON and CSV.
    let total: Micros = by_pool.values().copied().sum();
    let usage = eventually(Duration::from_secs(30), || async {
        let body = system.get("/v1/usage?group_by=hardware").await.json_body().await;
        (body["totals"]["count"]["succeeded"] == 1000).then_some(body)
    })
    .await
    .expect("all 1,000 counted");
    assert_eq!(usage["totals"]["cost"], total.dollars(), "{usage}");
    for group in
        usage["results"].as_array().expect("buckets").iter().flat_map(|b| b["groups"].as_array().expect("groups"))
    {
        let pool = group["hardware"].as_str().expect("a pool");
        assert_eq!(group["cost"], by_pool[pool].dollars(), "{group}");
    }
    let csv = system
        .request(Method::GET, "/v1/usage?group_by=hardware")
        .header("accept", "text/csv")
        .send()
        .await
        .expect("sent")
        .text()
        .await
        .expect("text");
    assert!(csv.lines().next().expect("a header").ends_with(",cost"), "{csv}");
    for (pool, cost) in &by_pool {
        assert!(
            csv.lines().any(|l| l.contains(&format!(",{pool},")) && l.ends_with(&format!(",{}", cost.dollars()))),
            "{csv}"
        );
    }
}

/// Creates a demo/sleep prediction through `base` with `key`; the response.
async fn create_at(system: &System, base: &str, key: &str) -> reqwest::Response {
    system
        .http()
        .post(format!("{base}/v1/models/demo/sleep/predictions"))
        .bearer_auth(key)
        .json(&json!({"input": {"seconds": 0.2}}))
        .send()
        .await
        .expect("sent")
}

#[tokio::test]
async fn an_account_past_its_budget_is_refused_on_every_replica_until_the_budget_is_raised() {
    let system = System::start().await;
    let receiver = Receiver::start().await;
    let second = system.start_another_api().await;
    let key = system.admin_key.clone();
    let replicas = [system.base_url.clone(), second];
    system.set_price("cpu", "1").await;
    tokio::time::sleep(HEARD).await;
    system.set_budget("test-account", "0.50").await;
    let account = system.get("/v1/account").await.json_body().await;
    assert_eq!(
        (account["monthly_budget"].clone(), account["spent_this_month"].clone()),
        (json!("0.50"), json!("0.00"))
    );

    // A receiver asks for the account's budget notices by naming the event in a prediction's
    // filter.
    let asking = json!({"input": {"seconds": 0}, "webhook": receiver.url(),
                        "webhook_events_filter": ["completed", "account.budget"]});
    assert_eq!(system.post_json("/v1/models/demo/sleep/predictions", &asking).await.status(), 201);

    // 0.2 s at $1 a second: two predictions pass 80 % of the budget, a third spends it. The
    // third is created once the first two are counted, so each threshold is crossed by a
    // count of its own (the second finds the first's notice raised).
    let spent_at_least = |least: Micros| {
        let system = &system;
        async move {
            eventually(Duration::from_secs(20), || async {
                let account = system.get("/v1/account").await.json_body().await;
                let spent = Micros::parse_dollars(account["spent_this_month"].as_str()?).ok()?;
                (spent >= least).then_some(spent)
            })
            .await
            .expect("the spending is counted")
        }
    };
    for (count, counted) in [(2, Micros(400_000)), (1, Micros(500_000))] {
        let mut ids = Vec::new();
        for _ in 0..count {
            let created = create_at(&system, &replicas[0], &key).await;
            assert_eq!(created.status(), 201);
            ids.push(created.json_body().await["id"].as_str().expect("id").to_owned());
        }
        for id in &ids {
            assert_eq!(system.wait_for_terminal(id, Duration::from_secs(60)).await["status"], "succeeded");
        }
        spent_at_least(counted).await;
    }
    let spent = spent_at_least(Micros(500_000)).await;
    // Within 5 s every replica refuses, naming the budget and when it resets.
    for base in &replicas {
        let refused = eventually(Duration::from_secs(5), || async {
            let response = create_at(&system, base, &key).await;
            (response.status() == 402).then_some(response)
        })
        .await
        .unwrap_or_else(|| panic!("{base} still accepts creates past the budget"));
        assert_eq!(refused.headers()["content-type"], "application/problem+json");
        let problem = refused.json_body().await;
        assert_eq!(problem["code"], "BUDGET_EXHAUSTED");
        assert!(problem["type"].as_str().expect("type").ends_with("/errors/budget-exhausted"), "{problem}");
        let detail = problem["detail"].as_str().expect("detail");
        assert!(
            detail.contains("$0.50") && detail.contains(&spent.dollars()) && detail.contains("-01T00:00:00Z"),
            "{detail}"
        );
    }

    // The receiver got one notice at 80 % and one at 100 %, signed like every webhook.
    let notices = eventually(Duration::from_secs(30), || async {
        let notices = receiver.of_event("account.budget");
        let thresholds: Vec<Value> =
            notices.iter().filter(|d| d.accepted()).map(|d| d.json()["threshold"].clone()).collect();
        (thresholds.contains(&json!(80)) && thresholds.contains(&json!(100))).then_some(notices)
    })
    .await
    .expect("both budget notices delivered");
    for notice in &notices {
        assert!(notice.verifies(&system.secret), "signed with the account's secret");
        let body = notice.json();
        assert_eq!((body["type"].clone(), body["account"].clone()), (json!("account.budget"), json!("test-account")));
        assert_eq!(body["monthly_budget"], "0.50");
        assert!(notice.header("webhook-id").ends_with(&format!("|{}", body["threshold"])), "one id per notice");
    }
    assert_eq!(notices.iter().filter(|d| d.json()["threshold"] == 100).count(), 1, "each notice once");

    // An admin key may lower the budget, never raise it past the operator's.
    let patch = |body: Value| system.request(Method::PATCH, "/v1/account").json(&body).send();
    assert_eq!(patch(json!({"monthly_budget": "100.00"})).await.expect("sent").status(), 403);
    assert_eq!(patch(json!({"monthly_budget": "ten"})).await.expect("sent").status(), 400);
    let lowered = patch(json!({"monthly_budget": "0.40"})).await.expect("sent").json_body().await;
    assert_eq!(lowered["monthly_budget"], "0.40");
    // The operator raises theirs: the account's own lower one still holds, until it drops it.
    system.set_budget("test-account", "100").await;
    assert_eq!(system.get("/v1/account").await.json_body().await["monthly_budget"], "0.40");
    assert_eq!(
        patch(json!({"monthly_budget": null})).await.expect("sent").json_body().await["monthly_budget"],
        "100.00"
    );
    for base in &replicas {
        let accepted = eventually(Duration::from_secs(5), || async {
            (create_at(&system, base, &key).await.status() == 201).then_some(())
        })
        .await;
        assert!(accepted.is_some(), "{base} still refuses once the budget was raised");
    }
}
