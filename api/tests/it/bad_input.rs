//! Bad input: every error is problem+json with the documented type, title, status and code.

use reqwest::{Method, Response};
use serde_json::{Value, json};

use crate::harness::{JsonBody, Options, System};

const ECHO: &str = "/v1/models/demo/echo/predictions";

async fn api_only() -> System {
    System::start_with(Options { notifier: false, ..Options::default() }).await
}

async fn problem(response: Response, status: u16) -> Value {
    assert_eq!(response.status(), status);
    let content_type = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    assert_eq!(content_type, "application/problem+json");
    assert!(response.headers().contains_key("x-request-id"));
    response.json_body().await
}

fn assert_kind(body: &Value, system: &System, slug: &str, title: &str, code: &str) {
    assert_eq!(body["type"], system.url(&format!("/errors/{slug}")));
    assert_eq!(body["title"], title);
    assert_eq!(body["code"], code);
    assert!(body["detail"].as_str().is_some_and(|d| !d.is_empty()));
}

#[tokio::test]
async fn missing_malformed_and_unknown_keys_all_get_the_same_401() {
    let system = api_only().await;
    let unknown_key = format!("psk_{}", "A".repeat(40));
    let mut bodies = Vec::new();
    for auth in
        [None, Some("Bearer nonsense".to_owned()), Some(format!("Bearer {unknown_key}")), Some("Basic abc".into())]
    {
        let mut request = system.anonymous(Method::GET, "/v1/predictions/aaaaaaaaaaaaaaaaaaaaaaaaaa");
        if let Some(a) = auth {
            request = request.header("authorization", a);
        }
        let body = problem(request.send().await.expect("sent"), 401).await;
        assert_kind(&body, &system, "unauthorized", "Unauthorized", "AUTH_INVALID_TOKEN");
        assert_eq!(body["status"], 401);
        bodies.push(body);
    }
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "no oracle: {bodies:?}");
}

#[tokio::test]
async fn an_unknown_or_malformed_model_is_404() {
    let system = api_only().await;
    for path in ["/v1/models/demo/nope/predictions", "/v1/models/De.mo/x/predictions"] {
        let body = problem(system.post_json(path, &json!({"input": {}})).await, 404).await;
        assert_kind(&body, &system, "not-found", "Not Found", "RESOURCE_NOT_FOUND");
    }
}

#[tokio::test]
async fn a_missing_input_is_400_with_a_missing_field_item_and_request_ids() {
    let system = api_only().await;
    let response = system.post_json(ECHO, &json!({})).await;
    let request_id = response.headers()["x-request-id"].to_str().expect("ascii").to_owned();
    let body = problem(response, 400).await;
    assert_kind(&body, &system, "validation-error", "Validation Error", "VALIDATION_INVALID_ARGUMENT");
    assert_eq!(
        body["errors"],
        json!([{"field": "input", "code": "VALIDATION_MISSING_FIELD", "message": "This field is required."}])
    );
    assert_eq!(body["request_id"], request_id);
    assert!(body["trace_id"].as_str().is_some_and(|t| t.len() == 32));
}

#[tokio::test]
async fn a_missing_prompt_and_a_bad_repeat_are_reported_together() {
    let system = api_only().await;
    let body = problem(system.post_json(ECHO, &json!({"input": {"repeat": 11}})).await, 400).await;
    let items: Vec<(String, String)> = body["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| (e["field"].as_str().unwrap_or("").into(), e["code"].as_str().unwrap_or("").into()))
        .collect();
    assert_eq!(
        items,
        vec![
            ("input.prompt".into(), "VALIDATION_MISSING_FIELD".into()),
            ("input.repeat".into(), "VALIDATION_INVALID_ARGUMENT".into())
        ]
    );
}

#[tokio::test]
async fn bad_webhook_fields_are_400_at_their_path() {
    let system = api_only().await;
    let body = problem(
        system
            .post_json(
                ECHO,
                &json!({"input": {"prompt": "x"}, "webhook": "ftp://x", "webhook_events_filter": ["start", "nope"]}),
            )
            .await,
        400,
    )
    .await;
    let fields: Vec<&str> =
        body["errors"].as_array().expect("errors").iter().filter_map(|e| e["field"].as_str()).collect();
    assert_eq!(fields, vec!["webhook", "webhook_events_filter[1]"]);
}

#[tokio::test]
async fn malformed_json_a_wrong_content_type_and_a_non_object_are_400() {
    let system = api_only().await;
    let cases = [("application/json", "{\"input\":"), ("text/plain", "{\"input\":{}}"), ("application/json", "[1,2]")];
    for (content_type, text) in cases {
        let response = system
            .request(Method::POST, ECHO)
            .header("content-type", content_type)
            .body(text)
            .send()
            .await
            .expect("sent");
        let body = problem(response, 400).await;
        assert_eq!(body["errors"][0]["field"], "body", "{content_type} {text}");
    }
}

#[tokio::test]
async fn unknown_routes_wrong_methods_and_huge_bodies_are_problem_json() {
    let system = api_only().await;
    let body = problem(system.get("/v1/nothing-here").await, 404).await;
    assert_kind(&body, &system, "not-found", "Not Found", "RESOURCE_NOT_FOUND");

    let response = system.request(Method::DELETE, ECHO).send().await.expect("sent");
    assert!(response.headers().contains_key("allow"));
    let body = problem(response, 405).await;
    assert_eq!(body["status"], 405);

    let huge = format!("{{\"input\":{{\"prompt\":\"{}\"}}}}", "a".repeat(1024 * 1024));
    let response = system
        .request(Method::POST, ECHO)
        .header("content-type", "application/json")
        .body(huge)
        .send()
        .await
        .expect("sent");
    let body = problem(response, 413).await;
    assert_eq!(body["status"], 413);
}

#[tokio::test]
async fn a_prediction_is_404_for_another_account_and_for_unknown_ids() {
    let system = api_only().await;
    let created = system.post_json(ECHO, &json!({"input": {"prompt": "mine"}})).await.json_body().await;
    let path = format!("/v1/predictions/{}", created["id"].as_str().expect("an id"));
    assert_eq!(system.get(&path).await.status(), 200);

    let other_key = system.bootstrap_account("another-account").await;
    let response = system.anonymous(Method::GET, &path).bearer_auth(other_key).send().await.expect("sent");
    let body = problem(response, 404).await;
    assert_kind(&body, &system, "not-found", "Not Found", "RESOURCE_NOT_FOUND");

    problem(system.get("/v1/predictions/aaaaaaaaaaaaaaaaaaaaaaaaaa").await, 404).await;
    problem(system.get("/v1/predictions/not-an-id").await, 404).await;
}

#[tokio::test]
async fn odd_bodies_never_cause_a_server_error() {
    let system = api_only().await;
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let bodies = [
        "".to_owned(),
        "null".into(),
        "\"text\"".into(),
        "{\"input\":null}".into(),
        "{\"input\":[]}".into(),
        "{\"input\":{\"prompt\":{\"nested\":[1,2,{}]}}}".into(),
        "{\"input\":{\"prompt\":\"\\u0000\\ud83d\\ude00\",\"repeat\":1e308}}".into(),
        "{\"input\":{\"prompt\":\"x\",\"repeat\":-99999999999999999999}}".into(),
        "{\"input\":{\"prompt\":\"x\"},\"webhook\":\"http://[::1\"}".into(),
        "{\"input\":{\"prompt\":\"x\"},\"webhook_events_filter\":[null,{},[]]}".into(),
        format!("{{\"input\":{deep}}}"),
        "\u{feff}{}".into(),
    ];
    for body in bodies {
        let response = system
            .request(Method::POST, ECHO)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .expect("sent");
        let status = response.status().as_u16();
        assert!(status == 201 || (400..500).contains(&status), "{status} for {body:.80}");
    }
}
