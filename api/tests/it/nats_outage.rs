//! Jobs accepted while NATS is away start within seconds of its return: the api keeps each
//! job it could not publish and publishes it again as soon as NATS takes it (`job_outbox`),
//! instead of leaving it to the runners' reconciler (a `starting` prediction 30 s old).

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::join_all;
use serde_json::{Value, json};
use testkit::{host_port, infra, proxy::TcpProxy};

use crate::harness::{JsonBody, Options, System};

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("not a timestamp: {v}"))
}

#[tokio::test]
async fn jobs_accepted_while_nats_is_away_start_within_seconds_of_its_return() {
    let proxy = TcpProxy::start(host_port(&infra().nats_url)).await.expect("proxy");
    let nats_url = format!("nats://{}", proxy.addr());
    let system = System::start_with(Options { env: vec![("NATS_URL", nats_url)], ..Default::default() }).await;

    // The runner consumes: one prediction runs before NATS goes away.
    assert_eq!(system.run("demo/echo", json!({"prompt": "before"})).await["status"], "succeeded");

    proxy.cut();
    let creates = (0..5).map(|n| {
        let system = &system;
        async move {
            let body = json!({"input": {"prompt": format!("during the outage {n}")}});
            let response = system.post_json("/v1/models/demo/echo/predictions", &body).await;
            assert_eq!(response.status(), 201, "accepted while NATS is away");
            response.json_body().await["id"].as_str().expect("an id").to_owned()
        }
    });
    let ids = join_all(creates).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let back = Utc::now();
    proxy.restore();

    for id in ids {
        let done = system.wait_for_terminal(&id, Duration::from_secs(60)).await;
        assert_eq!(done["status"], "succeeded");
        let (created, started) = (time(&done["created_at"]), time(&done["started_at"]));
        let after_return = (started - back.max(created)).num_milliseconds();
        assert!(after_return < 5_000, "{id} started {after_return} ms after NATS was back");
        assert!(
            (started - created).num_milliseconds() < 8_000,
            "{id} waited {} ms",
            (started - created).num_milliseconds()
        );
    }
}

/// A runner away from NATS misses the doorbells of the jobs published meanwhile (core NATS
/// keeps nothing for it): once connected again it scans the jobs stream at once, instead of
/// at its next periodic scan (every 10 s from its start).
#[tokio::test]
async fn a_runner_back_from_a_nats_outage_starts_the_jobs_published_while_it_was_away() {
    let system = System::start_with(Options { runner: false, notifier: false, ..Default::default() }).await;
    let proxy = TcpProxy::start(host_port(&system.vars["NATS_URL"])).await.expect("proxy");
    system.register_models_only().await;
    system.start_runner_with(&[("NATS_URL", &format!("nats://{}", proxy.addr()))]);
    assert_eq!(system.run("demo/echo", json!({"prompt": "before"})).await["status"], "succeeded");

    // Only the runner loses NATS: the api publishes, and the doorbells ring for no one. The
    // jobs are another account's, a lane the runner has never pulled from.
    let other = system.bootstrap_account("other").await;
    proxy.cut();
    let mut ids = Vec::new();
    for n in 0..3 {
        let body = json!({"input": {"prompt": format!("while the runner is away {n}")}});
        let response = system
            .with_key(reqwest::Method::POST, "/v1/models/demo/echo/predictions", &other)
            .json(&body)
            .send()
            .await
            .expect("sent");
        assert_eq!(response.status(), 201);
        ids.push(response.json_body().await["id"].as_str().expect("an id").to_owned());
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let back = Utc::now();
    proxy.restore();

    for id in ids {
        let done = system.wait_for_terminal_as(&other, &id, Duration::from_secs(30)).await;
        assert_eq!(done["status"], "succeeded");
        let after_return = (time(&done["started_at"]) - back).num_milliseconds();
        assert!(after_return < 3_000, "{id} started {after_return} ms after the runner was back");
    }
}
