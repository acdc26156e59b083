//! `/ready` and `/health`.

use std::time::Duration;

use common::testkit::{eventually, host_port, infra, proxy::TcpProxy};
use reqwest::Method;
use serde_json::json;

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
    assert!(text.trim_end().ends_with("# EOF"));
}

#[tokio::test]
async fn mongodb_commands_are_not_counted_unless_asked_for() {
    let env = vec![("MONGODB_COMMAND_METRICS", "false".to_string())];
    let system = System::start_with(Options { runner: false, notifier: false, env }).await;
    assert_eq!(system.get("/v1/predictions").await.status(), 200, "a request that reads MongoDB");
    let text = system.anonymous(Method::GET, "/metrics").send().await.expect("sent").text().await.expect("text");
    assert!(text.contains("http_requests_total"), "{text}");
    assert!(!text.contains("mongodb_commands_total{"), "monitoring is off by default: {text}");
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
    let ready = system.anonymous(Method::GET, "/ready").send().await.expect("sent");
    assert_eq!(ready.status(), 200);
    assert!(bus.jetstream().get_stream(bus.subjects().rate_limit_stream()).await.is_ok(), "created again");
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}
