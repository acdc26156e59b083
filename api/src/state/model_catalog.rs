//! Registered models, as the api sees them, at the version a create runs: a model's
//! `latest_version` is the newest of its *live* versions (those a runner that is alive serves,
//! from the `runners` collection; see [`LiveRunners`]), or the version registered last while no
//! runner of it is alive, so creates still queue. A pinned version ([`ModelCatalog::version`])
//! is any version the model has had, live or not: its predictions wait for a runner of it.
//!
//! Look-ups are cached for [`MODEL_CACHE_TTL`] and the live runners for [`LIVE_CACHE_TTL`], so
//! a create does not cost a database round trip for either, and a new version is picked up
//! within seconds.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use bson::DateTime;
use common::{
    cache::TtlCache,
    domain::{ModelRef, Pool},
    store::{
        ModelRecord, ModelVersionRecord, Models,
        model_versions::ModelVersions,
        runners::{InstanceReport, ModelRuns, Runners},
    },
};
use serde_json::Value;

use crate::error::ApiError;

/// How long a model look-up is trusted.
pub const MODEL_CACHE_TTL: Duration = Duration::from_secs(5);
/// How long the set of live runners is trusted.
pub const LIVE_CACHE_TTL: Duration = Duration::from_secs(2);

/// A registered model at one version, with its parsed input schema.
#[derive(Debug)]
pub struct RegisteredModel {
    /// The registration (its `version` is the one a create runs).
    pub record: ModelRecord,
    /// The input JSON Schema.
    pub input_schema: Value,
    /// When the version asked for is a trained one: it, run on `record` (the version it was
    /// trained from). See the operations on trained versions (`ops::trained`).
    pub trained: Option<TrainedVersion>,
}

/// A trained version a create asked for (see `ops::trained`).
#[derive(Debug, Clone)]
pub struct TrainedVersion {
    /// The destination model it belongs to.
    pub model: ModelRef,
    /// Its id.
    pub version: String,
    /// Its weights, handed to the model in `replicate_weights` when the base version takes
    /// them (`None` when it does not).
    pub weights: Option<common::domain::FileId>,
}

impl RegisteredModel {
    /// `record` at its own version.
    pub fn of(record: ModelRecord) -> Result<Arc<Self>, ApiError> {
        let input_schema = record.input_schema()?;
        Ok(Arc::new(Self { record, input_schema, trained: None }))
    }

    fn at(version: &ModelVersionRecord) -> Result<Arc<Self>, ApiError> {
        Self::of(ModelRecord {
            model: version.model.clone(),
            capability: version.capability.clone(),
            input_schema_json: version.input_schema_json.clone(),
            version: version.id.clone(),
            registered_at: version.created_at,
            output_schema_json: version.output_schema_json.clone(),
        })
    }
}

/// What the live runners serve, read at one moment.
#[derive(Debug, Default)]
pub struct LiveSnapshot {
    /// The live versions of each model.
    pub versions: HashMap<ModelRef, HashSet<String>>,
    /// The pools live runners declare.
    pub pools: BTreeSet<Pool>,
    /// What they run of each model, summed, with all their recent run times of it.
    pub runs: HashMap<ModelRef, ModelRuns>,
    /// The model servers they start themselves, per model, each with its runner's id.
    pub instances: HashMap<ModelRef, Vec<(String, InstanceReport)>>,
}

/// The live runners, read from the `runners` collection at most every [`LIVE_CACHE_TTL`] (by
/// one request at a time: see [`TtlCache::get_or_load`]).
pub struct LiveRunners {
    runners: Runners,
    last: TtlCache<(), Arc<LiveSnapshot>>,
}

impl LiveRunners {
    /// Live runners from `runners`.
    pub fn new(runners: Runners) -> Self {
        Self { runners, last: TtlCache::new(LIVE_CACHE_TTL, 1) }
    }

    /// What the live runners serve now (at most [`LIVE_CACHE_TTL`] old).
    pub async fn snapshot(&self) -> Result<Arc<LiveSnapshot>, ApiError> {
        self.last.get_or_load(&(), || self.read()).await
    }

    async fn read(&self) -> Result<Arc<LiveSnapshot>, ApiError> {
        let mut snapshot = LiveSnapshot::default();
        for runner in self.runners.live(DateTime::now()).await? {
            snapshot.pools.insert(runner.pool);
            for instance in runner.instances {
                snapshot.instances.entry(instance.model.clone()).or_default().push((runner.id.clone(), instance));
            }
            for served in runner.serves {
                snapshot.versions.entry(served.model).or_default().insert(served.version);
            }
            for runs in runner.runs {
                let model = snapshot.runs.entry(runs.model.clone()).or_insert_with(|| ModelRuns {
                    model: runs.model,
                    running: 0,
                    recent_run_seconds: Vec::new(),
                });
                model.running += runs.running;
                model.recent_run_seconds.extend(runs.recent_run_seconds);
            }
        }
        Ok(Arc::new(snapshot))
    }
}

/// The catalog of registered models.
pub struct ModelCatalog {
    models: Models,
    versions: ModelVersions,
    live: Arc<LiveRunners>,
    cache: TtlCache<ModelRef, Option<Arc<RegisteredModel>>>,
}

impl ModelCatalog {
    /// A catalog over the `models`, `model_versions` and `runners` collections.
    pub fn new(models: Models, versions: ModelVersions, runners: Runners) -> Self {
        Self {
            models,
            versions,
            live: Arc::new(LiveRunners::new(runners)),
            cache: TtlCache::new(MODEL_CACHE_TTL, 10_000),
        }
    }

    /// The live runners: what they serve, on which pools, and their runs (read every 2 s).
    pub fn live(&self) -> &Arc<LiveRunners> {
        &self.live
    }

    /// The model at its latest version, if some runner registered it.
    pub async fn get(&self, model: &ModelRef) -> Result<Option<Arc<RegisteredModel>>, ApiError> {
        let load = || async {
            match self.models.get(model).await? {
                Some(record) => Ok(Some(self.latest(record).await?)),
                None => Ok(None),
            }
        };
        self.cache.get_or_load(model, load).await
    }

    /// The newest live version of the model whose last registration is `record`; that
    /// registration itself while none is live (or it is live).
    async fn latest(&self, record: ModelRecord) -> Result<Arc<RegisteredModel>, ApiError> {
        let snapshot = self.live.snapshot().await?;
        let Some(live) = snapshot.versions.get(&record.model).filter(|v| !v.is_empty()) else {
            return RegisteredModel::of(record);
        };
        if live.contains(&record.version) && live.len() == 1 {
            return RegisteredModel::of(record);
        }
        let mut newest: Option<ModelVersionRecord> = None;
        for id in live {
            if let Some(version) = self.versions.get(id).await?
                && version.model == record.model
                && newest.as_ref().is_none_or(|n| (version.created_at, &version.id) > (n.created_at, &n.id))
            {
                newest = Some(version);
            }
        }
        match newest {
            Some(version) => RegisteredModel::at(&version),
            None => RegisteredModel::of(record),
        }
    }

    /// The model at version `id`, if the model has had that version (live or not).
    pub async fn version(&self, model: &ModelRef, id: &str) -> Result<Option<Arc<RegisteredModel>>, ApiError> {
        if let Some(latest) = self.get(model).await?
            && latest.record.version == id
        {
            return Ok(Some(latest));
        }
        match self.versions.get(id).await? {
            Some(version) if &version.model == model => Ok(Some(RegisteredModel::at(&version)?)),
            _ => Ok(None),
        }
    }

    /// Whether a live runner serves version `id` of `model`.
    pub async fn is_live(&self, model: &ModelRef, id: &str) -> Result<bool, ApiError> {
        Ok(self.live.snapshot().await?.versions.get(model).is_some_and(|v| v.contains(id)))
    }
}
