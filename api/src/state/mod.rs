//! The state every handler shares: configuration, storage, messaging, and the parts the api
//! keeps between requests, each owned by its module behind a type with private fields:
//! [`keys`] (API keys, cached), [`ratelimit`] (each key's counters, shared by the replicas),
//! [`metrics`] (what `/metrics` shows), [`model_catalog`] (registered models and the live runners),
//! [`queue_places`] (a waiting prediction's place), [`wait_slots`] (held `Prefer: wait`s),
//! [`job_outbox`] (jobs NATS did not take yet), [`account_limits`] (each account's highest
//! priority and its month's budget), [`tickets`] (each new prediction's place in its queue lane) and
//! [`scaling`] (what an autoscaler reads). The fields are `pub(crate)`: only the
//! api's own modules reach them.

pub mod account_limits;
pub mod job_outbox;
pub mod keys;
pub mod metrics;
pub mod model_catalog;
pub mod queue_places;
pub mod ratelimit;
pub mod scaling;
pub mod tickets;
pub mod wait_slots;

use std::{ops::Deref, sync::Arc};

use std::time::Duration;

use common::{
    bus::Bus,
    domain::Prediction,
    files::{Files, payloads::Payloads},
    links::Links,
    store::{Batching, GroupCommit, Store},
};
use tokio_util::task::TaskTracker;

use crate::store::ApiCollections;
use crate::{
    config::ApiConfig, state::job_outbox::JobOutbox, state::keys::KeyDirectory, state::metrics::HttpMetrics,
    state::model_catalog::ModelCatalog, state::queue_places::QueuePlaces, state::ratelimit::RateLimiter,
    state::tickets::TicketDesk, state::wait_slots::WaitSlots,
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
    pub(crate) config: ApiConfig,
    /// MongoDB.
    pub(crate) store: Store,
    /// Uploaded files and file outputs: records and bytes.
    pub(crate) files: Files,
    /// Predictions' values too large for their documents, in the file store.
    pub(crate) payloads: Payloads,
    /// NATS JetStream.
    pub(crate) bus: Bus,
    /// `/ready`'s memory of when MongoDB last answered (an election is forgiven).
    pub(crate) readiness: common::readiness::Readiness,
    /// Builds every URL the api hands out (both surfaces, stream tokens).
    pub(crate) links: Links,
    /// API keys, cached briefly.
    pub(crate) keys: KeyDirectory,
    /// Registered models, cached briefly.
    pub(crate) models: ModelCatalog,
    /// Stores new predictions, several per write when creates arrive together.
    pub(crate) new_predictions: GroupCommit<Prediction>,
    /// Hands each new prediction its ticket in its queue lane, several per write under load.
    pub(crate) tickets: TicketDesk,
    /// The per-key rate limit.
    pub(crate) rate_limiter: RateLimiter,
    /// The cap on held `Prefer: wait` creates.
    pub(crate) wait_slots: WaitSlots,
    /// What `/metrics` shows.
    pub(crate) metrics: Arc<HttpMetrics>,
    /// Waiting predictions' places in their queue.
    pub(crate) queue_places: QueuePlaces,
    /// The deployments' figures on `/metrics`.
    pub(crate) scaling_figures: crate::state::scaling::ScalingFigures,
    /// Work that outlives its request (confirming that a job was stored); waited for on
    /// shutdown.
    pub(crate) background: TaskTracker,
    /// Jobs not yet published, published again as soon as NATS takes them.
    pub(crate) job_outbox: JobOutbox,
    /// Counts the predictions this api ends (cancels) in the usage totals.
    pub(crate) usage: common::usage::UsageLedger,
    /// The highest priority each account may ask for.
    pub(crate) account_limits: crate::state::account_limits::AccountLimitsCache,
}

impl AppState {
    /// Builds the state around connected clients (and subscribes to key deactivations).
    pub async fn new(
        config: ApiConfig,
        store: Store,
        bus: Bus,
        files: Files,
        readiness: common::readiness::Readiness,
    ) -> Result<Self, common::bus::BusError> {
        let deactivations = bus.subscribe_key_deactivations().await?;
        let background = TaskTracker::new();
        let models = ModelCatalog::new(store.models(), store.model_versions(), store.runners());
        let tickets = TicketDesk::start(store.queue_lanes(), NEW_PREDICTIONS);
        Ok(Self(Arc::new(Shared {
            job_outbox: JobOutbox::start(bus.clone(), &background),
            usage: common::usage::UsageLedger::start(&store),
            account_limits: crate::state::account_limits::AccountLimitsCache::new(
                store.accounts(),
                store.usage_totals(),
            ),
            keys: KeyDirectory::new(store.api_keys(), deactivations),
            queue_places: QueuePlaces::new(
                store.predictions(),
                store.queue_lanes(),
                models.live().clone(),
                tickets.clone(),
            ),
            models,
            rate_limiter: RateLimiter::new(bus.clone()),
            wait_slots: WaitSlots::new(config.max_waits, config.max_waits_per_key),
            new_predictions: store.predictions().group_commit(NEW_PREDICTIONS),
            tickets,
            background,
            metrics: Arc::new(HttpMetrics::new()),
            scaling_figures: crate::state::scaling::ScalingFigures::new(config.deployment_slots_per_instance),
            payloads: Payloads::new(files.clone()),
            files,
            links: Links::new(config.common.public_base_url.clone(), config.common.master_key.clone()),
            config,
            store,
            bus,
            readiness,
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
