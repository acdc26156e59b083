//! `GET /v1/predictions`: newest first, pages with absolute links, status and creation-time
//! filters, isolation.

use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::harness::{JsonBody, Options, System};

/// The ids of a page's results, in order.
fn ids(page: &serde_json::Value) -> Vec<String> {
    page["results"].as_array().expect("results").iter().filter_map(|p| p["id"].as_str().map(str::to_owned)).collect()
}

#[tokio::test]
async fn pages_run_newest_first_with_links_that_keep_the_query() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let created =
            system.post_json("/v1/models/demo/echo/predictions", &json!({"input": {"prompt": format!("p{i}")}})).await;
        ids.push(created.json_body().await["id"].as_str().expect("id").to_owned());
    }
    for id in &ids {
        system.wait_for_terminal(id, Duration::from_secs(30)).await;
    }

    let first = system.get("/v1/predictions?limit=2").await.json_body().await;
    let first_ids: Vec<&str> =
        first["results"].as_array().expect("results").iter().filter_map(|p| p["id"].as_str()).collect();
    assert_eq!(first_ids, vec![ids[2].as_str(), ids[1].as_str()], "newest first");
    assert_eq!(first["total_count"], 3);
    assert_eq!(first["previous"], serde_json::Value::Null);
    assert_eq!(first["next"], system.url("/v1/predictions?limit=2&offset=2"));

    let second = system.get("/v1/predictions?limit=2&offset=2").await.json_body().await;
    assert_eq!(second["results"][0]["id"], ids[0]);
    assert_eq!(second["next"], serde_json::Value::Null);
    assert_eq!(second["previous"], system.url("/v1/predictions?limit=2&offset=0"));

    let succeeded = system.get("/v1/predictions?status=succeeded&limit=1").await.json_body().await;
    assert_eq!(succeeded["total_count"], 3);
    assert_eq!(succeeded["next"], system.url("/v1/predictions?limit=1&offset=1&status=succeeded"));
    let failed = system.get("/v1/predictions?status=failed").await.json_body().await;
    assert_eq!(failed["total_count"], 0);
    assert_eq!(failed["results"], json!([]));

    let default = system.get("/v1/predictions").await.json_body().await;
    assert_eq!(default["results"].as_array().map(Vec::len), Some(3));

    let other = system.bootstrap_account("other").await;
    let theirs = system.with_key(Method::GET, "/v1/predictions", &other).send().await.expect("sent").json_body().await;
    assert_eq!(theirs["total_count"], 0, "another account sees none of these");
}

#[tokio::test]
async fn bad_list_parameters_are_400_at_their_name() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("offset=-1", "offset"),
        ("offset=9223372036854775808", "offset"),
        ("status=done", "status"),
        ("created_after=today", "created_after"),
        ("created_before=2026-11-27", "created_before"),
    ] {
        let response = system.get(&format!("/v1/predictions?{query}")).await;
        assert_eq!(response.status(), 400, "{query}");
        assert_eq!(response.json_body().await["errors"][0]["field"], field);
    }
    for query in ["limit=1", "limit=100", "offset=0", "status=starting"] {
        assert_eq!(system.get(&format!("/v1/predictions?{query}")).await.status(), 200, "{query}");
    }
}

#[tokio::test]
async fn created_after_and_before_bound_the_list_and_its_trainings_with_status_and_paging() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let mut made = Vec::new();
    for i in 0..3 {
        let created =
            system.post_json("/v1/models/demo/echo/predictions", &json!({"input": {"prompt": format!("p{i}")}})).await;
        let body = created.json_body().await;
        made.push((body["id"].as_str().expect("id").to_owned(), body["created_at"].as_str().expect("time").to_owned()));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for (id, _) in &made {
        system.wait_for_terminal(id, Duration::from_secs(30)).await;
    }
    let encoded = |t: &str| t.replace('+', "%2B");
    // From the second (at or after) to the third (before): the second alone, as Replicate.
    let query = format!("created_after={}&created_before={}", encoded(&made[1].1), encoded(&made[2].1));
    let page = system.get(&format!("/v1/predictions?{query}")).await.json_body().await;
    assert_eq!(ids(&page), vec![made[1].0.clone()], "{page}");
    // From the first to the third: the first two.
    let query = format!("created_after={}&created_before={}", encoded(&made[0].1), encoded(&made[2].1));
    let page = system.get(&format!("/v1/predictions?{query}")).await.json_body().await;
    assert_eq!(ids(&page), vec![made[1].0.clone(), made[0].0.clone()], "{page}");
    assert_eq!(page["total_count"], 2);
    // With status and paging, and kept in the links.
    let first = system.get(&format!("/v1/predictions?{query}&status=succeeded&limit=1")).await.json_body().await;
    assert_eq!(ids(&first), vec![made[1].0.clone()]);
    let next = first["next"].as_str().expect("a next page");
    assert!(next.contains("created_after=") && next.contains("created_before="), "{next}");
    let second = system.http().get(next).bearer_auth(&system.admin_key).send().await.expect("sent").json_body().await;
    assert_eq!(ids(&second), vec![made[0].0.clone()]);
    // Before the first: none (exclusive); the trainings list takes the same bounds.
    let before = system.get(&format!("/v1/predictions?created_before={}", encoded(&made[0].1))).await.json_body().await;
    assert_eq!(ids(&before), Vec::<String>::new(), "exclusive");
    let from = system.get(&format!("/v1/predictions?created_after={}", encoded(&made[2].1))).await.json_body().await;
    assert_eq!(ids(&from), vec![made[2].0.clone()], "inclusive");
    let trainings = system.get(&format!("/v1/trainings?{query}")).await;
    assert_eq!(trainings.status(), 200);
    assert_eq!(trainings.json_body().await["total_count"], 0);
}

#[tokio::test]
async fn replicate_pages_are_cursors_that_stay_put_while_predictions_are_created() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let create = |i: usize| {
        let system = &system;
        async move {
            let body = json!({"input": {"prompt": format!("c{i}")}});
            let created = system.post_json("/v1/models/demo/echo/predictions", &body).await;
            created.json_body().await["id"].as_str().expect("id").to_owned()
        }
    };
    let mut made = Vec::new();
    for i in 0..3 {
        made.push(create(i).await);
        // Distinct creation times (milliseconds), so newest-first is one order.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let first = system.get("/replicate/v1/predictions?limit=1").await.json_body().await;
    assert_eq!(ids(&first), vec![made[2].clone()]);
    let next = first["next"].as_str().expect("a next page").to_owned();
    assert!(next.contains("cursor=") && !next.contains("offset="), "Replicate's form: {next}");

    // Created between two pages: with offsets, page 2 would show the third again.
    let newer = create(3).await;
    let read = |link: String| {
        let system = &system;
        async move { system.http().get(link).bearer_auth(&system.admin_key).send().await.expect("sent").json_body().await }
    };
    let second = read(next).await;
    assert_eq!(ids(&second), vec![made[1].clone()], "the page after the first, as it stood: {second}");
    let third = read(second["next"].as_str().expect("a next page").to_owned()).await;
    assert_eq!(ids(&third), vec![made[0].clone()]);
    let back = read(second["previous"].as_str().expect("a previous page").to_owned()).await;
    assert_eq!(ids(&back), vec![made[2].clone()]);
    // A fresh first page shows the newer one; /v1 keeps offsets; a made-up cursor is 400.
    assert_eq!(ids(&system.get("/replicate/v1/predictions?limit=1").await.json_body().await), vec![newer]);
    let canonical = system.get("/v1/predictions?limit=1").await.json_body().await;
    assert!(canonical["next"].as_str().is_some_and(|n| n.contains("offset=1")), "{canonical}");
    let bad = system.get("/replicate/v1/predictions?cursor=nonsense").await;
    assert_eq!(bad.status(), 400);
    assert_eq!(bad.json_body().await["errors"][0]["field"], "cursor");
}
