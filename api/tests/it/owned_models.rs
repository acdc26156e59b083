//! An account's own models (`POST /v1/models`, `DELETE /v1/models/{owner}/{name}`): created
//! with no version, seen by their account (and by others only when public), forbidden when
//! the owner is not the account, refused when the address is taken or a field is bad, and deleted unless a deployment runs them.

use reqwest::Method;
use serde_json::{Value, json};

use crate::harness::{JsonBody, Options, System};

fn new_model(name: &str, visibility: &str) -> Value {
    json!({"owner": "test-account", "name": name, "visibility": visibility, "hardware": "cpu", "description": "a tune"})
}

#[tokio::test]
async fn a_created_model_has_no_version_and_is_seen_by_its_account_and_when_public_by_others() {
    let system = System::start_with(Options { runner: false, notifier: false, ..Options::default() }).await;
    system.register_models_only().await;
    for root in ["/v1", "/replicate/v1"] {
        let name = if root == "/v1" { "private-tune" } else { "public-tune" };
        let visibility = if root == "/v1" { "private" } else { "public" };
        let created = system
            .request(Method::POST, &format!("{root}/models"))
            .json(&new_model(name, visibility))
            .send()
            .await
            .expect("sent");
        assert_eq!(created.status(), 201, "{root}");
        let body = created.json_body().await;
        assert_eq!(body["owner"], "test-account");
        assert_eq!(body["name"], name);
        assert_eq!(body["visibility"], visibility);
        assert_eq!(body["description"], "a tune");
        assert_eq!(body["latest_version"], Value::Null, "no version until a training records one");
    }
    let got = system.get("/v1/models/test-account/private-tune").await;
    assert_eq!(got.status(), 200);
    let versions = system.get("/v1/models/test-account/private-tune/versions").await.json_body().await;
    assert_eq!(versions["results"], json!([]));
    let listed = system.get("/v1/models?limit=100").await.json_body().await;
    let names: Vec<&str> =
        listed["results"].as_array().expect("a page").iter().filter_map(|m| m["name"].as_str()).collect();
    assert!(names.contains(&"private-tune") && names.contains(&"public-tune") && names.contains(&"echo"), "{names:?}");

    let other = system.bootstrap_account("other").await;
    let as_other = |path: &str| system.with_key(Method::GET, path, &other).send();
    assert_eq!(as_other("/v1/models/test-account/private-tune").await.expect("sent").status(), 404, "private");
    assert_eq!(as_other("/v1/models/test-account/public-tune").await.expect("sent").status(), 200, "public");
    let theirs = as_other("/v1/models?limit=100").await.expect("sent").json_body().await;
    let names: Vec<&str> =
        theirs["results"].as_array().expect("a page").iter().filter_map(|m| m["name"].as_str()).collect();
    assert!(names.contains(&"public-tune") && !names.contains(&"private-tune"), "{names:?}");
    let delete =
        system.with_key(Method::DELETE, "/v1/models/test-account/public-tune", &other).send().await.expect("sent");
    assert_eq!(delete.status(), 404, "another account's model cannot be deleted");
}

/// A name with dots, as Replicate's (`flux-1.1-pro`), on both surfaces: created, fetched,
/// listed and deleted.
#[tokio::test]
async fn a_dotted_model_name_is_created_fetched_and_deleted() {
    let system = System::start_with(Options { runner: false, notifier: false, ..Options::default() }).await;
    system.register_models_only().await;
    for (root, name) in [("/v1", "flux-1.1-pro"), ("/replicate/v1", "meta-llama-3.1-405b-instruct")] {
        let created =
            system.request(Method::POST, &format!("{root}/models")).json(&new_model(name, "private")).send().await;
        let created = created.expect("sent");
        assert_eq!(created.status(), 201, "{root} {name}");
        assert_eq!(created.json_body().await["name"], name);
        let got = system.get(&format!("{root}/models/test-account/{name}")).await;
        assert_eq!(got.status(), 200, "{root} {name}");
        assert_eq!(got.json_body().await["name"], name);
    }
    let listed = system.get("/v1/models?limit=100").await.json_body().await;
    let names: Vec<&str> =
        listed["results"].as_array().expect("a page").iter().filter_map(|m| m["name"].as_str()).collect();
    assert!(names.contains(&"flux-1.1-pro"), "{names:?}");
    let deleted =
        system.request(Method::DELETE, "/v1/models/test-account/flux-1.1-pro").send().await.expect("sent").status();
    assert_eq!(deleted, 204);
    assert_eq!(system.get("/v1/models/test-account/flux-1.1-pro").await.status(), 404);
}

#[tokio::test]
async fn a_model_is_refused_for_another_owner_a_taken_address_or_bad_fields() {
    let system = System::start_with(Options { runner: false, notifier: false, ..Options::default() }).await;
    system.register_models_only().await;
    let create = |body: Value| system.request(Method::POST, "/v1/models").json(&body).send();
    let refused = create(json!({"owner": "someone-else", "name": "x", "visibility": "public", "hardware": "cpu"}))
        .await
        .expect("sent");
    assert_eq!(refused.status(), 403, "only under the account's own name");
    assert!(refused.json_body().await["detail"].as_str().expect("detail").contains("test-account"));
    let bad = create(json!({"name": "Not Valid", "visibility": "hidden", "hardware": 7, "paper_url": "arxiv"}))
        .await
        .expect("sent");
    assert_eq!(bad.status(), 400);
    let bad = bad.json_body().await;
    let detail = bad["detail"].as_str().expect("detail");
    assert!(
        detail.contains("name: 1 to 100 characters") && detail.contains("; and 2 more. See errors."),
        "the detail names the first fields and counts the rest: {detail}"
    );
    let fields: Vec<String> = bad["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| e["field"].as_str().unwrap_or("").to_owned())
        .collect();
    for field in ["owner", "name", "visibility", "hardware", "paper_url"] {
        assert!(fields.iter().any(|f| f == field), "{field} in {fields:?}");
    }
    assert_eq!(create(new_model("tune", "private")).await.expect("sent").status(), 201);
    assert_eq!(create(new_model("tune", "private")).await.expect("sent").status(), 409, "the address is taken");
}

#[tokio::test]
async fn a_model_is_deleted_unless_a_deployment_runs_it() {
    let system = System::start_with(Options { runner: false, notifier: false, ..Options::default() }).await;
    system.register_models_only().await;
    let created =
        system.request(Method::POST, "/v1/models").json(&new_model("busy", "private")).send().await.expect("sent");
    assert_eq!(created.status(), 201);
    // A deployment of it (made in the database: deployments need a version, which only a
    // training gives a model of an account).
    let store = system.ctx.store().await;
    let account = store.accounts().find_by_name("test-account").await.expect("read").expect("the account");
    use common::store::deployments::{DeploymentRecord, Release, ReleaseConfiguration};
    let deployment = DeploymentRecord {
        id: DeploymentRecord::id_of(&account.id, "uses-busy"),
        account_id: account.id.clone(),
        owner: "test-account".into(),
        name: "uses-busy".into(),
        created_at: bson::DateTime::now(),
        current_release: Release {
            number: 1,
            model: "test-account/busy".parse().expect("model"),
            version: "v1".into(),
            created_at: bson::DateTime::now(),
            created_by: "test".into(),
            configuration: ReleaseConfiguration {
                hardware: common::domain::Pool::parse("cpu").expect("pool"),
                min_instances: 0,
                max_instances: 1,
                priority: None,
            },
        },
    };
    store.deployments().insert(&deployment).await.expect("stored");
    let delete = || system.request(Method::DELETE, "/v1/models/test-account/busy").send();
    assert_eq!(delete().await.expect("sent").status(), 409, "a deployment runs it");
    store.deployments().delete(&account.id, "uses-busy").await.expect("deleted");
    assert_eq!(delete().await.expect("sent").status(), 204);
    assert_eq!(system.get("/v1/models/test-account/busy").await.status(), 404, "gone");
    assert_eq!(delete().await.expect("sent").status(), 404, "deleted once");
}

#[tokio::test]
async fn a_models_links_are_kept_and_shown() {
    let system = System::start_with(Options { runner: false, notifier: false, ..Options::default() }).await;
    let mut body = new_model("linked", "public");
    body["github_url"] = json!("https://github.com/acme/linked");
    body["paper_url"] = json!("https://arxiv.org/abs/2601.00001");
    body["license_url"] = json!(null);
    body["cover_image_url"] = json!("https://example.com/cover.png");
    let created = system.request(Method::POST, "/replicate/v1/models").json(&body).send().await.expect("sent");
    assert_eq!(created.status(), 201);
    for shown in [created.json_body().await, system.get("/v1/models/test-account/linked").await.json_body().await] {
        assert_eq!(shown["github_url"], "https://github.com/acme/linked");
        assert_eq!(shown["paper_url"], "https://arxiv.org/abs/2601.00001");
        assert_eq!(shown["license_url"], Value::Null);
        assert_eq!(shown["cover_image_url"], "https://example.com/cover.png");
    }
}

#[tokio::test]
async fn its_owner_updates_a_models_description_links_and_visibility_and_no_one_else_can() {
    let system = System::start_with(Options { runner: false, notifier: false, ..Options::default() }).await;
    assert_eq!(system.post_json("/v1/models", &new_model("kept", "private")).await.status(), 201);
    let patch = |path: &str, change: Value| system.request(Method::PATCH, path).json(&change).send();
    let change =
        json!({"description": "a better tune", "github_url": "https://github.com/acme/kept", "visibility": "public"});
    let updated = patch("/replicate/v1/models/test-account/kept", change).await.expect("sent");
    assert_eq!(updated.status(), 200);
    let shown = system.get("/v1/models/test-account/kept").await.json_body().await;
    assert_eq!(
        (&shown["description"], &shown["github_url"], &shown["visibility"]),
        (&json!("a better tune"), &json!("https://github.com/acme/kept"), &json!("public")),
        "{shown}"
    );
    assert_eq!(shown["paper_url"], Value::Null, "what was not sent stays");

    let unchanged = patch("/v1/models/test-account/kept", json!({})).await.expect("sent");
    assert_eq!(unchanged.status(), 200, "an empty update changes nothing");
    assert_eq!(unchanged.json_body().await["description"], "a better tune");
    for (change, field) in [(json!({"name": "other"}), "name"), (json!({"github_url": "x"}), "github_url")] {
        let refused = patch("/v1/models/test-account/kept", change).await.expect("sent");
        assert_eq!(refused.status(), 400, "{field}");
        assert_eq!(refused.json_body().await["errors"][0]["field"], field);
    }
    let other = system.bootstrap_account("other").await;
    let theirs = system
        .with_key(Method::PATCH, "/v1/models/test-account/kept", &other)
        .json(&json!({"description": "mine now"}))
        .send()
        .await
        .expect("sent");
    assert_eq!(theirs.status(), 404, "another account's model is not the caller's to change");
    assert_eq!(patch("/v1/models/demo/echo", json!({"description": "x"})).await.expect("sent").status(), 404);
}

#[tokio::test]
async fn a_models_readme_is_its_description_and_its_examples_an_empty_page() {
    let system = System::start_with(Options { runner: false, notifier: false, ..Options::default() }).await;
    assert_eq!(system.post_json("/v1/models", &new_model("told", "private")).await.status(), 201);
    let readme = system.get("/replicate/v1/models/test-account/told/readme").await;
    assert_eq!(readme.status(), 200);
    assert!(readme.headers()["content-type"].to_str().is_ok_and(|t| t.starts_with("text/markdown")));
    assert_eq!(readme.text().await.expect("text"), "# test-account/told\n\na tune\n");
    let examples = system.get("/replicate/v1/models/test-account/told/examples").await.json_body().await;
    assert_eq!(examples, json!({"next": null, "previous": null, "results": [], "total_count": 0}));
    let other = system.bootstrap_account("other").await;
    for path in ["/v1/models/test-account/told/readme", "/v1/models/test-account/told/examples"] {
        let hidden = system.with_key(Method::GET, path, &other).send().await.expect("sent");
        assert_eq!(hidden.status(), 404, "a private model's {path}");
    }
}

/// `models.list` with `sort_by` and `sort_direction`, as Replicate's clients send them:
/// creation order either way, models without a version last by their latest version, and the
/// next page sorted the same way; a bad value is a 400 naming it.
#[tokio::test]
async fn models_are_listed_by_creation_or_latest_version_either_way() {
    let system = System::start_with(Options { runner: false, notifier: false, ..Options::default() }).await;
    system.register_models_only().await;
    // Created in an order that is not their address order.
    for name in ["c-first", "b-second", "a-third"] {
        let created =
            system.request(Method::POST, "/v1/models").json(&new_model(name, "private")).send().await.expect("sent");
        assert_eq!(created.status(), 201);
    }
    let names = |page: &Value| -> Vec<String> {
        page["results"]
            .as_array()
            .expect("a page")
            .iter()
            .map(|m| format!("{}/{}", m["owner"].as_str().unwrap_or(""), m["name"].as_str().unwrap_or("")))
            .collect()
    };
    let ours =
        |all: Vec<String>| -> Vec<String> { all.into_iter().filter(|n| n.starts_with("test-account/")).collect() };
    let system = &system;
    let page = |query: &str| {
        let path = format!("/replicate/v1/models?limit=100&{query}");
        async move { system.get(&path).await.json_body().await }
    };

    let oldest_first = page("sort_by=model_created_at&sort_direction=asc").await;
    assert_eq!(ours(names(&oldest_first)), ["test-account/c-first", "test-account/b-second", "test-account/a-third"]);
    let registered = names(&oldest_first).iter().position(|n| n == "demo/echo").expect("registered models listed");
    assert!(registered < names(&oldest_first).len() - 3, "registered at start, before the account's models");
    let newest_first = page("sort_by=model_created_at").await;
    assert_eq!(
        ours(names(&newest_first)),
        ["test-account/a-third", "test-account/b-second", "test-account/c-first"],
        "desc by default"
    );
    assert_eq!(names(&newest_first)[0], "test-account/a-third");

    // The account's models have no version yet: last, whichever the direction.
    for direction in ["asc", "desc"] {
        let by_version = names(&page(&format!("sort_by=latest_version_created_at&sort_direction={direction}")).await);
        let tail: Vec<&String> = by_version.iter().rev().take(3).collect();
        assert!(tail.iter().all(|n| n.starts_with("test-account/")), "{direction}: {by_version:?}");
        assert!(by_version.iter().any(|n| n == "demo/echo"));
    }

    let first = system.get("/replicate/v1/models?limit=1&sort_by=model_created_at").await.json_body().await;
    assert_eq!(names(&first), ["test-account/a-third"]);
    let next = first["next"].as_str().expect("a next page");
    assert!(next.contains("sort_by=model_created_at") && next.contains("sort_direction=desc"), "{next}");
    let path =
        next.split_once("/replicate/v1").map(|(_, p)| format!("/replicate/v1{p}")).expect("a link of the surface");
    assert_eq!(names(&system.get(&path).await.json_body().await), ["test-account/b-second"]);

    let bad = system.get("/v1/models?sort_by=name&sort_direction=sideways").await;
    assert_eq!(bad.status(), 400);
    let body = bad.json_body().await;
    let fields: Vec<&str> =
        body["errors"].as_array().expect("errors").iter().filter_map(|e| e["field"].as_str()).collect();
    assert_eq!(fields, ["sort_by", "sort_direction"]);
}
