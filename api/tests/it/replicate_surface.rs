//! The Replicate-compatible surface (`/replicate/v1`, docs/replicate.md), models and versions, and
//! create by `version`: the same handlers as `/v1` in Replicate's shapes.

use std::time::Duration;

use bson::DateTime;
use common::{
    domain::ModelRef,
    store::{ModelRecord, ModelVersionRecord},
};
use reqwest::{Method, redirect::Policy};
use serde_json::{Value, json};
use testkit::eventually;

use receiver::Receiver;

use crate::harness::{JsonBody, Options, System};

async fn post(system: &System, path: &str, body: Value, prefer: Option<&str>) -> reqwest::Response {
    let mut request =
        system.request(Method::POST, path).header("content-type", "application/json").body(body.to_string());
    if let Some(p) = prefer {
        request = request.header("prefer", p);
    }
    request.send().await.expect("sent")
}

fn urls(p: &Value) -> Vec<String> {
    p["urls"].as_object().expect("urls").values().map(|u| u.as_str().expect("a string").to_owned()).collect()
}

#[tokio::test]
async fn a_failed_prediction_has_a_string_error_here_and_the_object_on_v1() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let body = json!({"input": {"message": "boom"}});
    let failed = post(&system, "/replicate/v1/models/demo/fail/predictions", body, Some("wait")).await;
    assert_eq!(failed.status(), 201);
    let failed = failed.json_body().await;
    assert_eq!((failed["status"].as_str(), failed["error"].as_str()), (Some("failed"), Some("boom")));
    let id = failed["id"].as_str().expect("id");
    let canonical = system.get(&format!("/v1/predictions/{id}")).await.json_body().await;
    assert_eq!(canonical["error"], json!({"code": "MODEL_ERROR", "message": "boom"}), "/v1 is unchanged");
    let replicate = system.get(&format!("/replicate/v1/predictions/{id}")).await.json_body().await;
    assert_eq!(replicate["error"], "boom");
}

#[tokio::test]
async fn every_url_points_inside_the_surface_and_each_one_works() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let root = format!("{}/replicate/v1/", system.base_url);
    let image = post(
        &system,
        "/replicate/v1/models/demo/text-to-image/predictions",
        json!({"input": {"prompt": "a fox"}}),
        Some("wait"),
    )
    .await
    .json_body()
    .await;
    assert_eq!(image["status"], "succeeded", "{image}");
    for url in urls(&image).into_iter().chain([image["output"].as_str().expect("a file URL").to_owned()]) {
        assert!(url.starts_with(&root), "{url}");
    }
    let file = system.http().get(image["output"].as_str().expect("url")).bearer_auth(&system.admin_key).send().await;
    let file = file.expect("sent");
    assert_eq!((file.status().as_u16(), file.headers()["content-type"].to_str().ok()), (200, Some("image/png")));
    let get =
        system.http().get(image["urls"]["get"].as_str().expect("get")).bearer_auth(&system.admin_key).send().await;
    assert_eq!(get.expect("sent").json_body().await["id"], image["id"]);

    let no_redirects = reqwest::Client::builder().redirect(Policy::none()).build().expect("client");
    let web = no_redirects.get(image["urls"]["web"].as_str().expect("web")).send().await.expect("sent");
    assert_eq!(web.status(), 303);
    assert_eq!(web.headers()["location"], format!("/predictions/{}", image["id"].as_str().expect("id")).as_str());

    post(&system, "/replicate/v1/models/demo/echo/predictions", json!({"input": {"prompt": "x"}}), None).await;
    let page = system.get("/replicate/v1/predictions?limit=1").await.json_body().await;
    assert!(page["next"].as_str().expect("a next page").starts_with(&root), "{page}");
    let second = system.http().get(page["next"].as_str().expect("next")).bearer_auth(&system.admin_key).send().await;
    let second = second.expect("sent").json_body().await;
    assert!(second["previous"].as_str().expect("a previous page").starts_with(&root));
    assert!(second["results"][0]["error"].is_null());
}

#[tokio::test]
async fn a_wait_that_runs_out_answers_starting_here_and_the_real_status_on_v1() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let body = json!({"input": {"seconds": 30}});
    let replicate = post(&system, "/replicate/v1/models/demo/sleep/predictions", body.clone(), Some("wait=1")).await;
    assert_eq!(replicate.json_body().await["status"], "starting", "Replicate's clients poll only then");
    let canonical = post(&system, "/v1/models/demo/sleep/predictions", body, Some("wait=1")).await.json_body().await;
    assert!(matches!(canonical["status"].as_str(), Some("starting" | "processing")), "{canonical}");
}

#[tokio::test]
async fn webhooks_of_a_prediction_created_here_carry_this_shape() {
    let system = System::start().await;
    let receiver = Receiver::start().await;
    let body = json!({"input": {"message": "boom"}, "webhook": receiver.url(), "webhook_events_filter": ["completed"]});
    let created = post(&system, "/replicate/v1/models/demo/fail/predictions", body, None).await.json_body().await;
    let delivered =
        eventually(Duration::from_secs(20), || async { receiver.of_event("completed").into_iter().next() }).await;
    let payload = delivered.expect("the completed webhook").json();
    assert_eq!(payload["id"], created["id"]);
    assert_eq!(payload["error"], "boom");
    assert!(payload["urls"]["get"].as_str().expect("get").starts_with(&format!("{}/replicate/v1/", system.base_url)));
}

#[tokio::test]
async fn models_and_versions_are_listed_and_found() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    for root in ["/v1", "/replicate/v1"] {
        let model = system.get(&format!("{root}/models/demo/echo")).await.json_body().await;
        assert_eq!((model["owner"].as_str(), model["name"].as_str()), (Some("demo"), Some("echo")));
        assert_eq!(model["visibility"], "public");
        assert!(model["run_count"].is_u64() && model["description"].is_string());
        assert!(model["url"].as_str().expect("url").starts_with(&format!("{}{root}/", system.base_url)));
        let latest = &model["latest_version"];
        for field in ["id", "created_at", "cog_version", "openapi_schema"] {
            assert!(!latest[field].is_null(), "{field} is never null");
        }
        let schemas = &latest["openapi_schema"]["components"]["schemas"];
        assert_eq!(schemas["Input"]["properties"]["prompt"]["type"], "string");
        assert!(schemas["Output"].is_object());
        let id = latest["id"].as_str().expect("id");

        let versions = system.get(&format!("{root}/models/demo/echo/versions")).await.json_body().await;
        assert_eq!(versions["results"][0]["id"], id);
        let version = system.get(&format!("{root}/models/demo/echo/versions/{id}")).await;
        assert_eq!(version.json_body().await["id"], id);
        assert_eq!(system.get(&format!("{root}/models/demo/echo/versions/0000")).await.status(), 404);
        assert_eq!(system.get(&format!("{root}/models/demo/nothing")).await.status(), 404);

        let page = system.get(&format!("{root}/models?limit=2")).await.json_body().await;
        assert_eq!(page["results"].as_array().map(Vec::len), Some(2));
        let next = page["next"].as_str().expect("more models than one page");
        assert!(next.starts_with(&format!("{}{root}/models?", system.base_url)));
        let rest = system.http().get(next).bearer_auth(&system.admin_key).send().await.expect("sent").json_body().await;
        assert!(rest["previous"].is_string() && rest["results"].as_array().is_some_and(|r| !r.is_empty()));
    }
    let created = post(&system, "/v1/models/demo/echo/predictions", json!({"input": {"prompt": "x"}}), None).await;
    assert_eq!(created.status(), 201);
    let model = system.get("/v1/models/demo/echo").await.json_body().await;
    assert_eq!(model["run_count"], 1, "the caller's own runs");
}

#[tokio::test]
async fn a_prediction_is_created_by_any_form_of_its_version() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let version = system.get("/v1/models/demo/echo").await.json_body().await["latest_version"]["id"].clone();
    let version = version.as_str().expect("id").to_owned();
    for (root, form) in [
        ("/v1", version.clone()),
        ("/replicate/v1", format!("demo/echo:{version}")),
        ("/replicate/v1", "demo/echo".into()),
    ] {
        let body = json!({"version": form, "input": {"prompt": "hi"}});
        let response = post(&system, &format!("{root}/predictions"), body, Some("wait")).await;
        assert_eq!(response.status(), 201, "{form}");
        let p = response.json_body().await;
        assert_eq!((p["model"].as_str(), p["version"].as_str()), (Some("demo/echo"), Some(version.as_str())));
        assert_eq!(p["output"], "hi", "{form}");
    }
}

#[tokio::test]
async fn a_version_no_runner_serves_is_accepted_checked_against_its_own_schema_and_waits() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let echo: ModelRef = "demo/echo".parse().expect("model");
    let schema = json!({"type": "object", "properties": {"words": {"type": "integer"}}, "required": ["words"]});
    let mut old = ModelVersionRecord::of(&ModelRecord::new(echo, "text-generation", &schema));
    old.created_at = DateTime::from_millis(0);
    system.ctx.store().await.model_versions().collection().insert_one(&old).await.expect("an older version");

    let wrong = post(&system, "/v1/predictions", json!({"version": old.id, "input": {"prompt": "x"}}), None).await;
    assert_eq!(wrong.status(), 400, "checked against the old version's schema, not the latest one's");
    assert_eq!(wrong.json_body().await["errors"][0]["field"], "input.words");
    let pinned = post(&system, "/v1/predictions", json!({"version": old.id, "input": {"words": 3}}), None).await;
    assert_eq!(pinned.status(), 201);
    let pinned = pinned.json_body().await;
    assert_eq!(pinned["version"], old.id.as_str());
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let waiting =
        system.get(&format!("/v1/predictions/{}", pinned["id"].as_str().expect("id"))).await.json_body().await;
    assert_eq!(waiting["status"], "starting", "no runner serves its version: it waits, never runs on another");
    let listed = system.get("/v1/models/demo/echo/versions").await.json_body().await;
    assert_eq!(listed["results"].as_array().map(Vec::len), Some(2), "the old version is listed after the current one");
    assert_eq!(listed["results"][1]["id"], old.id.as_str());

    let unknown = post(&system, "/v1/predictions", json!({"version": "abc123", "input": {}}), None).await;
    assert_eq!(unknown.status(), 404);
    let other = post(&system, "/v1/predictions", json!({"version": "demo/echo:abc123", "input": {}}), None).await;
    assert_eq!(other.status(), 404);
    let nothing = post(&system, "/v1/predictions", json!({"webhook": "nope"}), None).await;
    assert_eq!(nothing.status(), 400);
    let fields: Vec<Value> =
        nothing.json_body().await["errors"].as_array().expect("errors").iter().map(|e| e["field"].clone()).collect();
    assert_eq!(fields, vec![json!("version"), json!("input"), json!("webhook")], "every failing field at once");
}
