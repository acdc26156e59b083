//! What an autoscaler reads of each deployment, on the api's `GET /metrics`:
//!
//! - `deployment_pending_predictions{deployment}`: its predictions `starting` or `processing`;
//! - `deployment_desired_instances{deployment}`: the runners they call for,
//!   `ceil(pending / API_DEPLOYMENT_SLOTS_PER_INSTANCE)` kept within the current release's
//!   `min_instances` and `max_instances` (see [`desired`]).
//!
//! Counted at most every [`REFRESH`] (one indexed count per deployment), so frequent scrapes
//! by several Prometheus servers cost the database nothing more. The KEDA `ScaledObject`s of
//! `deploy/k8s/` scale each deployment's runners on the second.

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

use common::{metrics::kit::*, store::Store};

/// How long the figures are reused.
pub const REFRESH: Duration = Duration::from_secs(5);

/// One deployment's label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeploymentLabel {
    deployment: String,
}

/// The runners `pending` predictions call for, `per_instance` at a time, within `min..=max`.
pub fn desired(pending: u64, per_instance: u32, min: u32, max: u32) -> u64 {
    pending.div_ceil(u64::from(per_instance.max(1))).clamp(u64::from(min), u64::from(max.max(min)))
}

/// The figures, rendered, and when.
pub struct DeploymentFigures {
    per_instance: u32,
    last: Mutex<Option<(Instant, String)>>,
}

impl DeploymentFigures {
    /// Figures for runners of `per_instance` slots.
    pub fn new(per_instance: u32) -> Self {
        Self { per_instance, last: Mutex::new(None) }
    }

    /// The two families in the OpenMetrics text format, at most [`REFRESH`] old; the last ones
    /// (or none) when the database does not answer.
    pub async fn render(&self, store: &Store) -> String {
        if let Some((at, text)) = self.last.lock().unwrap_or_else(|p| p.into_inner()).as_ref()
            && at.elapsed() < REFRESH
        {
            return text.clone();
        }
        match self.count(store).await {
            Ok(text) => {
                *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), text.clone()));
                text
            }
            Err(e) => {
                tracing::warn!(error = %e, "the deployments' figures were not counted");
                self.last.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|(_, t)| t.clone()).unwrap_or_default()
            }
        }
    }

    async fn count(&self, store: &Store) -> Result<String, common::store::StoreError> {
        let pending = Family::<DeploymentLabel, Gauge>::default();
        let wanted = Family::<DeploymentLabel, Gauge>::default();
        for deployment in store.deployments().all().await? {
            let name = deployment.full_name();
            let n = store.predictions().count_pending_of_deployment(&name).await?;
            let configuration = &deployment.current_release.configuration;
            let want = desired(n, self.per_instance, configuration.min_instances, configuration.max_instances);
            let label = DeploymentLabel { deployment: name };
            pending.get_or_create(&label).set(i64::try_from(n).unwrap_or(i64::MAX));
            wanted.get_or_create(&label).set(i64::try_from(want).unwrap_or(i64::MAX));
        }
        let mut registry = Registry::default();
        registry.register(
            "deployment_pending_predictions",
            "Predictions of the deployment waiting or running",
            pending,
        );
        registry.register(
            "deployment_desired_instances",
            "Runners the deployment's pending predictions call for",
            wanted,
        );
        Ok(common::metrics::families(&registry))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_desired_runners_follow_the_work_within_the_release_bounds() {
        assert_eq!(desired(0, 4, 0, 3), 0, "scaled to zero when idle and allowed");
        assert_eq!(desired(0, 4, 1, 3), 1, "never under min_instances");
        assert_eq!(desired(5, 4, 0, 3), 2, "five predictions need two runners of four slots");
        assert_eq!(desired(100, 4, 0, 3), 3, "never over max_instances");
    }
}
