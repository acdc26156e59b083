//! The state every handler shares: configuration, storage, messaging and the look-up caches.

use std::{ops::Deref, sync::Arc};

use std::time::Duration;

use common::{
    bus::Bus,
    domain::Prediction,
    files::Files,
    links::Links,
    store::{Batching, GroupCommit, Store, TicketDesk},
};
use tokio_util::task::TaskTracker;

use crate::{
    config::ApiConfig, job_outbox::JobOutbox, keys::KeyDirectory, metrics::HttpMetrics, models::ModelCatalog,
    queue::QueuePlaces, ratelimit::RateLimiter, wait_slots::WaitSlots,
};

/// How creates share writes: no waiting (a lone create is written at once), but creates that
/// arrive while [`Batching::max_in_flight`] writes are running share the next one. Measured
/// with the stand-in: 16 documents per `insert_many` store about twice as many per second as
/// single inserts, and the driver's per-command work is paid once per batch.
const NEW_PREDICTIONS: Batching = Batching { linger: Duration::ZERO, max_batch: 128, max_in_flight: 4 };

/// Cheap to clone; everything lives behind one `Arc`.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

/// What [`AppState`] holds.
pub struct Shared {
    /// The configuration.
    pub config: ApiConfig,
    /// MongoDB.
    pub store: Store,
    /// Uploaded files and file outputs: records and bytes.
    pub files: Files,
    /// NATS JetStream.
    pub bus: Bus,
    /// Builds every URL the api hands out (both surfaces, stream tokens).
    pub links: Links,
    /// API keys, cached briefly.
    pub keys: KeyDirectory,
    /// Registered models, cached briefly.
    pub models: ModelCatalog,
    /// Stores new predictions, several per write when creates arrive together.
    pub new_predictions: GroupCommit<Prediction>,
    /// Hands each new prediction its ticket in its queue lane, several per write under load.
    pub tickets: TicketDesk,
    /// The per-key rate limit.
    pub rate_limiter: RateLimiter,
    /// The cap on held `Prefer: wait` creates.
    pub wait_slots: WaitSlots,
    /// What `/metrics` shows.
    pub metrics: Arc<HttpMetrics>,
    /// Waiting predictions' places in their queue.
    pub queue_places: QueuePlaces,
    /// The deployments' figures on `/metrics`.
    pub deployment_figures: crate::deployment_metrics::DeploymentFigures,
    /// Work that outlives its request (confirming that a job was stored); waited for on
    /// shutdown.
    pub background: TaskTracker,
    /// Jobs not yet published, published again as soon as NATS takes them.
    pub job_outbox: JobOutbox,
    /// Counts the predictions this api ends (cancels) in the usage totals.
    pub usage: common::usage::UsageLedger,
    /// The highest priority each account may ask for.
    pub priority_limits: crate::priority::PriorityLimits,
}

impl AppState {
    /// Builds the state around connected clients (and subscribes to key deactivations).
    pub async fn new(config: ApiConfig, store: Store, bus: Bus, files: Files) -> Result<Self, common::bus::BusError> {
        let deactivations = bus.subscribe_key_deactivations().await?;
        let background = TaskTracker::new();
        let models = ModelCatalog::new(store.models(), store.model_versions(), store.runners());
        Ok(Self(Arc::new(Shared {
            job_outbox: JobOutbox::start(bus.clone(), &background),
            usage: common::usage::UsageLedger::start(&store),
            priority_limits: crate::priority::PriorityLimits::new(store.accounts()),
            keys: KeyDirectory::new(store.api_keys(), deactivations),
            queue_places: QueuePlaces::new(store.predictions(), store.queue_lanes(), models.live.clone()),
            models,
            rate_limiter: RateLimiter::new(bus.clone()),
            wait_slots: WaitSlots::new(config.max_waits, config.max_waits_per_key),
            new_predictions: store.predictions().group_commit(NEW_PREDICTIONS),
            tickets: TicketDesk::start(store.queue_lanes(), NEW_PREDICTIONS),
            background,
            metrics: Arc::new(HttpMetrics::new()),
            deployment_figures: crate::deployment_metrics::DeploymentFigures::new(config.deployment_slots_per_instance),
            files,
            links: Links::new(config.common.public_base_url.clone(), config.common.master_key.clone()),
            config,
            store,
            bus,
        })))
    }

    /// The public base URL (no trailing slash).
    pub fn base_url(&self) -> &str {
        &self.0.config.common.public_base_url
    }
}

impl Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}
