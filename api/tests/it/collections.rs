//! Collections: written by the operator (`api admin collection`), read by every key
//! (`GET /v1/collections[/{slug}]`, both surfaces) in Replicate's shape, each showing only the
//! models the caller may see.

use reqwest::Method;
use serde_json::json;

use crate::harness::{JsonBody, Options, System};

#[tokio::test]
async fn collections_list_and_show_their_visible_models_in_order() {
    let system = System::start_with(Options { runner: false, notifier: false, ..Options::default() }).await;
    system.register_models_only().await;
    let private = json!({"owner": "test-account", "name": "mine", "visibility": "private", "hardware": "cpu"});
    assert_eq!(system.post_json("/v1/models", &private).await.status(), 201);
    system.put_collection("demo", "Demo models", &["demo/sleep", "demo/echo", "test-account/mine", "demo/gone"]).await;
    system.put_collection("art", "Art", &["demo/text-to-image"]).await;

    let list = system.get("/replicate/v1/collections").await.json_body().await;
    assert_eq!(
        list["results"],
        json!([
            {"name": "Art", "slug": "art", "description": "models to try"},
            {"name": "Demo models", "slug": "demo", "description": "models to try"},
        ])
    );
    let paged = system.get("/v1/collections?limit=1").await.json_body().await;
    assert_eq!(paged["results"][0]["slug"], "art");
    assert!(paged["next"].as_str().is_some_and(|n| n.ends_with("/v1/collections?limit=1&offset=1")));

    let demo = system.get("/v1/collections/demo").await.json_body().await;
    assert_eq!((demo["slug"].as_str(), demo["name"].as_str()), (Some("demo"), Some("Demo models")));
    let shown: Vec<String> = demo["models"]
        .as_array()
        .expect("models")
        .iter()
        .map(|m| format!("{}/{}", m["owner"].as_str().unwrap_or(""), m["name"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(shown, vec!["demo/sleep", "demo/echo", "test-account/mine"], "in order, a missing model left out");
    let other = system.bootstrap_account("other").await;
    let theirs =
        system.with_key(Method::GET, "/v1/collections/demo", &other).send().await.expect("sent").json_body().await;
    assert_eq!(theirs["models"].as_array().map(Vec::len), Some(2), "another account's private model is not shown");
    assert_eq!(system.get("/v1/collections/nothing").await.status(), 404);
    // No key writes them.
    let refused = system.request(Method::POST, "/v1/collections").json(&json!({"slug": "x"})).send().await;
    assert_eq!(refused.expect("sent").status(), 405);
}
