//! A deployment's `min_instances` on one machine: the instances a runner keeps of a Cog
//! project it starts itself follow the deployments of the version it serves.
//!
//! Every [`INTERVAL`] the runner reads the deployments and, for each project it supervises,
//! adds up the `min_instances` of the current releases that run the version it serves on its
//! pool. That many of the project's instances are kept running (booted now if they are not,
//! never stopped as idle), and at least the project's own `min_instances`
//! ([`Instances::set_floor`]). A release that lowers it, or a deployment deleted, leaves the
//! extra instances to stop once idle. A deployment's `max_instances` cannot take a machine
//! past the project's declared `max_instances`: that is the operator's statement of what the
//! machine can run (one GPU's memory, say), and deployments are any account's.

use std::{sync::Arc, time::Duration};

use common::{
    domain::{ModelRef, Pool},
    store::{Store, deployments::DeploymentRecord},
};
use tokio_util::sync::CancellationToken;

use crate::models::cog::instances::Instances;

/// How often the deployments are read.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// A project this runner supervises: its model, the version it serves, and its instances.
pub struct Supervised {
    /// The model.
    pub model: ModelRef,
    /// The version the runner registered it under.
    pub version: String,
    /// Its instances.
    pub instances: Arc<Instances>,
}

/// The `min_instances` the deployments of `deployments` ask of `model`'s `version` on `pool`.
pub fn asked_of(deployments: &[DeploymentRecord], model: &ModelRef, version: &str, pool: &Pool) -> usize {
    deployments
        .iter()
        .map(|d| &d.current_release)
        .filter(|r| &r.model == model && r.version == version && &r.configuration.hardware == pool)
        .map(|r| usize::try_from(r.configuration.min_instances).unwrap_or(usize::MAX))
        .fold(0, usize::saturating_add)
}

/// Sets each project's floor from the deployments now; what failed is logged, and the floors
/// stay as they were until the next read.
pub async fn apply(store: &Store, supervised: &[Supervised], pool: &Pool) {
    let deployments = match store.deployments().all().await {
        Ok(all) => all,
        Err(e) => {
            tracing::warn!(error = %e, "the deployments were not read; the models' kept instances stay as they are");
            return;
        }
    };
    for s in supervised {
        let kept = s.instances.set_floor(asked_of(&deployments, &s.model, &s.version, pool));
        tracing::debug!(model = %s.model, kept, "instances kept running");
    }
}

/// Applies the floors now and every [`INTERVAL`] until `shutdown`.
pub async fn keep(store: Store, supervised: Vec<Supervised>, pool: Pool, shutdown: CancellationToken) {
    if supervised.is_empty() {
        return;
    }
    loop {
        apply(&store, &supervised, &pool).await;
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(INTERVAL) => {}
        }
    }
}
