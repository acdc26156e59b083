//! The per-key rate limit, shared by api replicas.

use futures::{StreamExt, stream};
use reqwest::Method;
use serde_json::json;

use crate::harness::{JsonBody, Options, System};

const LIMIT: usize = 100;

/// A system whose new keys allow `limit` requests a minute (no runner, no notifier).
async fn limited_system(limit: usize) -> System {
    System::start_with(Options {
        runner: false,
        notifier: false,
        env: vec![("DEFAULT_RATE_LIMIT_RPM", limit.to_string())],
    })
    .await
}

/// A new key of the system's account, with the deployment's default limit.
async fn new_key(system: &System) -> String {
    let created = system.request(Method::POST, "/v1/account/api-keys").send().await.expect("sent").json_body().await;
    created["key"].as_str().expect("key").to_owned()
}

#[tokio::test]
async fn two_api_replicas_together_allow_no_more_than_the_limit() {
    let system = limited_system(LIMIT).await;
    let second = system.start_another_api().await;
    let created = system
        .request(Method::POST, "/v1/account/api-keys")
        .header("content-type", "application/json")
        .body(json!({"scopes": ["read"]}).to_string())
        .send()
        .await
        .expect("sent")
        .json_body()
        .await;
    assert_eq!(created["rate_limit_rpm"], LIMIT);
    let key = created["key"].as_str().expect("key").to_owned();

    let bases = [system.base_url.clone(), second];
    let statuses: Vec<u16> = stream::iter(0..LIMIT * 5 / 2)
        .map(|i| {
            let url = format!("{}/v1/predictions?limit=1", bases[i % 2]);
            let request = system.http().get(url).bearer_auth(&key);
            async move { request.send().await.expect("sent").status().as_u16() }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    let allowed = statuses.iter().filter(|s| **s == 200).count();
    let refused = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!(allowed + refused, statuses.len(), "only 200 or 429: {statuses:?}");
    assert!(allowed <= LIMIT * 102 / 100, "{allowed} allowed, more than the limit of {LIMIT} + 2 %");
    assert!(allowed >= LIMIT * 90 / 100, "{allowed} allowed, far below the limit of {LIMIT}");
}

#[tokio::test]
async fn one_replica_admits_exactly_its_limit_though_it_counts_far_below_it_in_batches() {
    // 400 a minute: the first requests are admitted locally and added in batches, the last
    // ones before the limit are each decided on the shared counter.
    const BATCHED_LIMIT: usize = 400;
    let system = limited_system(BATCHED_LIMIT).await;
    let key = new_key(&system).await;
    // The window slides: right after a minute ends, the previous minute's count starts to
    // weigh less and a few more requests are rightly admitted. Exactness is checked inside
    // one minute.
    wait_until_a_minute_has_at_least_seconds_left(15).await;

    let statuses: Vec<u16> = stream::iter(0..BATCHED_LIMIT + 100)
        .map(|_| {
            let request = system.with_key(Method::GET, "/v1/predictions?limit=1", &key);
            async move { request.send().await.expect("sent").status().as_u16() }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let allowed = statuses.iter().filter(|s| **s == 200).count();
    assert_eq!(allowed, BATCHED_LIMIT, "exactly the limit on one replica");
    assert_eq!(statuses.iter().filter(|s| **s == 429).count(), 100);
}

/// Waits (at most a few seconds) until the current wall-clock minute has `seconds` left.
async fn wait_until_a_minute_has_at_least_seconds_left(seconds: u64) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970");
    let into_minute = now.as_secs_f64() % 60.0;
    let left = 60.0 - into_minute;
    if left < seconds as f64 {
        tokio::time::sleep(std::time::Duration::from_secs_f64(left + 0.1)).await;
    }
}

#[tokio::test]
async fn a_refusal_is_429_problem_json_with_the_documented_detail_and_headers() {
    let system = limited_system(3).await;
    let key = new_key(&system).await;
    let get = || system.with_key(Method::GET, "/v1/predictions", &key).send();

    let first = get().await.expect("sent");
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["x-ratelimit-limit"], "3");
    assert!(first.headers().contains_key("x-ratelimit-remaining"));
    assert!(first.headers().contains_key("x-ratelimit-reset"));
    get().await.expect("sent");
    get().await.expect("sent");
    let refused = get().await.expect("sent");
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "60");
    assert_eq!(refused.headers()["x-ratelimit-remaining"], "0");
    let body = refused.json_body().await;
    assert_eq!(body["detail"], "Rate limit exceeded. Retry after 60 seconds.");
    assert_eq!(body["code"], "RATE_LIMIT_EXCEEDED");
    assert_eq!(body["title"], "Rate Limit Exceeded");
    assert_eq!(body["type"], system.url("/errors/rate-limit"));
    assert_eq!(body["status"], 429);
}

#[tokio::test]
async fn rate_limits_hold_again_once_their_lost_stream_is_found_missing() {
    const SMALL: usize = 10;
    let system = limited_system(SMALL).await;
    let key = new_key(&system).await;
    // As after a NATS restart: the memory-stored counter stream is gone.
    let bus = system.ctx.bus().await;
    bus.jetstream().delete_stream(bus.subjects().rate_limit_stream()).await.expect("deleted");

    let mut allowed = 0;
    for _ in 0..SMALL + 5 {
        let url = format!("{}/v1/predictions?limit=1", system.base_url);
        let status = system.http().get(url).bearer_auth(&key).send().await.expect("sent").status().as_u16();
        assert!(status == 200 || status == 429, "{status}");
        allowed += usize::from(status == 200);
    }
    // One more may pass where the window crosses a minute boundary.
    assert!(allowed <= SMALL + 1, "{allowed} of {} allowed with a limit of {SMALL}", SMALL + 5);
    let mut stream = bus.jetstream().get_stream(bus.subjects().rate_limit_stream()).await.expect("created again");
    assert!(stream.info().await.expect("info").state.messages > 0, "counting again");
}
