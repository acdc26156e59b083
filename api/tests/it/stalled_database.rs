//! Every request is answered within its deadline (`API_REQUEST_DEADLINE_SECONDS`, plus
//! `ANSWER_GRACE`), whatever the database does: here MongoDB stalls (a proxy holds every byte
//! both ways, as a paused server, a long election or `failCommand` with `blockConnection`
//! would), so reads and writes already sent never come back. The answer is a 503 with
//! `Retry-After`; once the database answers again, a create sent again with its
//! Idempotency-Key is made exactly once.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};
use testkit::{eventually, host_port, infra, proxy::TcpProxy};

use crate::harness::{JsonBody, Options, System};

/// The deadline the api gets here.
const DEADLINE: Duration = Duration::from_secs(2);
/// What the issue allows past it.
const ALLOWED: Duration = Duration::from_secs(1);

fn create(system: &System, key: &str) -> reqwest::RequestBuilder {
    system
        .request(Method::POST, "/v1/predictions")
        .header("idempotency-key", key)
        .json(&json!({"version": "demo/echo", "input": {"prompt": key}}))
}

/// A proxy to the test run's MongoDB, and the URI that goes through it.
async fn proxied_mongodb() -> (TcpProxy, String) {
    let real = infra().mongodb_uri.clone();
    let proxy = TcpProxy::start(host_port(&real)).await.expect("proxy");
    let proxied = real.replacen(&host_port(&real), &proxy.addr().to_string(), 1);
    (proxy, proxied)
}

#[tokio::test]
async fn with_the_database_stalled_every_request_is_answered_within_its_deadline() {
    let (proxy, proxied) = proxied_mongodb().await;
    let env = vec![("MONGODB_URI", proxied), ("API_REQUEST_DEADLINE_SECONDS", DEADLINE.as_secs().to_string())];
    // A runner registers the demo models (and stalls with the database too).
    let system = System::start_with(Options { runner: true, notifier: false, env }).await;
    let first = create(&system, "before").send().await.expect("sent");
    assert_eq!(first.status(), 201, "{}", first.text().await.unwrap_or_default());
    let first: Value = first.json().await.expect("json");
    let first_path = format!("/v1/predictions/{}", first["id"].as_str().expect("id"));

    proxy.stall();
    let requests = [
        ("a create", create(&system, "during")),
        ("a get", system.request(Method::GET, &first_path)),
        ("a list", system.request(Method::GET, "/v1/predictions")),
        ("a cancel", system.request(Method::POST, &format!("{first_path}/cancel"))),
        ("a get of the account", system.request(Method::GET, "/v1/account")),
    ];
    let answers = futures::future::join_all(requests.into_iter().map(|(what, request)| async move {
        let sent = Instant::now();
        let answer = request.send().await.expect("answered");
        (what, sent.elapsed(), answer)
    }))
    .await;
    for (what, took, answer) in answers {
        assert!(took <= DEADLINE + ALLOWED, "{what} was answered after {took:?}");
        assert_eq!(answer.status(), 503, "{what}");
        assert!(answer.headers().contains_key("retry-after"), "{what}");
        assert_eq!(answer.headers()["content-type"], "application/problem+json", "{what}");
        let problem = answer.json_body().await;
        assert_eq!(problem["status"], 503, "{what}: {problem}");
    }

    proxy.resume();
    // Once the database answers, the create sent again with its key is made, and only once.
    let again = eventually(Duration::from_secs(60), || async {
        let answer = create(&system, "during").send().await.ok()?;
        (answer.status() == 201).then_some(())
    })
    .await;
    assert!(again.is_some(), "creates are taken again once the database answers");
    assert_eq!(create(&system, "during").send().await.expect("sent").status(), 201, "replayed");
    let listed = system.get("/v1/predictions").await.json_body().await;
    let made: Vec<&Value> = listed["results"].as_array().expect("results").iter().collect();
    assert_eq!(made.len(), 2, "the create before the stall and the one sent during it, once: {listed}");
}

#[tokio::test]
async fn a_prefer_wait_counts_from_the_requests_arrival_not_from_the_store() {
    let (proxy, proxied) = proxied_mongodb().await;
    let system =
        System::start_with(Options { runner: true, notifier: false, env: vec![("MONGODB_URI", proxied)] }).await;
    let wait = Duration::from_secs(3);
    let stall = Duration::from_millis(1500);
    proxy.stall();
    let sent = Instant::now();
    let create = system
        .request(Method::POST, "/v1/models/demo/sleep/predictions")
        .header("prefer", format!("wait={}", wait.as_secs()))
        .json(&json!({"input": {"seconds": 30}}))
        .send();
    let resume = async {
        tokio::time::sleep(stall).await;
        proxy.resume();
    };
    let (answer, ()) = tokio::join!(create, resume);
    let took = sent.elapsed();
    let answer = answer.expect("answered");
    assert_eq!(answer.status(), 201);
    let status = answer.json_body().await["status"].as_str().unwrap_or_default().to_owned();
    assert!(["starting", "processing"].contains(&status.as_str()), "still running when the wait ran out: {status}");
    // Counted from the store, the answer would come a whole stall later (4.5 s).
    assert!(took < wait + Duration::from_millis(900), "answered after {took:?}, the wait being {wait:?}");
    assert!(took >= wait, "held for the whole wait: {took:?}");
}
