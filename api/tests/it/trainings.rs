//! Trainings through the api, a runner and real Cog servers (coglet 0.23.1, no Docker): the
//! `tune` fixture's trainer writes weights holding a suffix, and its predictor appends the
//! suffix of the weights it is handed in `replicate_weights`. A training makes a new version
//! of an account's own model; that version, and the model by name, run on the base's runner
//! with the weights; the base model is unchanged.

use std::time::Duration;

use mongo_faults::{Fault, MongoFaults};
use reqwest::Method;
use serde_json::{Value, json};
use testkit::{
    cog::{CogMode, CogServer},
    eventually,
};

use receiver::Receiver;

use crate::harness::{JsonBody, Options, System};
use common::signing;

/// The tune fixture's predictor and trainer behind one runner, and a destination model.
async fn tune_system() -> (System, CogServer, CogServer, String) {
    tune_system_with(false, &[]).await
}

async fn tune_system_with(notifier: bool, more: &[(&'static str, &str)]) -> (System, CogServer, CogServer, String) {
    let predictor = CogServer::start_ready("tune", CogMode::Predict).await;
    let trainer = CogServer::start_ready("tune", CogMode::Train).await;
    let mut env = vec![
        ("RUNNER_COG", format!("acme/tune={}", predictor.url)),
        ("RUNNER_COG_TRAIN", format!("acme/tune={}", trainer.url)),
    ];
    env.extend(more.iter().map(|(k, v)| (*k, (*v).to_owned())));
    let system = System::start_with(Options { notifier, env, ..Options::default() }).await;
    let version = system.registered_version("acme/tune").await;
    create_destination(&system).await;
    (system, predictor, trainer, version)
}

/// Creates the trainings' destination, `test-account/tuned`.
async fn create_destination(system: &System) {
    let created = system
        .post_json(
            "/v1/models",
            &json!({"owner": "test-account", "name": "tuned", "visibility": "private", "hardware": "cpu"}),
        )
        .await;
    assert_eq!(created.status(), 201);
}

async fn train(system: &System, root: &str, version: &str, input: Value) -> reqwest::Response {
    system
        .post_json(
            &format!("{root}/models/acme/tune/versions/{version}/trainings"),
            &json!({"destination": "test-account/tuned", "input": input}),
        )
        .await
}

async fn training_until(system: &System, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    eventually(Duration::from_secs(60), || async {
        let got = system.get(&format!("/replicate/v1/trainings/{id}")).await.json_body().await;
        done(&got).then_some(got)
    })
    .await
    .unwrap_or_else(|| panic!("training {id} did not get there"))
}

async fn output_of(system: &System, body: Value) -> Value {
    let created = system
        .request(Method::POST, "/v1/predictions")
        .header("prefer", "wait=30")
        .json(&body)
        .send()
        .await
        .expect("sent");
    assert_eq!(created.status(), 201, "{body}");
    let prediction = created.json_body().await;
    let id = prediction["id"].as_str().expect("an id").to_owned();
    system.wait_for_terminal(&id, Duration::from_secs(30)).await
}

#[tokio::test]
async fn a_training_records_a_version_that_runs_with_its_weights_and_leaves_the_base_unchanged() {
    let (system, _predictor, _trainer, version) = tune_system().await;
    let created = train(&system, "/replicate/v1", &version, json!({"suffix": "hey", "strength": 2})).await;
    assert_eq!(created.status(), 201);
    let training = created.json_body().await;
    let id = training["id"].as_str().expect("an id").to_owned();
    assert_eq!(training["status"], "starting");
    assert_eq!(training["model"], "acme/tune");
    assert_eq!(training["version"], version.as_str());
    assert_eq!(training["destination"], "test-account/tuned");
    assert!(training["urls"]["get"].as_str().is_some_and(|u| u.ends_with(&format!("/replicate/v1/trainings/{id}"))));

    let done = training_until(&system, &id, |t| t["status"] != "starting" && t["status"] != "processing").await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert!(done["logs"].as_str().is_some_and(|l| l.contains("training on 'hey' x2")), "{done}");
    let trained = done["output"]["version"].as_str().expect("output.version").to_owned();
    let (model, trained_id) = trained.split_once(':').expect("owner/name:id");
    assert_eq!(model, "test-account/tuned");
    let weights = done["output"]["weights"].as_str().expect("output.weights");
    let weights = system.http().get(weights).bearer_auth(&system.admin_key).send().await.expect("sent");
    assert_eq!(weights.status(), 200, "the weights are a file of this service");
    assert_eq!(weights.text().await.expect("text"), "hey hey");

    // The destination's latest version is the trained one, and says what it was trained from.
    let destination = system.get("/v1/models/test-account/tuned").await.json_body().await;
    let latest = &destination["latest_version"];
    assert_eq!(latest["id"], trained_id);
    assert_eq!(latest["trained_from"]["model"], "acme/tune");
    assert_eq!(latest["trained_from"]["version"], version.as_str());
    assert_eq!(latest["trained_from"]["training"], id.as_str());
    let input = &latest["openapi_schema"]["components"]["schemas"]["Input"]["properties"];
    assert!(input.get("prompt").is_some() && input.get("replicate_weights").is_none(), "{input}");

    // The trained version by id, the model by name, and the base model unchanged.
    let by_version = output_of(&system, json!({"version": trained, "input": {"prompt": "hi"}})).await;
    assert_eq!(by_version["output"], "hi hey hey", "{by_version}");
    assert_eq!(by_version["model"], "test-account/tuned");
    assert_eq!(by_version["version"], trained_id);
    let by_name = output_of(&system, json!({"version": "test-account/tuned", "input": {"prompt": "yo"}})).await;
    assert_eq!(by_name["output"], "yo hey hey", "{by_name}");
    let base = output_of(&system, json!({"version": "acme/tune", "input": {"prompt": "hi"}})).await;
    assert_eq!(base["output"], "hi", "{base}");

    // Trainings have their own list; predictions do not list them.
    let trainings = system.get("/v1/trainings").await.json_body().await;
    let ids: Vec<&str> =
        trainings["results"].as_array().expect("a page").iter().filter_map(|t| t["id"].as_str()).collect();
    assert_eq!(ids, vec![id.as_str()]);
    let predictions = system.get("/v1/predictions?limit=100").await.json_body().await;
    assert!(predictions["results"].as_array().expect("a page").iter().all(|p| p["id"] != id.as_str()));
    assert_eq!(system.get(&format!("/v1/predictions/{id}")).await.status(), 404, "a training is not a prediction");

    // Usage: the training by its kind, the fine-tune's predictions under the model they name.
    let counted = eventually(Duration::from_secs(20), || async {
        let usage = system.get("/v1/usage?group_by=kind,model").await.json_body().await;
        let groups: Vec<(String, String, i64)> = usage["results"]
            .as_array()?
            .iter()
            .flat_map(|bucket| bucket["groups"].as_array().cloned().unwrap_or_default())
            .map(|g| {
                let kind = g["kind"].as_str().unwrap_or_default().to_owned();
                (
                    kind,
                    g["model"].as_str().unwrap_or_default().to_owned(),
                    g["count"]["succeeded"].as_i64().unwrap_or(0),
                )
            })
            .collect();
        let has = |kind: &str, model: &str, n: i64| groups.iter().any(|g| g.0 == kind && g.1 == model && g.2 == n);
        (has("training", "acme/tune", 1)
            && has("prediction", "test-account/tuned", 2)
            && has("prediction", "acme/tune", 1))
        .then_some(())
    })
    .await;
    assert!(counted.is_some(), "usage by kind and model");

    // A version a deployment runs is not deleted (deployments run registered models today, so
    // the release is written as a later one would be); an unknown one is 404.
    let version_path = format!("/v1/models/test-account/tuned/versions/{trained_id}");
    let deployments = system.ctx.store().await.database().collection::<bson::Document>("deployments");
    let release = bson::doc! { "_id": "test-account/tuned-app",
    "current_release": { "model": "test-account/tuned", "version": trained_id } };
    deployments.insert_one(release).await.expect("a release");
    let busy = system.request(Method::DELETE, &version_path).send().await.expect("sent");
    assert_eq!(busy.status(), 409, "a deployment runs it");
    deployments.delete_one(bson::doc! { "_id": "test-account/tuned-app" }).await.expect("gone");
    let unknown = system.request(Method::DELETE, "/v1/models/test-account/tuned/versions/nope").send().await;
    assert_eq!(unknown.expect("sent").status(), 404);

    // Deleting a version: gone from the list, `latest_version` moves, its weights go.
    let weights_url = done["output"]["weights"].as_str().expect("weights").to_owned();
    let gone = system.request(Method::DELETE, &version_path).send().await.expect("sent");
    assert_eq!(gone.status(), 204);
    assert_eq!(system.get(&version_path).await.status(), 404);
    let listed = system.get("/v1/models/test-account/tuned/versions").await.json_body().await;
    assert_eq!(listed["results"], json!([]), "{listed}");
    let model = system.get("/v1/models/test-account/tuned").await.json_body().await;
    assert_eq!(model["latest_version"], Value::Null, "no version left");
    let weights = system.http().get(&weights_url).bearer_auth(&system.admin_key).send().await.expect("sent");
    assert_eq!(weights.status(), 404, "the weights went with the version");

    // Deleting the destination takes its versions with it.
    let deleted = system.request(Method::DELETE, "/v1/models/test-account/tuned").send().await.expect("sent");
    assert_eq!(deleted.status(), 204);
    let recreated = system
        .post_json(
            "/v1/models",
            &json!({"owner": "test-account", "name": "tuned", "visibility": "private", "hardware": "cpu"}),
        )
        .await;
    assert_eq!(recreated.status(), 201);
    assert_eq!(recreated.json_body().await["latest_version"], Value::Null, "a new model has no old versions");
}

#[tokio::test]
async fn bad_input_a_version_without_a_trainer_and_another_accounts_destination_are_refused() {
    let (system, _predictor, _trainer, version) = tune_system().await;
    let bad = train(&system, "/v1", &version, json!({"strength": 9})).await;
    assert_eq!(bad.status(), 400);
    let problem = bad.json_body().await;
    let fields: Vec<&str> =
        problem["errors"].as_array().expect("errors").iter().filter_map(|e| e["field"].as_str()).collect();
    assert!(fields.contains(&"input.suffix") && fields.contains(&"input.strength"), "{problem}");

    let echo = system.get("/v1/models/demo/echo").await.json_body().await;
    let echo_version = echo["latest_version"]["id"].as_str().expect("a version");
    let untrainable = system
        .post_json(
            &format!("/v1/models/demo/echo/versions/{echo_version}/trainings"),
            &json!({"destination": "test-account/tuned", "input": {}}),
        )
        .await;
    assert_eq!(untrainable.status(), 400);
    let problem = untrainable.json_body().await;
    assert_eq!(problem["errors"][0]["field"], "version", "{problem}");

    let other = system.bootstrap_account("other").await;
    let theirs = system
        .with_key(Method::POST, &format!("/v1/models/acme/tune/versions/{version}/trainings"), &other)
        .json(&json!({"destination": "test-account/tuned", "input": {"suffix": "x"}}))
        .send()
        .await
        .expect("sent");
    assert_eq!(theirs.status(), 404, "another account's model is no destination");
    let mine = train(&system, "/v1", &version, json!({"suffix": "mine"})).await.json_body().await;
    let id = mine["id"].as_str().expect("an id");
    let seen = system.with_key(Method::GET, &format!("/v1/trainings/{id}"), &other).send().await.expect("sent");
    assert_eq!(seen.status(), 404, "another account sees nothing");
    let listed = system.with_key(Method::GET, "/v1/trainings", &other).send().await.expect("sent").json_body().await;
    assert_eq!(listed["results"], json!([]));
    let missing = system.post_json("/v1/models/acme/tune/versions/nope/trainings", &json!({})).await;
    assert_eq!(missing.status(), 404);

    // An Idempotency-Key gives back the first training of the key.
    let once = || {
        system
            .request(Method::POST, &format!("/v1/models/acme/tune/versions/{version}/trainings"))
            .header("idempotency-key", "train-once")
            .json(&json!({"destination": "test-account/tuned", "input": {"suffix": "once"}}))
            .send()
    };
    let first = once().await.expect("sent");
    assert_eq!(first.status(), 201);
    let again = once().await.expect("sent");
    assert_eq!(again.status(), 201, "the same key answers the first training");
    assert_eq!(again.headers().get("idempotent-replayed").and_then(|v| v.to_str().ok()), Some("true"));
    let (first, again) = (first.json_body().await, again.json_body().await);
    assert_eq!(first["id"], again["id"]);
    assert_eq!(again["destination"], "test-account/tuned", "the training's shape");

    // A training's deadline (TRAINING_DEADLINE_SECONDS) is shortened by Cancel-After.
    let hurried = system
        .request(Method::POST, &format!("/v1/models/acme/tune/versions/{version}/trainings"))
        .header("cancel-after", "1s")
        .json(&json!({"destination": "test-account/tuned", "input": {"suffix": "slow", "seconds": 20}}))
        .send()
        .await
        .expect("sent")
        .json_body()
        .await;
    let id = hurried["id"].as_str().expect("an id");
    let ended = eventually(Duration::from_secs(30), || async {
        let got = system.get(&format!("/v1/trainings/{id}")).await.json_body().await;
        (got["status"] != "starting" && got["status"] != "processing").then_some(got)
    })
    .await
    .expect("the training ended at its deadline");
    // The client's deadline cancels it: reached while it ran, or before it started.
    assert_eq!(ended["status"], "canceled", "{ended}");
    let code = ended["error"]["code"].as_str();
    assert!(matches!(code, Some("PREDICTION_DEADLINE_REACHED" | "PREDICTION_DEADLINE_BEFORE_START")), "{ended}");
}

#[tokio::test]
async fn a_training_waits_while_its_trainer_is_busy_and_a_cancel_reaches_the_trainer() {
    let (system, _predictor, trainer, version) = tune_system().await;
    let long = train(&system, "/v1", &version, json!({"suffix": "slow", "seconds": 60})).await.json_body().await;
    let long_id = long["id"].as_str().expect("an id").to_owned();
    training_until(&system, &long_id, |t| t["status"] == "processing").await;
    let next = train(&system, "/v1", &version, json!({"suffix": "next"})).await.json_body().await;
    let next_id = next["id"].as_str().expect("an id").to_owned();
    // Predictions of the model go on beside the training.
    let base = output_of(&system, json!({"version": "acme/tune", "input": {"prompt": "meanwhile"}})).await;
    assert_eq!(base["output"], "meanwhile");
    let waiting = system.get(&format!("/v1/trainings/{next_id}")).await.json_body().await;
    assert_eq!(waiting["status"], "starting", "the second training waits for the trainer");

    let canceled = system.request(Method::POST, &format!("/v1/trainings/{long_id}/cancel")).send().await.expect("sent");
    assert_eq!(canceled.status(), 200);
    assert_eq!(canceled.json_body().await["status"], "canceled");
    let http = reqwest::Client::new();
    let idle = eventually(Duration::from_secs(20), || async {
        let health: Value = http.get(format!("{}/health-check", trainer.url)).send().await.ok()?.json().await.ok()?;
        (health["status"] == "READY").then_some(())
    })
    .await;
    assert!(idle.is_some(), "the trainer stopped the canceled training");
    let next = training_until(&system, &next_id, |t| t["status"] == "succeeded").await;
    assert!(next["output"]["version"].as_str().is_some_and(|v| v.starts_with("test-account/tuned:")), "{next}");
}

#[tokio::test]
async fn weights_of_megabytes_come_back_whole() {
    let (system, _predictor, _trainer, version) = tune_system().await;
    // 4.5 MB of weights: past axum's default body limit on the runner's callbacks (2 MB) and
    // past the output limit of predictions (4 MiB).
    let suffix = "w".repeat(900_000);
    let created = train(&system, "/v1", &version, json!({"suffix": suffix, "strength": 5})).await;
    assert_eq!(created.status(), 201);
    let id = created.json_body().await["id"].as_str().expect("an id").to_owned();
    let done = training_until(&system, &id, |t| t["status"] != "starting" && t["status"] != "processing").await;
    assert_eq!(done["status"], "succeeded", "{}", done["error"]);
    let weights = done["output"]["weights"].as_str().expect("weights");
    let bytes = system.http().get(weights).bearer_auth(&system.admin_key).send().await.expect("sent");
    assert_eq!(bytes.bytes().await.expect("bytes").len(), 5 * 900_000 + 4, "five copies and four spaces");
}

#[tokio::test]
async fn a_public_destinations_version_runs_for_every_account_and_a_private_ones_for_its_own_only() {
    let (system, _predictor, _trainer, version) = tune_system().await;
    let public = system
        .post_json(
            "/v1/models",
            &json!({"owner": "test-account", "name": "shared", "visibility": "public", "hardware": "cpu"}),
        )
        .await;
    assert_eq!(public.status(), 201);
    let mut trained = Vec::new();
    for destination in ["test-account/shared", "test-account/tuned"] {
        let created = system
            .post_json(
                &format!("/v1/models/acme/tune/versions/{version}/trainings"),
                &json!({"destination": destination, "input": {"suffix": "shared"}}),
            )
            .await
            .json_body()
            .await;
        let id = created["id"].as_str().expect("an id").to_owned();
        let done = training_until(&system, &id, |t| t["status"] == "succeeded").await;
        trained.push(done["output"]["version"].as_str().expect("a version").to_owned());
    }
    let other = system.bootstrap_account("other").await;
    let run_as_other = |version: String| {
        system
            .with_key(Method::POST, "/v1/predictions", &other)
            .header("prefer", "wait=30")
            .json(&json!({"version": version, "input": {"prompt": "theirs"}}))
            .send()
    };
    let public_run = run_as_other(trained[0].clone()).await.expect("sent");
    assert_eq!(public_run.status(), 201);
    let public_run = public_run.json_body().await;
    let id = public_run["id"].as_str().expect("an id");
    let done = system.wait_for_terminal_as(&other, id, Duration::from_secs(30)).await;
    assert_eq!(done["output"], "theirs shared", "another account runs a public fine-tune with its weights: {done}");
    let private_run = run_as_other(trained[1].clone()).await.expect("sent");
    assert_eq!(private_run.status(), 404, "a private fine-tune is not revealed");
}

#[tokio::test]
async fn a_trainings_webhooks_are_a_predictions_signed_filtered_and_in_the_shape_of_its_surface() {
    let (system, _predictor, _trainer, version) = tune_system_with(true, &[]).await;
    let receiver = Receiver::start().await;
    let created = system
        .post_json(
            &format!("/replicate/v1/models/acme/tune/versions/{version}/trainings"),
            &json!({"destination": "test-account/tuned", "input": {"suffix": "hook"},
                    "webhook": receiver.url(), "webhook_events_filter": ["start", "completed"]}),
        )
        .await
        .json_body()
        .await;
    let id = created["id"].as_str().expect("an id").to_owned();
    let done = training_until(&system, &id, |t| t["status"] == "succeeded").await;
    let completed = eventually(Duration::from_secs(20), || async { receiver.of_event("completed").into_iter().next() })
        .await
        .expect("the completed webhook arrived");
    let timestamp: i64 = completed.header("webhook-timestamp").parse().expect("a unix timestamp");
    assert!(
        signing::verify(
            &system.secret,
            completed.header("webhook-id"),
            timestamp,
            &completed.body,
            completed.header("webhook-signature")
        ),
        "signed with the account's secret"
    );
    let payload = completed.json();
    assert_eq!(payload["id"], id.as_str());
    assert_eq!(payload["status"], "succeeded");
    assert_eq!(payload["destination"], "test-account/tuned");
    assert_eq!(payload["output"]["version"], done["output"]["version"], "output is the object");
    assert!(payload["urls"]["get"].as_str().is_some_and(|u| u.ends_with(&format!("/replicate/v1/trainings/{id}"))));
    assert_eq!(receiver.of_event("start").len(), 1);
    assert!(receiver.of_event("logs").is_empty() && receiver.of_event("output").is_empty(), "the filter holds");
}

#[tokio::test]
async fn a_training_has_its_own_deadline_not_a_predictions() {
    let deadlines = [("PREDICTION_DEADLINE_SECONDS", "3"), ("TRAINING_DEADLINE_SECONDS", "10")];
    let (system, _predictor, _trainer, version) = tune_system_with(false, &deadlines).await;
    let body = json!({"input": {"seconds": 5}});
    let prediction = system.post_json("/v1/models/demo/sleep/predictions", &body).await.json_body().await;
    // Past a prediction's deadline, within a training's.
    let within = train(&system, "/v1", &version, json!({"suffix": "within", "seconds": 4})).await.json_body().await;
    // Past a training's deadline too.
    let past = train(&system, "/v1", &version, json!({"suffix": "past", "seconds": 30})).await.json_body().await;

    let prediction = system.wait_for_terminal(prediction["id"].as_str().expect("an id"), Duration::from_secs(30)).await;
    assert_eq!((&prediction["status"], &prediction["error"]["code"]), (&json!("failed"), &json!("PREDICTION_TIMEOUT")));
    let ended = |t: &Value| t["status"] != "starting" && t["status"] != "processing";
    let within = training_until(&system, within["id"].as_str().expect("an id"), ended).await;
    assert_eq!(within["status"], "succeeded", "{}", within["error"]);
    let past_id = past["id"].as_str().expect("an id");
    training_until(&system, past_id, ended).await;
    let past = system.get(&format!("/v1/trainings/{past_id}")).await.json_body().await;
    assert_eq!((&past["status"], &past["error"]["code"]), (&json!("failed"), &json!("PREDICTION_TIMEOUT")), "{past}");
}

/// The ids of the files `GET /v1/files` lists, each with its `expires_at`.
async fn listed_files(system: &System) -> Vec<(String, Value)> {
    let listed = system.get("/v1/files").await.json_body().await;
    let files = listed["results"].as_array().cloned().unwrap_or_default();
    files.iter().map(|f| (f["id"].as_str().unwrap_or_default().to_owned(), f["expires_at"].clone())).collect()
}

#[tokio::test]
async fn a_version_whose_recording_fails_loses_its_answer_or_is_unconfirmed_is_recorded_once_with_its_weights() {
    let real = testkit::infra().mongodb_uri.clone();
    let faults = MongoFaults::start(testkit::host_port(&real)).await.expect("proxy");
    let uri = faults.uri(&real);
    let (system, _predictor, _trainer, version) = tune_system_with(false, &[("MONGODB_URI", &uri)]).await;
    use std::sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    };
    let unconfirmed = Arc::new(AtomicBool::new(false));
    let recording = |c: &mongo_faults::Command| c.name == "findAndModify" && c.collection == "model_versions";
    let mut weights = Vec::new();
    // The first training's recording is refused twice; the second's applies and its answer is
    // lost (the stand-in is no replica set, so the driver does not retry it itself); the
    // third's applies and its answer says its wait for the majority timed out (code 64), and
    // the next majority read of the version, lagging behind the primary, does not see it.
    let cases = [
        ("refused", Fault::Error { code: 2 }, 2),
        ("lost", Fault::LoseReply, 1),
        ("unconfirmed", Fault::Unconfirmed, 1),
    ];
    let lagging = unconfirmed.clone();
    faults.inject(1, Fault::Answer(Vec::new()), move |c| {
        lagging.load(Ordering::Acquire) && c.collection == "model_versions" && c.lagging_read_by_id().is_some()
    });
    for (suffix, fault, times) in cases {
        let arms = matches!(fault, Fault::Unconfirmed).then(|| unconfirmed.clone());
        faults.inject(times, fault, move |c| {
            let it = recording(c);
            if let Some(flag) = arms.as_ref().filter(|_| it) {
                flag.store(true, Ordering::Release);
            }
            it
        });
        let created = train(&system, "/v1", &version, json!({"suffix": suffix})).await;
        assert_eq!(created.status(), 201);
        let id = created.json_body().await["id"].as_str().expect("an id").to_owned();
        let done = training_until(&system, &id, |t| t["status"] != "starting" && t["status"] != "processing").await;
        assert_eq!(done["status"], "succeeded", "{done}");
        let url = done["output"]["weights"].as_str().expect("weights").to_owned();
        let read = system.http().get(&url).bearer_auth(&system.admin_key).send().await.expect("sent");
        assert_eq!(read.text().await.expect("text"), suffix, "the version's weights are there");
        let file_id = url.split("/files/").nth(1).and_then(|rest| rest.split('/').next()).expect("a file URL");
        weights.push(file_id.to_owned());
    }
    assert_eq!(faults.injected().len(), 4, "every fault was met: {:?}", faults.injected());
    let versions = system.get("/v1/models/test-account/tuned/versions").await.json_body().await;
    assert_eq!(versions["results"].as_array().map(Vec::len), Some(3), "one version each: {versions}");
    // The account's files are the three versions' weights, kept for good; the copies the
    // refused tries stored are gone.
    let mut files = listed_files(&system).await;
    files.sort_by(|a, b| a.0.cmp(&b.0));
    weights.sort();
    assert_eq!(files.iter().map(|f| f.0.clone()).collect::<Vec<_>>(), weights, "{files:?}");
    assert!(files.iter().all(|f| f.1.is_null()), "no expiry once the version is recorded: {files:?}");
}

#[tokio::test]
async fn a_model_delete_that_fails_part_way_leaves_the_model_and_the_next_delete_finishes_it() {
    let real = testkit::infra().mongodb_uri.clone();
    let faults = MongoFaults::start(testkit::host_port(&real)).await.expect("proxy");
    let uri = faults.uri(&real);
    let (system, _predictor, _trainer, version) = tune_system_with(false, &[("MONGODB_URI", &uri)]).await;
    let created = train(&system, "/v1", &version, json!({"suffix": "gone"})).await;
    let id = created.json_body().await["id"].as_str().expect("an id").to_owned();
    let done = training_until(&system, &id, |t| t["status"] != "starting" && t["status"] != "processing").await;
    let weights = done["output"]["weights"].as_str().expect("weights").to_owned();

    // Removing the versions fails: the model is still there, its weights still readable.
    faults.inject(1, Fault::Error { code: 2 }, |c| c.name == "delete" && c.collection == "model_versions");
    let failed = system.request(Method::DELETE, "/v1/models/test-account/tuned").send().await.expect("sent");
    assert!(failed.status().is_server_error(), "{}", failed.status());
    assert_eq!(system.get("/v1/models/test-account/tuned").await.status(), 200, "the model stays");
    let versions = system.get("/v1/models/test-account/tuned/versions").await.json_body().await;
    assert_eq!(versions["results"].as_array().map(Vec::len), Some(1), "{versions}");
    let read = system.http().get(&weights).bearer_auth(&system.admin_key).send().await.expect("sent");
    assert_eq!(read.status(), 200, "weights stay while their version does");

    let deleted = system.request(Method::DELETE, "/v1/models/test-account/tuned").send().await.expect("sent");
    assert_eq!(deleted.status(), 204);
    assert_eq!(system.get("/v1/models/test-account/tuned").await.status(), 404);
    let read = system.http().get(&weights).bearer_auth(&system.admin_key).send().await.expect("sent");
    assert_eq!(read.status(), 404, "the weights went with their version");
    assert!(listed_files(&system).await.is_empty(), "nothing left behind");
}

#[tokio::test]
async fn a_model_is_not_deleted_while_a_training_into_it_runs_and_is_deleted_once_it_ended() {
    let (system, _predictor, _trainer, version) = tune_system().await;
    let long = train(&system, "/v1", &version, json!({"suffix": "slow", "seconds": 60})).await.json_body().await;
    let id = long["id"].as_str().expect("an id").to_owned();
    training_until(&system, &id, |t| t["status"] == "processing").await;
    let refused = system.request(Method::DELETE, "/v1/models/test-account/tuned").send().await.expect("sent");
    assert_eq!(refused.status(), 409);
    let problem = refused.json_body().await;
    assert!(problem["detail"].as_str().is_some_and(|d| d.contains(&id)), "names the training: {problem}");
    // Refused, the delete leaves the model whole: it still takes trainings.
    let another = train(&system, "/v1", &version, json!({"suffix": "after"})).await;
    assert_eq!(another.status(), 201, "{}", another.text().await.unwrap_or_default());
    let after = another.json_body().await["id"].as_str().expect("an id").to_owned();

    for training in [&id, &after] {
        let canceled = system.request(Method::POST, &format!("/v1/trainings/{training}/cancel")).send().await;
        assert!(canceled.expect("sent").status().is_success());
        training_until(&system, training, |t| t["status"] == "canceled").await;
    }
    let deleted = system.request(Method::DELETE, "/v1/models/test-account/tuned").send().await.expect("sent");
    assert_eq!(deleted.status(), 204);
}

#[tokio::test]
async fn a_training_whose_destination_was_deleted_meanwhile_records_no_version_and_keeps_no_weights() {
    let (system, _predictor, _trainer, version) = tune_system().await;
    let created = train(&system, "/v1", &version, json!({"suffix": "orphan", "seconds": 3})).await.json_body().await;
    let id = created["id"].as_str().expect("an id").to_owned();
    training_until(&system, &id, |t| t["status"] == "processing").await;
    // A delete that did not see the training (it began between the training's check of its
    // destination and its being stored): the model is gone, as the delete leaves it.
    let store = system.ctx.store().await;
    let owned = store.database().collection::<bson::Document>("owned_models");
    owned.delete_one(bson::doc! { "_id": "test-account/tuned" }).await.expect("deleted");
    // Made again at once under the same name: the training's version must not come back in it.
    create_destination(&system).await;

    let done = training_until(&system, &id, |t| t["status"] != "starting" && t["status"] != "processing").await;
    assert_eq!(done["status"], "failed", "{done}");
    let native = system.get(&format!("/v1/trainings/{id}")).await.json_body().await;
    assert_eq!(native["error"]["code"], "DESTINATION_DELETED", "{native}");
    let versions = system.get("/v1/models/test-account/tuned/versions").await.json_body().await;
    assert_eq!(versions["results"].as_array().map(Vec::len), Some(0), "no version: {versions}");
    assert_eq!(listed_files(&system).await, Vec::new(), "no weights kept");
}
