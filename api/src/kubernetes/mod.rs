//! The Kubernetes kit of the models, rendered from the service's own records
//! (`api admin render-kubernetes`): one pod template per Cog model's own route and one per
//! deployment, each a runner beside the model's Cog container, and one KEDA `ScaledObject`
//! each that scales it from zero.
//!
//! - [`kit`] is what the operator declares once: the images, the pools (GPU request, node
//!   selector, tolerations), each model's concurrency and bounds.
//! - [`Records`] is what the service knows: which declared models are registered (a model
//!   never registered gets one pod, which registers it, before it may go to zero: until then
//!   the api refuses its predictions and nothing would ever scale it up), and each deployment's
//!   current release (version, pool, `min_instances`, `max_instances`). Render again after a
//!   `PATCH /v1/deployments/…`.
//! - [`pods`] writes the manifests. A model's pods are scaled on the api's
//!   `model_pending_predictions{model}` (its own route and pinned versions), a deployment's on
//!   `deployment_pending_predictions{deployment}` ([`crate::state::scaling`]), one pod per
//!   `concurrency` of them within the bounds, with
//!   `ignoreNullValues: "false"` and a `fallback`: a figure that cannot be read is an error
//!   that keeps pods running, never a zero that stops them.

pub mod kit;
pub mod pods;

use common::{domain::ModelRef, store::Store};
use serde::{Deserialize, Serialize};

pub use self::kit::{Kit, KitError};

/// What the service's records say of the declared models.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Records {
    /// The declared models a runner has registered, with their current versions.
    pub registered: Vec<Registered>,
    /// Every deployment, with its current release.
    pub deployments: Vec<DeploymentRow>,
}

/// A registered model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registered {
    /// `owner/name`.
    pub model: String,
    /// Its current version.
    pub version: String,
}

/// A deployment's current release.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeploymentRow {
    /// `owner/name` of the deployment.
    pub deployment: String,
    /// The model it runs.
    pub model: String,
    /// The version it runs.
    pub version: String,
    /// Its pool.
    pub hardware: String,
    /// Its release's `min_instances`.
    pub min_instances: u32,
    /// Its release's `max_instances`.
    pub max_instances: u32,
}

impl Records {
    /// Reads what the store says of the models `kit` declares, and every deployment.
    pub async fn read(store: &Store, kit: &Kit) -> anyhow::Result<Self> {
        let mut registered = Vec::new();
        for name in kit.models.keys() {
            let model: ModelRef = name.parse().map_err(|e| anyhow::anyhow!("{name:?}: {e}"))?;
            if let Some(record) = store.models().get(&model).await? {
                registered.push(Registered { model: name.clone(), version: record.version });
            }
        }
        let mut deployments: Vec<DeploymentRow> = store
            .deployments()
            .all()
            .await?
            .into_iter()
            .map(|d| {
                let release = &d.current_release;
                DeploymentRow {
                    deployment: d.full_name(),
                    model: release.model.to_string(),
                    version: release.version.clone(),
                    hardware: release.configuration.hardware.to_string(),
                    min_instances: release.configuration.min_instances,
                    max_instances: release.configuration.max_instances,
                }
            })
            .collect();
        deployments.sort_by(|a, b| a.deployment.cmp(&b.deployment));
        Ok(Self { registered, deployments })
    }
}

/// Renders the kit for `records`: the YAML documents, to apply with `kubectl apply -f -`.
pub fn render(kit: &Kit, records: &Records) -> Result<String, KitError> {
    pods::render(kit, records)
}
