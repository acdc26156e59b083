//! The per-key rate limit, shared by api replicas.

use futures::{StreamExt, stream};
use reqwest::Method;
use serde_json::json;

use crate::harness::{JsonBody, Options, System};

const LIMIT: usize = 100;

/// A system for keys of a limit of their own (no runner, no notifier; the default limit).
async fn plain_system() -> System {
    System::start_with(Options { runner: false, notifier: false, env: vec![] }).await
}

/// A new key of the system's account allowing `limit` requests a minute (a limit of its own,
/// which every request counts against), or at the deployment's default.
async fn key_with(system: &System, limit: Option<usize>) -> String {
    let body = match limit {
        Some(limit) => json!({"rate_limit_rpm": limit}),
        None => json!({}),
    };
    let created =
        system.request(Method::POST, "/v1/account/api-keys").json(&body).send().await.expect("sent").json_body().await;
    created["key"].as_str().expect("key").to_owned()
}

#[tokio::test]
async fn two_api_replicas_together_allow_no_more_than_the_limit() {
    let system = plain_system().await;
    let second = system.start_another_api().await;
    let created = system
        .request(Method::POST, "/v1/account/api-keys")
        .header("content-type", "application/json")
        .body(json!({"scopes": ["read"], "rate_limit_rpm": LIMIT}).to_string())
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
    let system = plain_system().await;
    let key = key_with(&system, Some(BATCHED_LIMIT)).await;
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
    let system = plain_system().await;
    let key = key_with(&system, Some(3)).await;
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
    let retry_after: u32 = refused.headers()["retry-after"].to_str().expect("text").parse().expect("seconds");
    // 4 of 3 in this minute: until its end, then until 2 of the 4 slid out of the next (30 s).
    assert!((30..=90).contains(&retry_after), "the seconds until the window has room: {retry_after}");
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
    let system = plain_system().await;
    let key = key_with(&system, Some(SMALL)).await;
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

/// `rate_limit_rpm` is what it says: every authenticated request counts against it, creates
/// and reads alike, whatever the key's limit. New keys get 3,000, room for the official
/// clients' polls.
#[tokio::test]
async fn a_default_key_counts_every_request_against_its_3000() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    let key = key_with(&system, None).await;
    let about = system.with_key(Method::GET, "/v1/account/api-keys", &key).send().await.expect("sent");
    assert_eq!(about.headers()["x-ratelimit-limit"], "3000", "new keys allow 3,000 requests a minute");
    let before: i64 = about.headers()["x-ratelimit-remaining"].to_str().expect("ascii").parse().expect("a number");
    // The official clients poll each running prediction every half second: six followed at
    // once for a minute is 720 requests; 900 polls in a burst are all answered.
    let statuses: Vec<u16> = stream::iter(0..900)
        .map(|_| async { system.with_key(Method::GET, "/v1/predictions", &key).send().await.expect("sent").status() })
        .buffer_unordered(16)
        .map(|status| status.as_u16())
        .collect()
        .await;
    assert!(statuses.iter().all(|s| *s == 200), "{:?}", statuses.iter().filter(|s| **s != 200).collect::<Vec<_>>());
    // A create spends the same budget as the reads before it.
    let create = system
        .with_key(Method::POST, "/v1/predictions", &key)
        .json(&json!({"version": "demo/none", "input": {}}))
        .send()
        .await
        .expect("sent");
    assert_eq!(create.headers()["x-ratelimit-limit"], "3000");
    let after: i64 = create.headers()["x-ratelimit-remaining"].to_str().expect("ascii").parse().expect("a number");
    let reset = |r: &reqwest::Response| -> i64 {
        r.headers()["x-ratelimit-reset"].to_str().expect("ascii").parse().expect("a number")
    };
    if reset(&about) == reset(&create) {
        assert!(after <= before - 900, "the polls and the create were counted together: {before} then {after}");
    } else {
        // The burst crossed a minute boundary: the sliding window weighs the previous minute's
        // requests by the part of it still in the window, so all 902 count at least that much.
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_secs_f64();
        let still_in_window = 1.0 - (now % 60.0) / 60.0;
        let counted = 3000 - after;
        let floor = (902.0 * still_in_window).floor() as i64 - 1;
        assert!(
            counted >= floor,
            "across a minute boundary {counted} of 902 requests were counted, fewer than {floor}"
        );
    }
}

/// An increment whose answer came too late (NATS held it past the check's timeout, then
/// added it) is sent again under its id, and the stream drops the repeat: the request counts
/// once, not once per attempt (a lost answer used to cost the key false 429s for a minute).
#[tokio::test]
async fn an_increment_added_after_its_check_gave_up_counts_once() {
    let context = testkit::TestContext::new();
    let proxy = testkit::proxy::TcpProxy::start(testkit::host_port(&context.nats_url)).await.expect("proxy");
    let subjects = common::subjects::Subjects::new(&context.prefix).expect("prefix");
    let through_proxy = common::bus::Bus::connect(&format!("nats://{}", proxy.addr()), subjects, "limiter")
        .await
        .expect("connected through the proxy");
    through_proxy.ensure_streams().await.expect("streams");
    let direct = context.bus().await;
    let limiter = api::state::ratelimit::RateLimiter::new(through_proxy);
    let minute = || chrono::Utc::now().timestamp().div_euclid(60);
    let first_minute = minute();

    // A limit of 10 is counted on the counter at every request, never locally.
    assert!(limiter.check_counter("held", 10).await.allowed);
    proxy.stall();
    let decision = limiter.check_counter("held", 10).await;
    assert!(decision.allowed, "a check that gets no answer lets the request through");
    // The held increment now reaches the stream and is added; its answer finds no one waiting.
    proxy.resume();
    let settled =
        testkit::eventually(std::time::Duration::from_secs(30), || async { (limiter.unsent() == 0).then_some(()) })
            .await;
    assert!(settled.is_some(), "the unconfirmed increment was settled");

    let mut counted = 0;
    for m in first_minute..=minute() {
        let subject = direct.subjects().rate_limit("held", m);
        counted += direct.read_counter(&direct.subjects().rate_limit_stream(), &subject).await.expect("read");
    }
    assert_eq!(counted, 2, "two requests, each counted once");
}
