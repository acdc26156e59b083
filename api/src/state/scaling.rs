//! What an autoscaler reads, on the api's `GET /metrics`:
//!
//! - `deployment_pending_predictions{deployment}`: a deployment's predictions `starting` or
//!   `processing`;
//! - `deployment_desired_instances{deployment}`: the runners they call for,
//!   `ceil(pending / API_DEPLOYMENT_SLOTS_PER_INSTANCE)` kept within the current release's
//!   `min_instances` and `max_instances` (see [`desired`]);
//! - `model_pending_predictions{model}`: a registered model's predictions `starting` or
//!   `processing` that came by its own route or a pinned version (not by a deployment);
//! - `version_pending_predictions{model,version}`: the same, per version, for each version
//!   that has any (the pods of an older version are scaled on it; a version without a series
//!   has none, which the renderer's query reads as 0 while the model's series exists);
//! - `model_pending_trainings{model}`: a registered model's trainings `starting` or
//!   `processing` (its trainer pods are scaled on it).
//!
//! Every registered model and every deployment has its series, at 0 when idle: an autoscaler
//! that finds none has an error to report, not a zero to scale to. Counted at most every
//! [`REFRESH`] (one indexed count per model and per deployment), so frequent scrapes by
//! several Prometheus servers cost the database nothing more. The KEDA `ScaledObject`s that
//! `api admin render-kubernetes` writes ([`crate::kubernetes`]) scale the pods on them.

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

/// One model's label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabel {
    model: String,
}

/// One version's labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabel {
    model: String,
    version: String,
}

/// The most registered models counted (past it, the rest have no series and the log says so).
const MAX_MODELS: i64 = 10_000;

/// The runners `pending` predictions call for, `per_instance` at a time, within `min..=max`.
pub fn desired(pending: u64, per_instance: u32, min: u32, max: u32) -> u64 {
    pending.div_ceil(u64::from(per_instance.max(1))).clamp(u64::from(min), u64::from(max.max(min)))
}

/// The figures, rendered, and when.
pub struct ScalingFigures {
    per_instance: u32,
    last: Mutex<Option<(Instant, String)>>,
}

impl ScalingFigures {
    /// Figures for runners of `per_instance` slots.
    pub fn new(per_instance: u32) -> Self {
        Self { per_instance, last: Mutex::new(None) }
    }

    /// The three families in the OpenMetrics text format, at most [`REFRESH`] old; the last ones
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
                tracing::warn!(error = %e, "the autoscalers' figures were not counted");
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
        let models = Family::<ModelLabel, Gauge>::default();
        let (registered, total) = store.models().list(0, MAX_MODELS).await?;
        if total > registered.len() as u64 {
            tracing::warn!(total, counted = registered.len(), "more models than the autoscalers' figures count");
        }
        let versions = Family::<VersionLabel, Gauge>::default();
        let trainings = Family::<ModelLabel, Gauge>::default();
        for record in registered {
            let training = store.predictions().count_pending_trainings_of_model(&record.model).await?;
            trainings
                .get_or_create(&ModelLabel { model: record.model.to_string() })
                .set(i64::try_from(training).unwrap_or(i64::MAX));
            let by_version = store.predictions().pending_of_model_route_by_version(&record.model).await?;
            let model = record.model.to_string();
            for (version, n) in &by_version {
                versions
                    .get_or_create(&VersionLabel { model: model.clone(), version: version.clone() })
                    .set(i64::try_from(*n).unwrap_or(i64::MAX));
            }
            let n: u64 = by_version.iter().map(|(_, n)| n).sum();
            models.get_or_create(&ModelLabel { model }).set(i64::try_from(n).unwrap_or(i64::MAX));
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
        registry.register(
            "model_pending_predictions",
            "Predictions of the model's own route and pinned versions waiting or running",
            models,
        );
        registry.register("model_pending_trainings", "Trainings of the model waiting or running", trainings);
        registry.register(
            "version_pending_predictions",
            "Predictions of the version by the model's own route or pinned to it, waiting or running (versions with any)",
            versions,
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
