//! The manifests of [`super`]: for each pod template a `Deployment` (a runner and the model's
//! Cog container, reaching each other on localhost) and a KEDA `ScaledObject`.
//!
//! The runner serves the Cog server beside it (`RUNNER_COG=…=http://127.0.0.1:5000`) with as
//! many slots as the model's `concurrency`, and receives its output files on
//! `127.0.0.1:5050` (the kit's `ports`); the Cog container runs the image's own server with `--upload-url` to
//! that receiver and `COG_MAX_CONCURRENCY` from the same figure, so the two cannot disagree.
//! The pool's resources go on the Cog container (the one that needs the GPU), its node
//! selector and tolerations on the pod.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{
    KitError, Records,
    kit::{Kit, ModelSpec, PoolSpec},
};

/// The pod's loopback address the two containers share.
const LOOPBACK: &str = "127.0.0.1";
/// How often KEDA asks Prometheus, in seconds.
const POLLING_SECONDS: u32 = 15;
/// How long a pod template's figure must stay at zero before its last pod stops, in seconds:
/// a model's idle stop, as on one machine (`RUNNER_COG_IDLE_SECONDS`).
const COOLDOWN_SECONDS: u32 = 300;
/// The runner's startup checks, 10 s apart, before it counts as failed to start: an hour for
/// the model's setup.
const STARTUP_CHECKS: u32 = 360;
/// What a runner's shutdown takes past its grace for running predictions, at most: handing
/// back the rest, freeing account slots (2 s), stopping its background tasks (5 s) and its
/// Cog server (SIGTERM, SIGKILL after 10 s), with room to spare.
pub const RUNNER_SHUTDOWN_OVERHEAD_SECONDS: u32 = 30;
/// Failed reads of the figure in a row after which KEDA runs the fallback's pods.
const FALLBACK_FAILURES: u32 = 3;

/// One pod template to render: a model's own route or a deployment.
struct Template<'a> {
    /// The Kubernetes name of its `Deployment` and `ScaledObject`.
    name: String,
    /// What it serves, for people (`model acme/captioner`).
    what: String,
    /// The model it runs.
    model: &'a str,
    spec: &'a ModelSpec,
    /// The Cog container's image: the model's, or an older version's.
    image: &'a str,
    /// Whether it runs the model's trainings (its Cog server in train mode) rather than its
    /// predictions.
    trainer: Option<&'a str>,
    /// The version its runner serves, when it is an older one kept for what is pinned to it:
    /// named to the runner (`RUNNER_MODEL_VERSIONS`), which then leaves the model's current
    /// version as it is (`RUNNER_VERSIONS_ARE_LATEST=false`).
    older_version: Option<&'a str>,
    pool_name: &'a str,
    pool: &'a PoolSpec,
    min: u32,
    max: u32,
    /// The figure KEDA reads, and how much of it one pod takes.
    query: String,
    threshold: u32,
    /// Why the template is kept above zero, if it is.
    note: Option<String>,
}

/// Renders every template of `records`.
pub fn render(kit: &Kit, records: &Records) -> Result<String, KitError> {
    let mut templates = Vec::new();
    let mut skipped = Vec::new();
    for (model, spec) in &kit.models {
        let registered = records.registered.iter().any(|r| &r.model == model);
        let pool = &kit.pools[&spec.pool];
        templates.push(Template {
            name: kube_name("model", model),
            what: format!("model {model}"),
            model,
            spec,
            image: &spec.image,
            trainer: None,
            older_version: None,
            pool_name: &spec.pool,
            pool,
            // A model never registered is refused by the api, so nothing would scale it up:
            // one pod registers it.
            min: if registered { spec.min_instances } else { spec.min_instances.max(1) },
            max: spec.max_instances,
            query: own_route_query(model, spec),
            threshold: spec.concurrency,
            note: (!registered).then(|| "not registered yet: one pod runs until it is; render again then".to_owned()),
        });
        // Its trainer pods train the version registered now: render again after a new one.
        match records.registered.iter().find(|r| &r.model == model) {
            Some(current) if spec.train => templates.push(Template {
                name: kube_name("trainer", model),
                what: format!("trainer of model {model} (version {})", current.version),
                model,
                spec,
                image: &spec.image,
                trainer: Some(&current.version),
                older_version: None,
                pool_name: &spec.pool,
                pool,
                min: 0,
                max: spec.max_instances,
                query: format!("max(model_pending_trainings{{model=\"{model}\"}})"),
                // A trainer runs one training at a time.
                threshold: 1,
                note: None,
            }),
            None if spec.train => skipped.push(format!(
                "the trainer of model {model} (not registered yet: render again once it is, so its version is known)"
            )),
            _ => {}
        }
        for (version, image) in &spec.versions {
            templates.push(Template {
                name: kube_name("version", &format!("{model}:{version}")),
                what: format!("version {version} of model {model}"),
                model,
                spec,
                image,
                trainer: None,
                older_version: Some(version),
                pool_name: &spec.pool,
                pool,
                min: 0,
                max: spec.max_instances,
                // The version's series exists while it has predictions; without one it has
                // none, read as 0 while the model's series exists (and an error otherwise).
                query: format!(
                    "max(version_pending_predictions{{model=\"{model}\",version=\"{version}\"}}) \
                     or on() (0 * max(model_pending_predictions{{model=\"{model}\"}}))"
                ),
                threshold: spec.concurrency,
                note: None,
            });
        }
    }
    for row in &records.deployments {
        if row.max_instances == 0 {
            skipped.push(format!("deployment {} (max_instances 0: switched off)", row.deployment));
            continue;
        }
        let Some(spec) = kit.model(&row.model) else {
            skipped.push(format!("deployment {} (model {} is not declared under `models`)", row.deployment, row.model));
            continue;
        };
        let pool = kit.pools.get(&row.hardware).ok_or_else(|| KitError::Name {
            what: "pool",
            name: row.hardware.clone(),
            why: format!("deployment {} runs on it, and it is not declared under `pools`", row.deployment),
        })?;
        // A release of an older version declared with its own image runs that image.
        let older = spec.versions.get_key_value(&row.version);
        templates.push(Template {
            name: kube_name("deployment", &row.deployment),
            what: format!("deployment {} (version {})", row.deployment, row.version),
            model: &row.model,
            spec,
            image: older.map_or(spec.image.as_str(), |(_, image)| image.as_str()),
            trainer: None,
            older_version: older.map(|(version, _)| version.as_str()),
            pool_name: &row.hardware,
            pool,
            min: row.min_instances,
            max: row.max_instances.max(row.min_instances),
            // KEDA divides the work by a pod's slots and keeps it within the release's bounds.
            query: format!("max(deployment_pending_predictions{{deployment=\"{}\"}})", row.deployment),
            threshold: spec.concurrency,
            note: None,
        });
    }
    let mut out = String::from(
        "# The models' pods and their autoscaling, rendered by `api admin render-kubernetes` from\n\
         # the kit's declaration and the service's records: render again after a deployment's\n\
         # release changes. Apply beside deploy/k8s/prediction-service.yaml.\n",
    );
    for line in &skipped {
        out.push_str(&format!("# not rendered: {line}\n"));
    }
    for template in &templates {
        for document in [deployment(kit, template), scaled_object(kit, template)] {
            out.push_str("---\n");
            out.push_str(&serde_norway::to_string(&document)?);
        }
    }
    Ok(out)
}

/// What a model's own pods are scaled on: its predictions by its own route and pinned
/// versions, less those pinned to an older version that has pods of its own.
fn own_route_query(model: &str, spec: &ModelSpec) -> String {
    let all = format!("max(model_pending_predictions{{model=\"{model}\"}})");
    if spec.versions.is_empty() {
        return all;
    }
    let older: Vec<&str> = spec.versions.keys().map(String::as_str).collect();
    format!(
        "{all} - (sum(version_pending_predictions{{model=\"{model}\",version=~\"{}\"}}) or vector(0))",
        older.join("|")
    )
}

/// A Kubernetes name for `full` (`owner/name`) under `prefix`: lowercase letters, digits and
/// `-`, at most 63 characters, with a digest of `full` so two names that read alike differ.
pub fn kube_name(prefix: &str, full: &str) -> String {
    let mut slug = String::new();
    for c in full.chars().map(|c| c.to_ascii_lowercase()) {
        match c {
            'a'..='z' | '0'..='9' => slug.push(c),
            _ if !slug.ends_with('-') => slug.push('-'),
            _ => {}
        }
    }
    let slug: String = slug.trim_matches('-').chars().take(40).collect();
    let digest = Sha256::digest(full.as_bytes());
    let short: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("{prefix}-{}-{short}", slug.trim_end_matches('-'))
}

fn env(name: &str, value: impl Into<String>) -> Value {
    json!({ "name": name, "value": value.into() })
}

fn deployment(kit: &Kit, t: &Template) -> Value {
    let labels = json!({ "app": "model-runner", "pods": t.name });
    // A trainer pod's runner takes trainings only, of the version it names; its Cog server
    // trains one at a time.
    let concurrency = if t.trainer.is_some() { "1".to_owned() } else { t.spec.concurrency.to_string() };
    let server = format!("{}=http://{LOOPBACK}:{}", t.model, kit.ports.cog);
    let cog = match t.trainer {
        Some(_) => env("RUNNER_COG_TRAIN", server),
        None => env("RUNNER_COG", format!("{}={}@http://{LOOPBACK}:{}", t.model, t.spec.capability, kit.ports.cog)),
    };
    let mut runner_env = vec![
        env("RUNNER_MODELS", t.model),
        cog,
        env("RUNNER_COG_CALLBACK_BIND", format!("{LOOPBACK}:{}", kit.ports.callback)),
        env("RUNNER_HARDWARE", t.pool_name),
        env("RUNNER_CONCURRENCY", concurrency.clone()),
        env("RUNNER_MODEL_CONCURRENCY", concurrency.clone()),
        env("RUNNER_METRICS_BIND", "0.0.0.0:9090"),
        env("RUNNER_SHUTDOWN_GRACE_SECONDS", t.spec.drain_seconds.to_string()),
    ];
    if let Some(version) = t.trainer {
        runner_env.push(env("RUNNER_MODEL_VERSIONS", format!("{}={version}", t.model)));
    }
    if let Some(version) = t.older_version {
        runner_env.push(env("RUNNER_MODEL_VERSIONS", format!("{}={version}", t.model)));
        runner_env.push(env("RUNNER_VERSIONS_ARE_LATEST", "false"));
    }
    let runner = json!({
        "name": "runner",
        "image": kit.image,
        "command": ["runner"],
        "env": runner_env,
        "ports": [{ "containerPort": 9090, "name": "metrics" }],
        "envFrom": [
            { "configMapRef": { "name": "prediction-service" } },
            { "secretRef": { "name": "prediction-service" } },
            { "secretRef": { "name": "prediction-service-s3", "optional": true } },
        ],
        // The runner answers once its Cog server's setup is over, which Cog does not limit
        // (weights may take long): the liveness probe waits for it, up to an hour.
        "startupProbe": {
            "httpGet": { "path": "/health", "port": "metrics" }, "periodSeconds": 10, "failureThreshold": STARTUP_CHECKS,
        },
        "readinessProbe": { "httpGet": { "path": "/ready", "port": "metrics" }, "periodSeconds": 5 },
        "livenessProbe": { "httpGet": { "path": "/health", "port": "metrics" }, "periodSeconds": 10 },
        "resources": { "requests": { "cpu": "250m", "memory": "128Mi" }, "limits": { "memory": "512Mi" } },
    });
    // No probe of its own: it answers on localhost only, and the runner waits for its setup
    // (as long as it takes, as in Cog) and reports its health on the runner's `/ready`.
    let mut cog = json!({
        "name": "model",
        "image": t.image,
        // The image's own entrypoint runs these: Cog's HTTP server, on localhost only.
        "args": cog_args(kit, t.trainer.is_some()),
        "env": [env("PORT", kit.ports.cog.to_string()), env("COG_MAX_CONCURRENCY", concurrency)],
    });
    if let Some(resources) = &t.pool.resources {
        cog["resources"] = quantities_as_strings(resources);
    }
    let mut pod = json!({
        // Running predictions get the model's drain_seconds (RUNNER_SHUTDOWN_GRACE_SECONDS) to
        // finish, then are handed back; the runner's own shutdown fits in the rest.
        "terminationGracePeriodSeconds": t.spec.drain_seconds + RUNNER_SHUTDOWN_OVERHEAD_SECONDS,
        "containers": [runner, cog],
    });
    if !t.pool.node_selector.is_empty() {
        pod["nodeSelector"] = json!(t.pool.node_selector);
    }
    if !t.pool.tolerations.is_empty() {
        pod["tolerations"] = json!(t.pool.tolerations);
    }
    let mut annotations = json!({ "prediction-service/serves": t.what });
    if let Some(note) = &t.note {
        annotations["prediction-service/note"] = json!(note);
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": t.name, "labels": labels, "annotations": annotations },
        "spec": {
            "replicas": t.min,
            "selector": { "matchLabels": labels },
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {
                        "prometheus.io/scrape": "true", "prometheus.io/port": "9090", "prometheus.io/path": "/metrics",
                    },
                },
                "spec": pod,
            },
        },
    })
}

/// `resources` with every number written as a string: a quantity (`nvidia.com/gpu: 1`) is
/// one, and a strict validator takes only the string.
fn quantities_as_strings(resources: &Value) -> Value {
    match resources {
        Value::Number(n) => Value::String(n.to_string()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), quantities_as_strings(v))).collect()),
        other => other.clone(),
    }
}

/// The Cog container's arguments to its image's entrypoint (a trainer's in train mode).
fn cog_args(kit: &Kit, train: bool) -> Vec<String> {
    let mut args = vec![
        "python".into(),
        "-m".into(),
        "cog.server.http".into(),
        format!("--host={LOOPBACK}"),
        format!("--upload-url=http://{LOOPBACK}:{}/upload/", kit.ports.callback),
    ];
    if train {
        args.push("--x-mode=train".into());
    }
    args
}

fn scaled_object(kit: &Kit, t: &Template) -> Value {
    json!({
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": { "name": t.name, "annotations": { "prediction-service/serves": t.what } },
        "spec": {
            "scaleTargetRef": { "name": t.name },
            "minReplicaCount": t.min,
            "maxReplicaCount": t.max,
            "pollingInterval": POLLING_SECONDS,
            "cooldownPeriod": COOLDOWN_SECONDS,
            // A figure KEDA cannot read keeps one pod (or the floor) running.
            "fallback": { "failureThreshold": FALLBACK_FAILURES, "replicas": t.min.max(1) },
            "triggers": [{
                "type": "prometheus",
                "metadata": {
                    "serverAddress": kit.prometheus,
                    "query": t.query,
                    "threshold": t.threshold.to_string(),
                    // A missing series is an error (and so the fallback), never a zero.
                    "ignoreNullValues": "false",
                },
            }],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::kubernetes::{DeploymentRow, Registered};

    #[test]
    fn an_older_version_gets_pods_of_its_own_and_its_deployments_run_its_image() {
        let kit = Kit::parse(
            "image: svc:1\nprometheus: http://p:9090\npools: { cpu: {} }\nmodels:\n  acme/m:\n    image: r/m:2\n    pool: cpu\n    versions: { v1: r/m:1 }\n",
        )
        .expect("a kit");
        let row = |name: &str, version: &str| DeploymentRow {
            deployment: format!("acme/{name}"),
            model: "acme/m".into(),
            version: version.into(),
            hardware: "cpu".into(),
            min_instances: 0,
            max_instances: 1,
        };
        let records = Records {
            registered: vec![Registered { model: "acme/m".into(), version: "v2".into() }],
            deployments: vec![
                row("old", "v1"),
                row("new", "v2"),
                DeploymentRow { max_instances: 0, ..row("off", "v2") },
            ],
        };
        let text = render(&kit, &records).expect("rendered");
        assert!(text.contains("# not rendered: deployment acme/off (max_instances 0: switched off)"), "{text}");
        assert!(!text.contains("serves: deployment acme/off"), "a switched-off deployment has no pods");
        let docs: Vec<Value> =
            text.split("\n---\n").skip(1).map(|d| serde_norway::from_str(d).expect("yaml")).collect();
        let of = |kind: &str, serves: &str| {
            docs.iter()
                .find(|d| {
                    d["kind"] == kind
                        && d["metadata"]["annotations"]["prediction-service/serves"]
                            .as_str()
                            .is_some_and(|s| s.starts_with(serves))
                })
                .unwrap_or_else(|| panic!("no {kind} for {serves}"))
                .clone()
        };
        let image =
            |serves: &str| of("Deployment", serves)["spec"]["template"]["spec"]["containers"][1]["image"].clone();
        let env = |serves: &str| of("Deployment", serves)["spec"]["template"]["spec"]["containers"][0]["env"].clone();
        let query = |serves: &str| of("ScaledObject", serves)["spec"]["triggers"][0]["metadata"]["query"].clone();
        assert_eq!(image("model acme/m"), "r/m:2");
        assert_eq!(image("version v1 of model acme/m"), "r/m:1");
        assert_eq!(image("deployment acme/old"), "r/m:1", "a release of the older version runs its image");
        assert_eq!(image("deployment acme/new"), "r/m:2");
        for serves in ["version v1 of model acme/m", "deployment acme/old"] {
            let env = env(serves);
            let named = |name: &str| {
                env.as_array().and_then(|e| e.iter().find(|v| v["name"] == name)).map(|v| v["value"].clone())
            };
            assert_eq!(named("RUNNER_MODEL_VERSIONS"), Some(json!("acme/m=v1")), "{serves}");
            assert_eq!(named("RUNNER_VERSIONS_ARE_LATEST"), Some(json!("false")), "{serves}");
        }
        assert!(env("model acme/m").to_string().find("RUNNER_VERSIONS_ARE_LATEST").is_none());
        // A running prediction is given the model's drain to finish, and the pod that and the
        // runner's own shutdown: a stop never cuts a drain short.
        let grace = &env("model acme/m")
            .as_array()
            .expect("env")
            .iter()
            .find(|v| v["name"] == "RUNNER_SHUTDOWN_GRACE_SECONDS")
            .expect("set")["value"]
            .clone();
        assert_eq!(grace, &json!("120"), "the default drain");
        let pod = of("Deployment", "model acme/m")["spec"]["template"]["spec"].clone();
        assert_eq!(pod["terminationGracePeriodSeconds"], json!(120 + RUNNER_SHUTDOWN_OVERHEAD_SECONDS));
        assert_eq!(
            query("version v1 of model acme/m"),
            r#"max(version_pending_predictions{model="acme/m",version="v1"}) or on() (0 * max(model_pending_predictions{model="acme/m"}))"#
        );
        assert_eq!(
            query("model acme/m"),
            r#"max(model_pending_predictions{model="acme/m"}) - (sum(version_pending_predictions{model="acme/m",version=~"v1"}) or vector(0))"#,
            "the model's own pods leave the older version's predictions to its pods"
        );
    }

    #[test]
    fn names_are_kubernetes_names_and_tell_look_alikes_apart() {
        let a = kube_name("model", "acme/captioner");
        assert!(a.starts_with("model-acme-captioner-"), "{a}");
        assert_ne!(kube_name("model", "a-b/c"), kube_name("model", "a/b-c"));
        let long = kube_name("deployment", &format!("{}/{}", "x".repeat(60), "Y.z_"));
        assert!(long.len() <= 63 && long.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
    }
}
