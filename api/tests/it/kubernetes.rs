//! The models' Kubernetes kit (`api admin render-kubernetes`), rendered from a live system's
//! records, and the figures its ScaledObjects read from the api's `/metrics`.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};
use testkit::{cog::CogServer, eventually};

use crate::harness::{JsonBody, Options, System};

/// A kit declaring the built-in `demo/echo` (as if it were a Cog image) and a model no runner
/// has registered.
const KIT: &str = r#"
image: prediction-service:test
prometheus: http://prometheus.test:9090
pools:
  cpu: {}
  gpu-t4:
    resources: { limits: { nvidia.com/gpu: 1 } }
    node_selector: { pool: gpu-t4 }
    tolerations: [{ key: nvidia.com/gpu, operator: Exists, effect: NoSchedule }]
models:
  demo/echo: { image: "registry.test/echo:1", pool: cpu, concurrency: 2, max_instances: 3 }
  acme/unseen: { image: "registry.test/unseen:1", pool: gpu-t4 }
"#;

/// The YAML documents of a rendering.
fn documents(text: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).expect("a YAML document"))
        .filter(|doc| !doc.is_null())
        .collect()
}

/// What `api admin render-kubernetes` prints for the kit `kit` and the system's records.
async fn render(system: &System, kit: &str) -> Vec<Value> {
    let path = std::env::temp_dir().join(format!("kit-{}-{}.yaml", std::process::id(), rand::random::<u64>()));
    std::fs::write(&path, kit).expect("kit written");
    let text = api::admin::render_kubernetes(Some(&system.admin_config()), &path, None).await;
    let _ = std::fs::remove_file(&path);
    documents(&text.expect("rendered"))
}

/// The ScaledObject and the Deployment whose annotation says they serve `what`.
fn pair<'a>(docs: &'a [Value], what: &str) -> (&'a Value, &'a Value) {
    let find = |kind: &str| {
        docs.iter()
            .find(|d| {
                d["kind"] == kind
                    && d["metadata"]["annotations"]["prediction-service/serves"]
                        .as_str()
                        .is_some_and(|s| s.starts_with(what))
            })
            .unwrap_or_else(|| panic!("no {kind} serves {what}: {docs:#?}"))
    };
    (find("Deployment"), find("ScaledObject"))
}

#[tokio::test]
async fn every_models_and_deployments_pod_holds_its_cog_container_and_scales_from_zero_on_its_routes() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    system.register_models_only().await;
    let version = system.get("/v1/models/demo/echo").await.json_body().await["latest_version"]["id"].clone();
    let body = json!({"name": "fast", "model": "demo/echo", "version": version, "hardware": "gpu-t4",
                      "min_instances": 0, "max_instances": 5});
    assert_eq!(system.request(Method::POST, "/v1/deployments").json(&body).send().await.expect("sent").status(), 201);

    let docs = render(&system, KIT).await;
    for (what, min, max, query, threshold, pool) in [
        ("model demo/echo", 0, 3, r#"max(model_pending_predictions{model="demo/echo"})"#, "2", "cpu"),
        ("model acme/unseen", 1, 1, r#"max(model_pending_predictions{model="acme/unseen"})"#, "1", "gpu-t4"),
        (
            "deployment test-account/fast",
            0,
            5,
            r#"max(deployment_pending_predictions{deployment="test-account/fast"})"#,
            "2",
            "gpu-t4",
        ),
    ] {
        let (deployment, scaled) = pair(&docs, what);
        let pod = &deployment["spec"]["template"]["spec"];
        let containers = pod["containers"].as_array().expect("containers");
        let names: Vec<&str> = containers.iter().filter_map(|c| c["name"].as_str()).collect();
        assert_eq!(names, ["runner", "model"], "{what}: a runner beside the model's Cog container");
        let env = |c: &Value, name: &str| {
            c["env"].as_array().and_then(|e| e.iter().find(|v| v["name"] == name)).map(|v| v["value"].clone())
        };
        let model = what.split(' ').nth(1).expect("a name");
        let served = if what.starts_with("deployment") { "demo/echo" } else { model };
        assert_eq!(
            env(&containers[0], "RUNNER_COG"),
            Some(json!(format!("{served}=text-generation@http://127.0.0.1:5000")))
        );
        assert_eq!(env(&containers[0], "RUNNER_HARDWARE"), Some(json!(pool)), "{what}");
        assert_eq!(env(&containers[1], "COG_MAX_CONCURRENCY"), env(&containers[0], "RUNNER_MODEL_CONCURRENCY"));
        if pool == "gpu-t4" {
            assert_eq!(
                containers[1]["resources"]["limits"]["nvidia.com/gpu"], "1",
                "{what}: the GPU on the Cog container"
            );
            assert_eq!(pod["nodeSelector"]["pool"], "gpu-t4");
            assert_eq!(pod["tolerations"][0]["key"], "nvidia.com/gpu");
        }
        let spec = &scaled["spec"];
        assert_eq!(
            (spec["minReplicaCount"].as_u64(), spec["maxReplicaCount"].as_u64()),
            (Some(min), Some(max)),
            "{what}"
        );
        assert_eq!(spec["scaleTargetRef"]["name"], deployment["metadata"]["name"]);
        assert!(spec["fallback"]["replicas"].as_u64().is_some_and(|n| n >= 1), "{what}: a fallback that keeps a pod");
        let trigger = &spec["triggers"][0]["metadata"];
        assert_eq!(trigger["ignoreNullValues"], "false", "{what}: a missing figure is an error, not a zero");
        assert_eq!(
            (trigger["query"].as_str(), trigger["threshold"].as_str()),
            (Some(query), Some(threshold)),
            "{what}"
        );
    }
}

#[tokio::test]
async fn a_models_figure_counts_its_own_route_and_pinned_versions_and_is_zero_when_idle() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    system.register_models_only().await;
    let figure = |text: &str, series: &str| {
        text.lines().find_map(|l| l.strip_prefix(series).and_then(|rest| rest.trim().parse::<u64>().ok()))
    };
    let metrics = || async { system.http().get(system.url("/metrics")).send().await.ok()?.text().await.ok() };
    let echo = r#"model_pending_predictions{model="demo/echo"}"#;
    let idle = eventually(Duration::from_secs(15), || async { figure(&metrics().await?, echo) }).await;
    assert_eq!(idle, Some(0), "a registered model has its series at zero when idle");

    let version = system.get("/v1/models/demo/echo").await.json_body().await["latest_version"]["id"]
        .as_str()
        .expect("a version")
        .to_owned();
    let body = json!({"name": "apart", "model": "demo/echo", "version": version, "hardware": "cpu",
                      "min_instances": 0, "max_instances": 1});
    assert_eq!(system.request(Method::POST, "/v1/deployments").json(&body).send().await.expect("sent").status(), 201);
    let creates = [
        ("/v1/models/demo/echo/predictions".to_owned(), json!({"input": {"prompt": "x"}})),
        ("/v1/models/demo/echo/predictions".to_owned(), json!({"input": {"prompt": "y"}})),
        ("/v1/predictions".to_owned(), json!({"version": version, "input": {"prompt": "z"}})),
        ("/v1/deployments/test-account/apart/predictions".to_owned(), json!({"input": {"prompt": "d"}})),
    ];
    for (path, body) in &creates {
        let created = system.request(Method::POST, path).json(body).send().await.expect("sent");
        assert_eq!(created.status(), StatusCode::CREATED, "{path}");
    }
    let counted = eventually(Duration::from_secs(15), || async {
        let text = metrics().await?;
        (figure(&text, echo) == Some(3)).then_some(text)
    })
    .await
    .expect("two by the model's route and one by its version, none runs");
    assert_eq!(
        figure(&counted, r#"deployment_pending_predictions{deployment="test-account/apart"}"#),
        Some(1),
        "the deployment's prediction is its own pods' figure, not the model's"
    );
}

/// Two free loopback ports (distinct: testkit never hands out a port twice).
fn two_ports() -> (u16, u16) {
    (testkit::free_port(), testkit::free_port())
}

/// A container's `args`.
fn args_of(container: &Value) -> Vec<String> {
    container["args"].as_array().expect("args").iter().map(|a| a.as_str().expect("an arg").to_owned()).collect()
}

/// A container's `env` as pairs.
fn env_of(container: &Value) -> Vec<(String, String)> {
    container["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|v| (v["name"].as_str().expect("name").to_owned(), v["value"].as_str().expect("value").to_owned()))
        .collect()
}

#[tokio::test]
async fn a_model_pods_two_containers_started_as_the_manifest_says_serve_its_predictions_and_files() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    let (cog, callback) = two_ports();
    let kit = format!(
        "image: prediction-service:test\nprometheus: http://prometheus.test:9090\nports: {{ cog: {cog}, callback: {callback} }}\n\
         pools: {{ cpu: {{}} }}\nmodels:\n  acme/images: {{ image: registry.test/images:1, capability: text-to-image, pool: cpu }}\n"
    );
    let docs = render(&system, &kit).await;
    let (deployment, _) = pair(&docs, "model acme/images");
    let containers = deployment["spec"]["template"]["spec"]["containers"].as_array().expect("containers");
    let args = args_of(&containers[1]);
    // The Cog container as its image runs it, on the fixture project the image would hold.
    let _server = CogServer::start_as_container("images", &args, &env_of(&containers[1])).await;
    // The runner with the container's environment; its metrics on a port of its own here, as
    // the pod's 9090 would collide between tests.
    let mut runner_env = env_of(&containers[0]);
    runner_env.retain(|(k, _)| k != "RUNNER_METRICS_BIND");
    let pairs: Vec<(&str, &str)> = runner_env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    system.start_runner_with(&pairs);
    let registered = eventually(Duration::from_secs(90), || async {
        (system.get("/v1/models/acme/images").await.status() == 200).then_some(())
    })
    .await;
    assert!(registered.is_some(), "the pod's runner registered the model of the container beside it");
    let created = system
        .request(Method::POST, "/replicate/v1/models/acme/images/predictions")
        .json(&json!({"input": {"count": 2, "size": 3}}))
        .send()
        .await
        .expect("sent");
    assert_eq!(created.status(), StatusCode::CREATED);
    let id = created.json_body().await["id"].as_str().expect("an id").to_owned();
    let done = system.wait_for_terminal(&id, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let shown = system.get(&format!("/replicate/v1/predictions/{id}")).await.json_body().await;
    let links = shown["output"].as_array().expect("a list of files");
    assert_eq!(links.len(), 2, "{shown}");
    for link in links {
        let url = link.as_str().expect("a link");
        let body = system.http().get(url).bearer_auth(&system.admin_key).send().await.expect("sent");
        assert_eq!(body.status(), 200, "{url}: uploaded through the pod's callback port");
        assert!(body.bytes().await.expect("bytes").starts_with(b"\x89PNG"));
    }
}

#[tokio::test]
async fn an_older_versions_runner_serves_what_is_pinned_to_it_and_leaves_the_models_current_version() {
    let system = System::start_with(Options { runner: false, notifier: false, env: vec![] }).await;
    system.register_models_only().await;
    let current = system.get("/v1/models/demo/echo").await.json_body().await["latest_version"]["id"].clone();
    // A version pod's runner, as the renderer writes it for a version the kit declares.
    let older = [
        ("RUNNER_MODELS", "demo/echo"),
        ("RUNNER_MODEL_VERSIONS", "demo/echo=old1"),
        ("RUNNER_VERSIONS_ARE_LATEST", "false"),
    ];
    let pod = system.start_runner_with(&older);
    let recorded = eventually(Duration::from_secs(60), || async {
        (system.get("/v1/models/demo/echo/versions/old1").await.status() == 200).then_some(())
    })
    .await;
    assert!(recorded.is_some(), "the older version is recorded");
    let model = system.get("/v1/models/demo/echo").await.json_body().await;
    assert_eq!(model["latest_version"]["id"], current, "the model's current version stays: {model}");

    // Scaled to zero: a prediction pinned to it waits, counted under its version.
    pod.cancel();
    let body = json!({"version": "old1", "input": {"prompt": "pinned"}});
    let created = system.request(Method::POST, "/v1/predictions").json(&body).send().await.expect("sent");
    assert_eq!(created.status(), StatusCode::CREATED);
    let id = created.json_body().await["id"].as_str().expect("an id").to_owned();
    let figure = |text: &str, series: &str| {
        text.lines().find_map(|l| l.strip_prefix(series).and_then(|rest| rest.trim().parse::<u64>().ok()))
    };
    let version_series = r#"version_pending_predictions{model="demo/echo",version="old1"}"#;
    let counted = eventually(Duration::from_secs(15), || async {
        let text = system.http().get(system.url("/metrics")).send().await.ok()?.text().await.ok()?;
        (figure(&text, version_series) == Some(1)).then_some(text)
    })
    .await
    .expect("the pinned prediction is counted under its version");
    assert_eq!(figure(&counted, r#"model_pending_predictions{model="demo/echo"}"#), Some(1), "and the model's");

    // Its pod back: the pinned prediction runs there.
    system.start_runner_with(&older);
    let done = system.wait_for_terminal(&id, Duration::from_secs(60)).await;
    assert_eq!((&done["status"], &done["version"]), (&json!("succeeded"), &json!("old1")), "{done}");
}

#[tokio::test]
async fn a_trainer_pods_two_containers_started_as_the_manifest_says_run_a_training_of_the_registered_version() {
    // The model's predictor, served by a runner of its own (its pods, on a cluster).
    let predictor = CogServer::start_ready("tune", testkit::cog::CogMode::Predict).await;
    let system = System::start_with(Options {
        notifier: false,
        env: vec![("RUNNER_COG", format!("acme/tune={}", predictor.url))],
        ..Options::default()
    })
    .await;
    let version = system.registered_version("acme/tune").await;
    let (cog, callback) = two_ports();
    let kit = format!(
        "image: prediction-service:test\nprometheus: http://prometheus.test:9090\nports: {{ cog: {cog}, callback: {callback} }}\n\
         pools: {{ cpu: {{}} }}\nmodels:\n  acme/tune: {{ image: registry.test/tune:1, pool: cpu, train: true, max_instances: 2 }}\n"
    );
    let docs = render(&system, &kit).await;
    let (deployment, scaled) = pair(&docs, "trainer of model acme/tune");
    let spec = &scaled["spec"];
    assert_eq!(spec["triggers"][0]["metadata"]["query"], r#"max(model_pending_trainings{model="acme/tune"})"#);
    assert_eq!((spec["minReplicaCount"].as_u64(), spec["maxReplicaCount"].as_u64()), (Some(0), Some(2)));
    let containers = deployment["spec"]["template"]["spec"]["containers"].as_array().expect("containers");
    let args = args_of(&containers[1]);
    assert!(args.iter().any(|a| a == "--x-mode=train"), "{args:?}");
    let _trainer = CogServer::start_as_container("tune", &args, &env_of(&containers[1])).await;
    let mut runner_env = env_of(&containers[0]);
    assert!(runner_env.iter().any(|(k, v)| k == "RUNNER_MODEL_VERSIONS" && v == &format!("acme/tune={version}")));
    assert!(!runner_env.iter().any(|(k, _)| k == "RUNNER_COG"), "a trainer pod serves no predictor");
    runner_env.retain(|(k, _)| k != "RUNNER_METRICS_BIND");
    let pairs: Vec<(&str, &str)> = runner_env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    system.start_runner_with(&pairs);

    let destination = json!({"owner": "test-account", "name": "tuned", "visibility": "private", "hardware": "cpu"});
    assert_eq!(system.post_json("/v1/models", &destination).await.status(), 201);
    // The version is trainable once the trainer pod's runner has registered its trainer.
    let path = format!("/v1/models/acme/tune/versions/{version}/trainings");
    let body = json!({"destination": "test-account/tuned", "input": {"suffix": "pod"}});
    let created = eventually(Duration::from_secs(60), || async {
        let response = system.post_json(&path, &body).await;
        (response.status() == StatusCode::CREATED).then_some(response)
    })
    .await
    .expect("the trainer pod made the version trainable");
    let id = created.json_body().await["id"].as_str().expect("an id").to_owned();
    let done = eventually(Duration::from_secs(90), || async {
        let got = system.get(&format!("/v1/trainings/{id}")).await.json_body().await;
        (got["status"] != "starting" && got["status"] != "processing").then_some(got)
    })
    .await
    .expect("the training ended");
    assert_eq!(done["status"], "succeeded", "{done}");
}
