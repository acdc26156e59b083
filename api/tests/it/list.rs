//! `GET /v1/predictions`: newest first, pages with absolute links, status filter, isolation.

use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::harness::{JsonBody, Options, System};

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
    ] {
        let response = system.get(&format!("/v1/predictions?{query}")).await;
        assert_eq!(response.status(), 400, "{query}");
        assert_eq!(response.json_body().await["errors"][0]["field"], field);
    }
    for query in ["limit=1", "limit=100", "offset=0", "status=starting"] {
        assert_eq!(system.get(&format!("/v1/predictions?{query}")).await.status(), 200, "{query}");
    }
}
