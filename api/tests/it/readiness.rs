//! `/ready` and `/health`.

use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use testkit::{eventually, host_port, infra, proxy::TcpProxy};

use crate::harness::{JsonBody, Options, System};

#[tokio::test]
async fn ready_answers_503_not_ready_when_nats_is_stopped() {
    let proxy = TcpProxy::start(host_port(&infra().nats_url)).await.expect("proxy");
    let system = System::start_with(Options {
        runner: false,
        notifier: false,
        env: vec![("NATS_URL", format!("nats://{}", proxy.addr()))],
    })
    .await;
    let ready = system.anonymous(Method::GET, "/ready").send().await.expect("sent");
    assert_eq!(ready.status(), 200);
    assert_eq!(ready.json_body().await, json!({"status": "ready", "version": common::VERSION}));

    proxy.stop();
    let not_ready = eventually(Duration::from_secs(15), || async {
        let r = system.anonymous(Method::GET, "/ready").send().await.ok()?;
        (r.status() == 503).then_some(r)
    })
    .await
    .expect("/ready turns 503 once NATS is gone");
    assert_eq!(not_ready.json_body().await, json!({"status": "not_ready"}));

    let health = system.anonymous(Method::GET, "/health").send().await.expect("sent");
    assert_eq!(health.status(), 200, "liveness does not depend on NATS");
}

#[tokio::test]
async fn metrics_count_requests_by_route_template_and_status() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    assert_eq!(system.get("/v1/predictions/aaaaaaaaaaaaaaaaaaaaaaaaaa").await.status(), 404);
    let response = system.anonymous(Method::GET, "/metrics").send().await.expect("sent");
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap_or("").starts_with("application/openmetrics-text"));
    let text = response.text().await.expect("text");
    assert!(
        text.contains(r#"http_requests_total{method="GET",route="/v1/predictions/{id}",status="404"} 1"#),
        "{text}"
    );
    assert!(!text.contains("aaaaaaaaaaaaaaaaaaaaaaaaaa"), "raw ids never become labels");
    assert!(text.contains("http_request_duration_seconds_bucket"));
    assert!(text.contains(r#"mongodb_commands_total{command="find"}"#), "the key look-up was counted: {text}");
    assert!(text.contains(r#"mongodb_command_duration_seconds_count{command="find"}"#), "and its answer timed: {text}");
    assert!(text.trim_end().ends_with("# EOF"));
}

#[tokio::test]
async fn metrics_are_served_on_their_own_port_or_nowhere_never_on_the_public_one_unless_asked() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    let (base, metrics) = system.start_another_api_split(true).await;
    let metrics = metrics.expect("a metrics listener");
    assert_eq!(
        system
            .http()
            .get(format!("{base}/v1/predictions"))
            .bearer_auth(&system.admin_key)
            .send()
            .await
            .expect("sent")
            .status(),
        200
    );
    let public = system.http().get(format!("{base}/metrics")).send().await.expect("sent");
    assert_eq!(public.status(), 404, "the public port does not serve the figures");
    let own = system.http().get(format!("{metrics}/metrics")).send().await.expect("sent");
    assert_eq!(own.status(), 200);
    let text = own.text().await.expect("text");
    assert!(text.contains(r#"http_requests_total{method="GET",route="/v1/predictions",status="200"} 1"#), "{text}");
    assert!(text.contains("api_requests_in_flight"), "{text}");
    let health = system.http().get(format!("{metrics}/health")).send().await.expect("sent");
    assert_eq!(health.status(), 200, "a probe can use the metrics port");
    for path in ["/health", "/ready"] {
        let r = system.http().get(format!("{base}{path}")).send().await.expect("sent");
        assert_eq!(r.status(), 200, "{path} stays on the public port");
    }

    let (quiet, none) = system.start_another_api_split(false).await;
    assert!(none.is_none());
    let r = system.http().get(format!("{quiet}/metrics")).send().await.expect("sent");
    assert_eq!(r.status(), 404, "API_METRICS_BIND unset: no figures anywhere");

    let vars: std::collections::HashMap<String, String> = system
        .vars
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .chain([("API_METRICS_BIND".into(), "port 9".into())])
        .collect();
    let err = api::config::ApiConfig::from_env(&common::config::Env::from_fn(|k| vars.get(k).cloned()))
        .expect_err("not an address");
    assert_eq!(err.var, "API_METRICS_BIND");
}

#[tokio::test]
async fn mongodb_commands_are_not_counted_unless_asked_for() {
    let env = vec![("MONGODB_COMMAND_METRICS", "false".to_string())];
    let system = System::start_with(Options { runner: false, notifier: false, env }).await;
    assert_eq!(system.get("/v1/predictions").await.status(), 200, "a request that reads MongoDB");
    let text = system.anonymous(Method::GET, "/metrics").send().await.expect("sent").text().await.expect("text");
    assert!(text.contains("http_requests_total"), "{text}");
    assert!(!text.contains("mongodb_commands_total{"), "monitoring is off by default: {text}");
    assert!(!text.contains("mongodb_command_duration_seconds_count{"), "nor timed: {text}");
}

#[tokio::test]
async fn nats_url_takes_a_comma_separated_server_list_and_ready_checks_the_streams() {
    let dead = format!("nats://127.0.0.1:{}", closed_port());
    let system = System::start_with(Options {
        runner: false,
        notifier: false,
        env: vec![("NATS_URL", format!("{dead}, {}", infra().nats_url))],
    })
    .await;
    let ready = system.anonymous(Method::GET, "/ready").send().await.expect("sent");
    assert_eq!(ready.status(), 200, "connected through the live server of the list");

    // A stream lost (the memory-stored rate-limit stream after a NATS restart) is made again,
    // not reported as not ready.
    let bus = system.ctx.bus().await;
    bus.jetstream().delete_stream(bus.subjects().rate_limit_stream()).await.expect("deleted");
    let again = eventually(Duration::from_secs(30), || async {
        bus.jetstream().get_stream(bus.subjects().rate_limit_stream()).await.ok()
    })
    .await;
    assert!(again.is_some(), "created again by the next check");
    let ready = system.anonymous(Method::GET, "/ready").send().await.expect("sent");
    assert_eq!(ready.status(), 200);
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    testkit::free_port()
}

fn free_bind() -> String {
    testkit::free_addr().to_string()
}

#[tokio::test]
async fn the_runner_and_notifier_serve_their_metrics_and_answer_ready_only_with_nats() {
    let proxy = TcpProxy::start(host_port(&infra().nats_url)).await.expect("proxy");
    let (runner, notifier) = (free_bind(), free_bind());
    let system = System::start_with(Options {
        env: vec![
            ("NATS_URL", format!("nats://{}", proxy.addr())),
            ("RUNNER_METRICS_BIND", runner.clone()),
            ("NOTIFIER_METRICS_BIND", notifier.clone()),
        ],
        ..Options::default()
    })
    .await;
    let receiver = receiver::Receiver::start().await;
    let body = json!({"input": {"prompt": "x"}, "webhook": receiver.url(), "webhook_events_filter": ["completed"]});
    let created = system.post_json("/v1/models/demo/echo/predictions", &body).await.json_body().await;
    system.wait_for_terminal(created["id"].as_str().expect("id"), Duration::from_secs(20)).await;
    let page = |bind: &str, path: &str| {
        let url = format!("http://{bind}{path}");
        let http = system.http().clone();
        async move { http.get(url).send().await.ok() }
    };
    let runner_metrics = eventually(Duration::from_secs(10), || async {
        let text = page(&runner, "/metrics").await?.text().await.ok()?;
        text.contains(r#"runner_model_run_duration_seconds_count{model="demo/echo",outcome="succeeded"} 1"#)
            .then_some(text)
    })
    .await
    .expect("the run is counted");
    for family in [
        "runner_jobs_in_flight",
        "runner_state_write_duration_seconds",
        "runner_jobs_pending",
        "runner_jobs_waiting",
        "runner_jobs_running",
    ] {
        assert!(runner_metrics.contains(&format!("# TYPE {family} ")), "{family} in {runner_metrics}");
    }
    let notifier_metrics = eventually(Duration::from_secs(10), || async {
        let text = page(&notifier, "/metrics").await?.text().await.ok()?;
        text.contains(r#"notifier_deliveries_total{outcome="2xx"} 1"#).then_some(text)
    })
    .await
    .expect("the delivery is counted");
    assert!(notifier_metrics.contains(r#"notifier_retry_backlog{kind="pending"}"#), "{notifier_metrics}");
    let api_metrics = system.anonymous(Method::GET, "/metrics").send().await.expect("sent").text().await.expect("text");
    assert!(api_metrics.contains(r#"api_predictions_created_total{model="demo/echo"} 1"#), "{api_metrics}");

    for bind in [&runner, &notifier] {
        assert_eq!(page(bind, "/ready").await.expect("answers").status(), 200, "{bind}");
    }
    proxy.stop();
    for bind in [&runner, &notifier] {
        let not_ready = eventually(Duration::from_secs(15), || async {
            let r = page(bind, "/ready").await?;
            (r.status() == 503).then_some(r)
        })
        .await;
        assert!(not_ready.is_some(), "{bind}/ready turns 503 once NATS is gone");
        assert_eq!(page(bind, "/health").await.expect("answers").status(), 200, "liveness does not need NATS");
    }
}

#[tokio::test]
async fn ready_stays_200_through_a_mongodb_silence_as_long_as_an_election_and_turns_503_past_it() {
    use common::readiness::{CHECK_INTERVAL, CHECK_TIMEOUT, ELECTION_GRACE};
    let real = infra().mongodb_uri.clone();
    let proxy = TcpProxy::start(host_port(&real)).await.expect("proxy");
    let proxied = real.replacen(&host_port(&real), &proxy.addr().to_string(), 1);
    let system = System::start_with(Options { env: vec![("MONGODB_URI", proxied)], ..Options::default() }).await;
    assert_eq!(system.anonymous(Method::GET, "/ready").send().await.expect("sent").status(), 200);
    let silent_since = std::time::Instant::now();
    proxy.stall();
    // Within the grace: MongoDB does not answer, and the replica stays in rotation.
    let during = system.anonymous(Method::GET, "/ready").send().await.expect("sent");
    assert_eq!(during.status(), 200, "an election's silence keeps the replica ready");
    // Past it: unready.
    let not_ready = eventually(ELECTION_GRACE + Duration::from_secs(15), || async {
        let r = system.anonymous(Method::GET, "/ready").send().await.ok()?;
        (r.status() == 503).then_some(())
    })
    .await;
    assert!(not_ready.is_some(), "/ready turns 503 once the silence outlasts an election");
    // The grace runs from MongoDB's last answer, which came at most one interval and one
    // check before the silence began.
    let earliest = ELECTION_GRACE - CHECK_INTERVAL - CHECK_TIMEOUT;
    assert!(silent_since.elapsed() >= earliest, "not before the grace ran out");
    proxy.resume();
    let back = eventually(Duration::from_secs(30), || async {
        let r = system.anonymous(Method::GET, "/ready").send().await.ok()?;
        (r.status() == 200).then_some(())
    })
    .await;
    assert!(back.is_some(), "ready again once MongoDB answers");
}
