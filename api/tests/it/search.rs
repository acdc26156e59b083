//! Finding models by text: `QUERY /v1/models` (a `text/plain` body, as the official clients'
//! `models.search` sends it) and `GET /v1/search?query=`, on both surfaces: every word must
//! match an owner, a name or a description, best match first, only models the caller may see.

use reqwest::Method;
use serde_json::{Value, json};

use crate::harness::{JsonBody, Options, System};

fn names(page: &Value) -> Vec<String> {
    page["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|m| format!("{}/{}", m["owner"], m["name"]).replace('"', ""))
        .collect()
}

#[tokio::test]
async fn search_finds_visible_models_by_owner_name_and_description_best_first() {
    let system = System::start_with(Options { runner: false, notifier: false, ..Options::default() }).await;
    system.register_models_only().await;
    for (name, visibility, description) in [
        ("echo-tune", "public", "a tune of echo"),
        ("secret-echo", "private", "hidden"),
        ("painter", "public", "paints an echo"),
    ] {
        let body = json!({"owner": "test-account", "name": name, "visibility": visibility, "hardware": "cpu", "description": description});
        assert_eq!(system.post_json("/v1/models", &body).await.status(), 201);
    }

    // GET /v1/search: the exact name first, then names that start with it, then the rest.
    let found = system.get("/v1/search?query=Echo").await.json_body().await;
    assert_eq!(found["query"], "Echo");
    let first = names(&found["models"]);
    assert_eq!(first[0], "demo/echo", "{first:?}");
    assert_eq!(first[1], "test-account/echo-tune", "{first:?}");
    assert!(
        first.contains(&"test-account/secret-echo".to_owned()) && first.contains(&"test-account/painter".to_owned())
    );
    // /replicate/v1/search in Replicate's shape: models with their metadata, collections, pages.
    let replicate = system.get("/replicate/v1/search?query=echo").await.json_body().await;
    assert_eq!(replicate["query"], "echo");
    let found = replicate["models"].as_array().expect("a list of matches");
    assert_eq!(
        (&found[0]["model"]["owner"], &found[0]["model"]["name"]),
        (&json!("demo"), &json!("echo")),
        "{replicate}"
    );
    assert!(found[0]["metadata"]["score"].as_u64() > found[1]["metadata"]["score"].as_u64(), "{replicate}");
    assert!(
        found.iter().all(|m| m["metadata"]["tags"].is_array() && m["metadata"]["generated_description"].is_string())
    );
    assert!(replicate["collections"].is_array() && replicate["pages"] == json!([]), "{replicate}");
    let none = system.get("/replicate/v1/search?query=zzzz").await.json_body().await;
    assert_eq!(none, json!({"query": "zzzz", "models": [], "collections": [], "pages": []}), "empty lists, not absent");
    let two_words = system.get("/v1/search?query=paints%20echo").await.json_body().await;
    assert_eq!(names(&two_words["models"]), vec!["test-account/painter"], "every word must match");
    let paged = system.get("/v1/search?query=echo&limit=1").await.json_body().await;
    assert_eq!(names(&paged["models"]).len(), 1);
    assert!(paged["models"]["next"].as_str().is_some_and(|n| n.contains("query=echo") && n.contains("offset=1")));

    // QUERY /v1/models, as the clients send it.
    let query = Method::from_bytes(b"QUERY").expect("a method");
    let searched = system
        .request(query.clone(), "/replicate/v1/models")
        .header("content-type", "text/plain")
        .body("echo-tune")
        .send()
        .await
        .expect("sent");
    assert_eq!(searched.status(), 200);
    assert_eq!(names(&searched.json_body().await)[0], "test-account/echo-tune");
    // Its next page is the next page of the same search, not the whole list of models.
    let first = system
        .request(query.clone(), "/replicate/v1/models?limit=1")
        .header("content-type", "text/plain")
        .body("echo")
        .send()
        .await
        .expect("sent")
        .json_body()
        .await;
    let next = first["next"].as_str().expect("a next page").to_owned();
    assert!(next.contains("/replicate/v1/models?query=echo"), "{next}");
    let second = system.http().get(&next).bearer_auth(&system.admin_key).send().await.expect("sent").json_body().await;
    assert_eq!(names(&first), vec!["demo/echo"]);
    assert_eq!(names(&second), vec!["test-account/echo-tune"], "the second best match: {second}");
    // replicate JS sends the text JSON-encoded.
    let encoded = system
        .request(query.clone(), "/v1/models")
        .header("content-type", "text/plain")
        .body("\"echo-tune\"")
        .send()
        .await
        .expect("sent");
    assert_eq!(names(&encoded.json_body().await)[0], "test-account/echo-tune");

    // Another account sees the public ones only; an empty query is 400 at `query`.
    let other = system.bootstrap_account("other").await;
    let theirs = system.with_key(Method::GET, "/v1/search?query=echo", &other).send().await.expect("sent");
    let theirs = names(&theirs.json_body().await["models"]);
    assert!(
        !theirs.contains(&"test-account/secret-echo".to_owned())
            && theirs.contains(&"test-account/echo-tune".to_owned())
    );
    let empty = system.get("/v1/search?query=%20").await;
    assert_eq!(empty.status(), 400);
    assert_eq!(empty.json_body().await["errors"][0]["field"], "query");
    let empty_body =
        system.request(query.clone(), "/v1/models").header("content-type", "text/plain").body("").send().await;
    assert_eq!(empty_body.expect("sent").status(), 400);
    let json_query = system.request(query, "/v1/models").json(&json!({"q": "echo"})).send().await.expect("sent");
    assert_eq!(json_query.status(), 405, "a QUERY of anything but text is no search");
    let put = system.request(Method::PUT, "/v1/models").send().await.expect("sent");
    assert_eq!(put.status(), 405, "other methods are still not allowed");
    // `Allow` names what the OpenAPI document declares for /models (it has no QUERY method).
    assert_eq!(put.headers().get("allow").and_then(|v| v.to_str().ok()), Some("GET,POST"));
}
