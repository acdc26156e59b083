//! The operator's declaration of what runs on Kubernetes (`deploy/k8s/kit.yaml` is one): the
//! service's image, where KEDA asks Prometheus, each hardware pool once (its GPU request, node
//! selector and tolerations), and each Cog model by its image. What the service's records say
//! (a model's version, a deployment's release) is not repeated here: the renderer reads it.
//!
//! Parsed strictly: an unknown field, a model named twice or a model on an undeclared pool is
//! an error naming it, so a typo never renders a pod on the wrong nodes.

use std::collections::BTreeMap;

use common::domain::{ModelRef, Pool};
use serde::Deserialize;
use serde_json::Value;

/// The whole declaration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Kit {
    /// The service's image (api, runner and notifier binaries).
    pub image: String,
    /// The Prometheus server KEDA queries for the api's figures.
    pub prometheus: String,
    /// The hardware pools, by name (as runners declare them, `RUNNER_HARDWARE`).
    pub pools: BTreeMap<String, PoolSpec>,
    /// The Cog models, by `owner/name`.
    pub models: BTreeMap<String, ModelSpec>,
    /// The loopback ports the runner and the Cog container talk on inside a pod.
    #[serde(default)]
    pub ports: PodPorts,
}

/// The loopback ports inside a pod (the defaults suit every Cog image).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodPorts {
    /// Where the Cog container serves (Cog's default: 5000).
    pub cog: u16,
    /// Where the runner receives the Cog container's webhooks and output files.
    pub callback: u16,
}

impl Default for PodPorts {
    fn default() -> Self {
        Self { cog: 5000, callback: 5050 }
    }
}

/// Where a pool's pods run and what each asks for.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSpec {
    /// The model container's `resources` (a GPU: `limits: {nvidia.com/gpu: 1}`).
    #[serde(default)]
    pub resources: Option<Value>,
    /// The pod's `nodeSelector`.
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// The pod's `tolerations`.
    #[serde(default)]
    pub tolerations: Vec<Value>,
}

/// One Cog model.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// Its image, as `cog build` or `cog push` made it.
    pub image: String,
    /// Its declared kind (default `text-generation`).
    #[serde(default = "default_capability")]
    pub capability: String,
    /// The pool its own route's pods run on (deployments say their own).
    pub pool: String,
    /// Its `cog.yaml`'s `concurrency.max`: predictions one pod runs at once (default 1).
    #[serde(default = "one")]
    pub concurrency: u32,
    /// Pods of its own route kept when idle (default 0: scaled to zero).
    #[serde(default)]
    pub min_instances: u32,
    /// Pods of its own route at most (default 1).
    #[serde(default = "one")]
    pub max_instances: u32,
    /// Older versions kept runnable, each by its own image: `version id: image`. Each gets
    /// pods of its own for the predictions pinned to it, and a deployment whose release runs
    /// it gets its image. (The model's own pods serve the version `image` serves.)
    #[serde(default)]
    pub versions: BTreeMap<String, String>,
    /// Whether its image has a trainer (`train:` in its `cog.yaml`): trainer pods of their own
    /// then run its trainings, one at a time each, scaled from zero (default false).
    #[serde(default)]
    pub train: bool,
    /// How long, in seconds, a prediction already running may take to finish when its pod is
    /// stopped (a scale-down, a rollout, a node drain) before it is handed back to run again
    /// elsewhere from the start (default 120): the pod's runner waits that long, and the pod
    /// is given that long and the runner's own shutdown on top.
    #[serde(default = "default_drain")]
    pub drain_seconds: u32,
}

fn default_drain() -> u32 {
    120
}

fn default_capability() -> String {
    "text-generation".to_owned()
}

fn one() -> u32 {
    1
}

/// A declaration that cannot be rendered.
#[derive(Debug, thiserror::Error)]
pub enum KitError {
    /// Not YAML of the declaration's shape.
    #[error("the kit is not a valid declaration: {0}")]
    Shape(#[from] serde_norway::Error),
    /// A name that is not a model's or a pool's.
    #[error("the kit names {what} {name:?}: {why}")]
    Name {
        /// Which kind of name.
        what: &'static str,
        /// The name.
        name: String,
        /// What is wrong with it.
        why: String,
    },
}

impl Kit {
    /// Parses and checks a declaration.
    pub fn parse(text: &str) -> Result<Self, KitError> {
        let kit: Kit = serde_norway::from_str(text)?;
        if kit.ports.cog == kit.ports.callback || kit.ports.cog == 0 || kit.ports.callback == 0 {
            return Err(KitError::Name {
                what: "ports",
                name: format!("{:?}", kit.ports),
                why: "two ports, neither 0".into(),
            });
        }
        for name in kit.pools.keys() {
            Pool::parse(name).map_err(|e| KitError::Name { what: "pool", name: name.clone(), why: e.to_string() })?;
        }
        for (name, model) in &kit.models {
            let bad = |why: String| KitError::Name { what: "model", name: name.clone(), why };
            name.parse::<ModelRef>().map_err(|e| bad(e.to_string()))?;
            if !kit.pools.contains_key(&model.pool) {
                return Err(bad(format!("its pool {:?} is not declared under `pools`", model.pool)));
            }
            for (version, image) in &model.versions {
                let id_ok =
                    !version.is_empty() && version.len() <= 64 && version.chars().all(|c| c.is_ascii_alphanumeric());
                if !id_ok || image.trim().is_empty() {
                    return Err(bad(format!(
                        "its version {version:?} needs an id of 1-64 letters and digits and an image"
                    )));
                }
            }
            if model.concurrency == 0 || model.max_instances == 0 || model.min_instances > model.max_instances {
                return Err(bad(
                    "concurrency and max_instances are at least 1, min_instances at most max_instances".into()
                ));
            }
        }
        Ok(kit)
    }

    /// The declared model `name`, if any.
    pub fn model(&self, name: &str) -> Option<&ModelSpec> {
        self.models.get(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIT: &str = r#"
image: prediction-service:0.1.0
prometheus: http://prometheus.monitoring.svc:9090
pools:
  cpu: {}
  gpu-t4:
    resources: { limits: { nvidia.com/gpu: 1 } }
    node_selector: { cloud.google.com/gke-accelerator: nvidia-tesla-t4 }
    tolerations: [{ key: nvidia.com/gpu, operator: Exists, effect: NoSchedule }]
models:
  acme/captioner: { image: "r8.im/acme/captioner:1", pool: gpu-t4, capability: image-to-text }
"#;

    #[test]
    fn a_declaration_reads_with_its_defaults() {
        let kit = Kit::parse(KIT).expect("the example parses");
        let model = kit.model("acme/captioner").expect("declared");
        assert_eq!((model.concurrency, model.min_instances, model.max_instances), (1, 0, 1));
        assert_eq!(model.drain_seconds, 120);
        assert_eq!(kit.pools["gpu-t4"].tolerations.len(), 1);
    }

    #[test]
    fn an_unknown_field_an_undeclared_pool_or_a_bad_name_is_refused() {
        let typo = KIT.replace("node_selector", "nodeselector");
        assert!(matches!(Kit::parse(&typo), Err(KitError::Shape(_))));
        let undeclared = KIT.replace("pool: gpu-t4", "pool: gpu-a100");
        assert!(Kit::parse(&undeclared).expect_err("refused").to_string().contains("gpu-a100"));
        let unnamed = KIT.replace("acme/captioner:", "captioner:");
        assert!(matches!(Kit::parse(&unnamed), Err(KitError::Name { what: "model", .. })));
        let bounds = KIT.replace("capability: image-to-text", "min_instances: 2");
        assert!(Kit::parse(&bounds).is_err(), "min above the default max of 1");
    }
}
