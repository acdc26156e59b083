//! `/openapi.json` describes every endpoint, and real responses carry exactly the documented
//! fields. The document is also written to `$CARGO_TARGET_TMPDIR/openapi.json`, which
//! `deploy/local/test` checks with an independent OpenAPI 3.1 validator.

use std::collections::BTreeSet;

use reqwest::Method;
use serde_json::{Value, json};

use crate::harness::{JsonBody, Options, System};

fn properties(doc: &Value, schema: &str) -> BTreeSet<String> {
    let s = &doc["components"]["schemas"][schema];
    let mut names: BTreeSet<String> =
        s["properties"].as_object().map(|p| p.keys().cloned().collect()).unwrap_or_default();
    for part in s["allOf"].as_array().into_iter().flatten() {
        if let Some(r) = part["$ref"].as_str() {
            names.extend(properties(doc, r.trim_start_matches("#/components/schemas/")));
        }
        names.extend(part["properties"].as_object().into_iter().flat_map(|p| p.keys().cloned()));
    }
    names
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default()
}

#[tokio::test]
async fn the_document_describes_every_endpoint_and_matches_real_responses() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let doc = system.anonymous(Method::GET, "/openapi.json").send().await.expect("sent").json_body().await;
    std::fs::write(
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("openapi.json"),
        serde_json::to_vec_pretty(&doc).expect("json"),
    )
    .expect("write the document");

    assert_eq!(doc["openapi"], "3.1.0");
    let search =
        |path: &str| doc["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"].clone();
    assert_eq!(search("/replicate/v1/search")["$ref"], "#/components/schemas/ReplicateSearchResults");
    assert_eq!(search("/v1/search")["$ref"], "#/components/schemas/SearchResults");
    assert_eq!(
        properties(&doc, "ReplicateSearchResults"),
        ["collections", "models", "pages", "query"].map(String::from).into(),
        "Replicate's shape"
    );
    assert_eq!(doc["servers"][0]["url"], system.base_url);
    for (method, path) in [
        ("post", "/v1/models/{owner}/{name}/predictions"),
        ("get", "/v1/predictions"),
        ("get", "/v1/predictions/{id}"),
        ("post", "/v1/predictions/{id}/cancel"),
        ("get", "/v1/predictions/{id}/stream"),
        ("get", "/v1/files/{id}"),
        ("post", "/v1/account/api-keys"),
        ("get", "/v1/account/api-keys/{id}"),
        ("get", "/v1/account/webhooks/secret"),
        ("post", "/v1/account/webhooks/secret/rotate"),
        ("get", "/ready"),
        ("get", "/health"),
    ] {
        let op = &doc["paths"][path][method];
        assert!(op.is_object(), "{method} {path} is described");
        if path.starts_with("/v1/") {
            let security = op["security"].as_array().expect("security");
            assert!(security.iter().any(|s| s["bearer"] == json!([])), "{method} {path} takes the bearer key");
            let problem = &op["responses"]["401"]["content"]["application/problem+json"]["schema"]["$ref"];
            assert_eq!(problem, "#/components/schemas/ProblemBody", "{method} {path}");
        }
    }
    assert_eq!(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");

    let created = system
        .post_json("/v1/models/demo/echo/predictions", &json!({"input": {"prompt": "x"}}))
        .await
        .json_body()
        .await;
    assert_eq!(keys(&created), properties(&doc, "PredictionView"));
    assert_eq!(keys(&created["urls"]), properties(&doc, "PredictionUrls"));
    let page = system.get("/v1/predictions").await.json_body().await;
    assert_eq!(keys(&page), properties(&doc, "PredictionPage"));
    let key = system.request(Method::POST, "/v1/account/api-keys").send().await.expect("sent").json_body().await;
    assert_eq!(keys(&key), properties(&doc, "ApiKeyView"));
    let details =
        system.get(&format!("/v1/account/api-keys/{}", key["id"].as_str().expect("id"))).await.json_body().await;
    assert_eq!(keys(&details), properties(&doc, "ApiKeyDetails"));
    let secret = system.get("/v1/account/webhooks/secret").await.json_body().await;
    assert_eq!(keys(&secret), properties(&doc, "SecretView"));
    let problem = system.post_json("/v1/models/demo/echo/predictions", &json!({})).await.json_body().await;
    assert_eq!(keys(&problem), properties(&doc, "ProblemBody"), "a validation problem carries every member");
}
