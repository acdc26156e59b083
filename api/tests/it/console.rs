//! The web console over HTTP: sign-in and sessions, the cookie's limits, CSRF and origin
//! checks, and pages for people (escaped values, 404 pages). The browser suite
//! (deploy/testing/clients/browser) drives the same pages in Chromium.

use reqwest::{Method, StatusCode, redirect::Policy};
use serde_json::json;

use crate::harness::{JsonBody, Options, System};

/// A browser's view of the console: its session cookie and the session's form token.
pub(crate) struct Browser<'a> {
    system: &'a System,
    http: reqwest::Client,
    cookie: String,
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder().redirect(Policy::none()).build().expect("client")
}

/// Posts the sign-in form as the login page would.
async fn sign_in_response(system: &System, key: &str, next: &str) -> reqwest::Response {
    no_redirects()
        .post(system.url("/login"))
        .header("origin", &system.base_url)
        .form(&[("api_key", key), ("next", next)])
        .send()
        .await
        .expect("sent")
}

impl<'a> Browser<'a> {
    pub(crate) async fn sign_in(system: &'a System, key: &str) -> Self {
        let response = sign_in_response(system, key, "/").await;
        assert_eq!(response.status(), StatusCode::SEE_OTHER);
        let set_cookie = response.headers()["set-cookie"].to_str().expect("ascii").to_owned();
        let cookie = set_cookie.split(';').next().expect("a pair").to_owned();
        Self { system, http: no_redirects(), cookie }
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        self.http.get(self.system.url(path)).header("cookie", &self.cookie).send().await.expect("sent")
    }

    pub(crate) async fn page(&self, path: &str) -> String {
        let response = self.get(path).await;
        assert_eq!(response.status(), 200, "{path}");
        response.text().await.expect("html")
    }

    /// The session's form token, as every page carries it.
    async fn csrf(&self) -> String {
        let html = self.page("/").await;
        let at = html.find(r#"name="csrf" value=""#).expect("a form token") + r#"name="csrf" value=""#.len();
        html[at..].split('"').next().expect("token").to_owned()
    }

    async fn post(&self, path: &str, form: &[(&str, &str)], origin: Option<&str>) -> reqwest::Response {
        let mut request = self.http.post(self.system.url(path)).header("cookie", &self.cookie).form(form);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send().await.expect("sent")
    }
}

async fn created(system: &System, model: &str, input: serde_json::Value) -> String {
    system.register_models_only().await;
    let p =
        system.post_json(&format!("/v1/models/{model}/predictions"), &json!({"input": input})).await.json_body().await;
    p["id"].as_str().expect("id").to_owned()
}

#[tokio::test]
async fn a_page_without_a_session_sends_the_browser_to_sign_in_and_back() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    let page = no_redirects().get(system.url("/predictions/p_x?tab=logs")).send().await.expect("sent");
    assert_eq!(page.status(), StatusCode::SEE_OTHER);
    assert_eq!(page.headers()["location"], "/login?next=/predictions/p_x%3Ftab%3Dlogs");
    let form = system.http().get(system.url("/login?next=/models")).send().await.expect("sent");
    assert_eq!(form.status(), 200);
    let html = form.text().await.expect("html");
    assert!(html.contains(r#"name="api_key""#) && html.contains(r#"value="/models""#), "{html}");

    let signed_in = sign_in_response(&system, &system.admin_key, "/models").await;
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    assert_eq!(signed_in.headers()["location"], "/models");
    let open_redirect = sign_in_response(&system, &system.admin_key, "//evil.example/x").await;
    assert_eq!(open_redirect.headers()["location"], "/", "next only names a local path");
}

#[tokio::test]
async fn the_session_cookie_is_http_only_lax_and_never_holds_the_key() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    let response = sign_in_response(&system, &system.admin_key, "/").await;
    let cookie = response.headers()["set-cookie"].to_str().expect("ascii").to_owned();
    assert!(cookie.starts_with("console_session="), "{cookie}");
    for flag in ["HttpOnly", "SameSite=Lax", "Path=/"] {
        assert!(cookie.contains(flag), "{flag} in {cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain http: no Secure flag ({cookie})");
    assert!(!cookie.contains(&system.admin_key) && !cookie.contains("psk_"), "{cookie}");
    let browser = Browser::sign_in(&system, &system.admin_key).await;
    assert!(!browser.page("/").await.contains(&system.admin_key), "the key is never put in a page");
}

#[tokio::test]
async fn a_bad_key_gets_a_page_not_json_and_no_session() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    let response = sign_in_response(&system, "psk_not_a_key", "/").await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert!(response.headers().get("set-cookie").is_none());
    assert!(response.headers()["content-type"].to_str().expect("ascii").starts_with("text/html"));
    assert!(response.text().await.expect("html").contains("That key is not valid"));
}

#[tokio::test]
async fn the_prediction_page_escapes_values_and_another_accounts_is_a_404_page() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let id = created(&system, "demo/echo", json!({"prompt": "<b>bold</b>"})).await;
    system.wait_for_terminal(&id, std::time::Duration::from_secs(20)).await;
    let browser = Browser::sign_in(&system, &system.admin_key).await;
    let response = browser.get(&format!("/predictions/{id}")).await;
    assert_eq!(response.status(), 200);
    let csp = response.headers()["content-security-policy"].to_str().expect("ascii").to_owned();
    assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"), "{csp}");
    let html = response.text().await.expect("html");
    let escaped = ["&lt;b&gt;bold&lt;/b&gt;", "&#60;b&#62;bold&#60;/b&#62;"];
    assert!(escaped.iter().any(|e| html.contains(e)) && !html.contains("<b>bold</b>"), "values are escaped");
    assert!(html.contains(r#"id="status""#) && html.contains("succeeded"));
    assert!(!html.contains("<script>"), "no inline script");

    let other = system.bootstrap_account("other").await;
    let stranger = Browser::sign_in(&system, &other).await;
    let theirs = stranger.get(&format!("/predictions/{id}")).await;
    assert_eq!(theirs.status(), 404);
    assert!(theirs.text().await.expect("html").contains("<h1>Not found</h1>"));
    let unknown = system.http().get(system.url("/no/such/page")).header("accept", "text/html").send().await;
    assert_eq!(unknown.expect("sent").status(), 404);
}

#[tokio::test]
async fn the_cookie_alone_never_authenticates_the_api() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    let id = created(&system, "demo/sleep", json!({"seconds": 30})).await;
    let browser = Browser::sign_in(&system, &system.admin_key).await;
    let path = format!("/v1/predictions/{id}/cancel");
    let api = browser.post(&path, &[], Some(&system.base_url)).await;
    assert_eq!(api.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(browser.get("/v1/predictions").await.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(system.get(&format!("/v1/predictions/{id}")).await.json_body().await["status"], "starting");
}

#[tokio::test]
async fn a_console_post_without_its_token_or_from_elsewhere_is_403_and_does_nothing() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    let id = created(&system, "demo/sleep", json!({"seconds": 30})).await;
    let browser = Browser::sign_in(&system, &system.admin_key).await;
    let csrf = browser.csrf().await;
    let path = format!("/predictions/{id}/cancel");
    let ours = system.base_url.clone();
    for (form, origin) in [
        (vec![], Some(ours.as_str())),
        (vec![("csrf", "forged")], Some(ours.as_str())),
        (vec![("csrf", csrf.as_str())], Some("http://evil.example")),
        (vec![("csrf", csrf.as_str())], None),
    ] {
        let response = browser.post(&path, &form, origin).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{form:?} from {origin:?}");
        assert!(response.text().await.expect("html").contains("Not allowed"));
    }
    assert_eq!(system.get(&format!("/v1/predictions/{id}")).await.json_body().await["status"], "starting");
    let canceled = browser.post(&path, &[("csrf", csrf.as_str())], Some(&ours)).await;
    assert_eq!(canceled.status(), StatusCode::SEE_OTHER);
    assert_eq!(system.get(&format!("/v1/predictions/{id}")).await.json_body().await["status"], "canceled");
}

#[tokio::test]
async fn a_read_only_key_sees_but_cannot_cancel_or_administer() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    let id = created(&system, "demo/sleep", json!({"seconds": 30})).await;
    let reader = system
        .request(Method::POST, "/v1/account/api-keys")
        .json(&json!({"scopes": ["read"]}))
        .send()
        .await
        .expect("sent")
        .json_body()
        .await;
    let browser = Browser::sign_in(&system, reader["key"].as_str().expect("key")).await;
    let html = browser.page(&format!("/predictions/{id}")).await;
    assert!(!html.contains(r#"id="cancel""#), "no Cancel button without write");
    let csrf = browser.csrf().await;
    let cancel = browser.post(&format!("/predictions/{id}/cancel"), &[("csrf", &csrf)], Some(&system.base_url)).await;
    assert_eq!(cancel.status(), StatusCode::FORBIDDEN);
    assert_eq!(browser.get("/keys").await.status(), StatusCode::FORBIDDEN);
    assert_eq!(browser.get("/secret").await.status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn signing_out_or_deactivating_the_key_ends_the_session() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    let key = system.request(Method::POST, "/v1/account/api-keys").send().await.expect("sent").json_body().await;
    let (key_id, value) = (key["id"].as_str().expect("id"), key["key"].as_str().expect("key"));
    let first = Browser::sign_in(&system, value).await;
    let second = Browser::sign_in(&system, value).await;
    let csrf = first.csrf().await;
    let out = first.post("/logout", &[("csrf", &csrf)], Some(&system.base_url)).await;
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    assert!(out.headers()["set-cookie"].to_str().expect("ascii").contains("Max-Age=0"));
    assert_eq!(first.get("/").await.status(), StatusCode::SEE_OTHER, "signed out");
    assert_eq!(second.get("/").await.status(), 200, "another session of the key lives on");

    let path = format!("/v1/account/api-keys/{key_id}");
    let r = system.request(Method::PATCH, &path).json(&json!({"is_active": false})).send().await.expect("sent");
    assert_eq!(r.status(), 200);
    assert_eq!(second.get("/").await.status(), StatusCode::SEE_OTHER, "the key's sessions end with it");
}

#[tokio::test]
async fn the_run_form_creates_a_prediction_or_shows_the_fields_error() {
    let system = System::start().await;
    let browser = Browser::sign_in(&system, &system.admin_key).await;
    let form = browser.page("/models/demo/sleep").await;
    assert!(form.contains(r#"name="seconds""#) && form.contains(r#"max="300""#), "from the schema");
    let csrf = browser.csrf().await;
    let bad = browser.post("/models/demo/sleep", &[("csrf", &csrf), ("seconds", "301")], Some(&system.base_url)).await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let html = bad.text().await.expect("html");
    assert!(html.contains(r#"id="error-seconds""#), "{html}");
    let good = browser.post("/models/demo/sleep", &[("csrf", &csrf), ("seconds", "0.1")], Some(&system.base_url)).await;
    assert_eq!(good.status(), StatusCode::SEE_OTHER);
    let location = good.headers()["location"].to_str().expect("ascii").to_owned();
    let id = location.trim_start_matches("/predictions/");
    let done = system.wait_for_terminal(id, std::time::Duration::from_secs(20)).await;
    assert_eq!(done["input"], json!({"seconds": 0.1, "quiet": false}), "an unchecked box is false");
    // It has the deadline of one made through the API (PREDICTION_DEADLINE_SECONDS, 30 min),
    // which the reconciler holds it to should no runner end it.
    let stored = system
        .ctx
        .store()
        .await
        .predictions()
        .get(&common::domain::PredictionId::parse(id).expect("an id"))
        .await
        .expect("read");
    let stored = stored.expect("stored");
    let deadline = stored.deadline_at.expect("a deadline").timestamp_millis() - stored.created_at.timestamp_millis();
    assert_eq!(deadline, 1_800_000);
}

#[tokio::test]
async fn failed_sign_ins_are_rate_limited_per_client() {
    let env = vec![("DEFAULT_RATE_LIMIT_RPM", "3".to_owned())];
    let system = System::start_with(Options { runner: false, notifier: false, env }).await;
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(sign_in_response(&system, "psk_wrong", "/").await.status().as_u16());
    }
    assert_eq!(&statuses[..3], [401, 401, 401], "{statuses:?}");
    assert_eq!(statuses[4], 429, "past the limit: {statuses:?}");
    let limited = sign_in_response(&system, "psk_wrong", "/").await;
    assert_eq!(limited.headers()["retry-after"], "60");
    assert!(limited.text().await.expect("html").contains("Too many failed sign-ins"));
}

#[tokio::test]
async fn the_run_form_uploads_a_file_input_which_the_files_page_lists_and_deletes() {
    let system = System::start().await;
    let browser = Browser::sign_in(&system, &system.admin_key).await;
    let form = browser.page("/models/demo/checksum").await;
    assert!(form.contains(r#"type="file" id="input-file" name="file""#), "a file picker for format: uri");
    assert!(form.contains(r#"enctype="multipart/form-data""#));
    let csrf = browser.csrf().await;
    let bytes = b"\x89PNG\r\n\x1a\nconsole upload".to_vec();
    let run = |csrf: String, first_the_file: bool| {
        let file =
            reqwest::multipart::Part::bytes(bytes.clone()).file_name("pic.png").mime_str("image/png").expect("mime");
        let form = if first_the_file {
            reqwest::multipart::Form::new().part("file", file).text("csrf", csrf)
        } else {
            reqwest::multipart::Form::new().text("csrf", csrf).part("file", file)
        };
        browser
            .http
            .post(system.url("/models/demo/checksum"))
            .header("cookie", &browser.cookie)
            .header("origin", &system.base_url)
            .multipart(form)
            .send()
    };
    // A file before the token is refused, and nothing is stored.
    assert_eq!(run(csrf.clone(), true).await.expect("sent").status(), StatusCode::FORBIDDEN);
    assert_eq!(system.get("/v1/files").await.json_body().await["total_count"], 0);

    let good = run(csrf.clone(), false).await.expect("sent");
    assert_eq!(good.status(), StatusCode::SEE_OTHER);
    let id = good.headers()["location"].to_str().expect("ascii").trim_start_matches("/predictions/").to_owned();
    let done = system.wait_for_terminal(&id, std::time::Duration::from_secs(20)).await;
    let output: serde_json::Value = serde_json::from_str(done["output"].as_str().expect("output")).expect("json");
    assert_eq!(output["size"], bytes.len());
    let file_url = done["input"]["file"].as_str().expect("the file's URL").to_owned();
    let file_id = file_url.rsplit('/').next().expect("id").to_owned();

    let page = browser.page(&format!("/predictions/{id}")).await;
    assert!(page.contains(&format!(r#"<img src="/files/{file_id}""#)), "the input image inline: {page}");
    let files = browser.page("/files").await;
    assert!(files.contains(&format!(r#"data-file-id="{file_id}""#)) && files.contains("pic.png"));
    let delete = browser.post(&format!("/files/{file_id}/delete"), &[("csrf", &csrf)], Some(&system.base_url)).await;
    assert_eq!(delete.status(), StatusCode::SEE_OTHER);
    assert_eq!(browser.get(&format!("/files/{file_id}")).await.status(), StatusCode::NOT_FOUND);
    assert!(!browser.page("/files").await.contains(&file_id));
}

#[tokio::test]
async fn the_account_page_shows_the_concurrency_cap_the_operator_set() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    let browser = Browser::sign_in(&system, &system.admin_key).await;
    let html = browser.page("/account").await;
    assert!(html.contains("test-account"), "the account's name");
    assert!(html.contains(r#"id="account-max-concurrency">none<"#), "no cap by default: {html}");
    system.set_max_concurrency("test-account", Some(3)).await;
    let html = browser.page("/account").await;
    assert!(html.contains(r#"id="account-max-concurrency">3 predictions at once<"#), "{html}");
    system.set_max_concurrency("test-account", None).await;
    assert!(browser.page("/account").await.contains(r#"id="account-max-concurrency">none<"#), "lifted");
}

#[tokio::test]
async fn a_run_or_train_form_without_files_larger_than_the_api_limit_is_413_and_runs_nothing() {
    let system = System::start_with(Options { runner: false, notifier: false, ..Options::default() }).await;
    system.register_models_only().await;
    let browser = Browser::sign_in(&system, &system.admin_key).await;
    let csrf = browser.csrf().await;
    let huge = "x".repeat(api::app::MAX_BODY_BYTES + 1);
    for path in ["/models/demo/echo", "/models/demo/echo/train"] {
        let refused = browser.post(path, &[("csrf", &csrf), ("prompt", &huge)], Some(&system.base_url)).await;
        assert_eq!(refused.status(), StatusCode::PAYLOAD_TOO_LARGE, "{path}");
        assert!(refused.text().await.expect("html").contains("at most"), "{path}: a page that says why");
    }
    let listed = system.get("/v1/predictions").await.json_body().await;
    assert_eq!(listed["results"], json!([]), "nothing made");
    // Within the limit, the form is read as before.
    let fine = browser.post("/models/demo/echo", &[("csrf", &csrf), ("prompt", "hi")], Some(&system.base_url)).await;
    assert_eq!(fine.status(), StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn the_predictions_list_pages_twenty_at_a_time_newest_first() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let mut ids = Vec::new();
    for n in 0..21 {
        ids.push(created(&system, "demo/echo", json!({"prompt": format!("p{n}")})).await);
    }
    let browser = Browser::sign_in(&system, &system.admin_key).await;
    let rows = |html: &str| html.matches(r#"<td><a href="/predictions/"#).count();
    let first = browser.page("/").await;
    assert_eq!(rows(&first), 20, "one page of 20");
    assert!(first.contains(r#"href="/?page=1" id="next-page""#) && !first.contains("previous-page"), "Older only");
    assert!(first.contains(&format!("/predictions/{}", ids[20])), "the newest is first");
    let second = browser.page("/?page=1").await;
    assert_eq!(rows(&second), 1);
    assert!(second.contains(&format!("/predictions/{}", ids[0])), "the oldest is last");
    assert!(second.contains(r#"href="/?page=0" id="previous-page""#) && !second.contains("next-page"), "Newer only");
    let trainings = browser.page("/trainings?page=3").await;
    assert!(!trainings.contains("next-page") && !trainings.contains("previous-page"), "no trainings, no pages");
}

#[tokio::test]
async fn the_keys_and_files_lists_page_twenty_at_a_time_newest_first() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    // The bootstrap key and 20 more: the newest is first, the bootstrap key alone on page 2.
    let mut names = Vec::new();
    for n in 0..20 {
        let name = format!("paged-{n}");
        let created = system
            .with_key(reqwest::Method::POST, "/v1/account/api-keys", &system.admin_key)
            .header("content-type", "application/json")
            .body(json!({"name": name}).to_string())
            .send()
            .await
            .expect("sent");
        assert_eq!(created.status(), 201);
        names.push(name);
    }
    let browser = Browser::sign_in(&system, &system.admin_key).await;
    let rows = |html: &str| html.matches("<tr data-key-id=").count();
    let first = browser.page("/keys").await;
    assert_eq!(rows(&first), 20, "one page of 20");
    assert!(first.contains(r#"href="/keys?page=1" id="next-page""#) && !first.contains("previous-page"), "Older only");
    assert!(first.contains("<td>paged-19") && !first.contains("<td>bootstrap admin key"), "the newest first");
    let second = browser.page("/keys?page=1").await;
    assert_eq!(rows(&second), 1);
    assert!(second.contains("<td>bootstrap admin key"), "the oldest last");
    assert!(
        second.contains(r#"href="/keys?page=0" id="previous-page""#) && !second.contains("next-page"),
        "Newer only"
    );
    assert!(second.contains("1 of 21"), "the count of the whole list");
    // A list of one page has no links; a page past the end links back only.
    let files = browser.page("/files").await;
    assert!(!files.contains("next-page") && !files.contains("previous-page"), "no files, no pages");
    let deployments = browser.page("/deployments?page=2").await;
    assert!(!deployments.contains("next-page"), "nothing past the end");
}

#[tokio::test]
async fn the_model_page_shows_the_servers_runners_start_for_it_with_their_last_boot() {
    use common::store::runners::{InstanceReport, RunnerRecord};
    let system = System::start().await;
    let browser = Browser::sign_in(&system, &system.admin_key).await;
    let page = browser.page("/models/demo/sleep").await;
    assert!(page.contains(r#"id="no-instances""#), "a built-in model has no server of its own: {page}");
    // A runner that starts servers of the model itself reports them with its presence.
    let model: common::domain::ModelRef = "demo/sleep".parse().expect("a model");
    let report = |version: &str, state: &str, boot_seconds: Option<f64>, last_exit: Option<&str>| InstanceReport {
        model: model.clone(),
        version: version.into(),
        state: state.into(),
        booted_at: Some(bson::DateTime::from_millis(1_764_670_000_000)),
        boot_seconds,
        last_exit: last_exit.map(Into::into),
    };
    let now = bson::DateTime::now();
    let record = RunnerRecord {
        id: "gpu-1:42:abc".into(),
        pool: common::domain::Pool::default_pool(),
        serves: Vec::new(),
        started_at: now,
        seen_at: now,
        runs: Vec::new(),
        instances: vec![report("v1", "busy", Some(12.5), None), report("v1-train", "stopped", None, Some("crashed"))],
    };
    system.ctx.store().await.runners().heartbeat(&record).await.expect("presence written");
    // The api reads the live runners at most every 2 s.
    let shown = testkit::eventually(std::time::Duration::from_secs(20), || async {
        let page = browser.page("/models/demo/sleep").await;
        page.contains(r#"id="instances""#).then_some(page)
    })
    .await
    .expect("the page lists the instances");
    assert!(shown.contains(r#"data-runner="gpu-1:42:abc" data-version="v1""#), "{shown}");
    assert!(shown.contains(r#"<span class="badge busy">busy</span>"#), "{shown}");
    assert!(shown.contains("2025-12-02 10:06:40 UTC, ready in 12.5 s"), "its last boot: {shown}");
    assert!(shown.contains(r#"<td class="last-exit">crashed</td>"#), "the trainer's last exit: {shown}");
}
