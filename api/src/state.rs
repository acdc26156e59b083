//! The state every handler shares: configuration, storage, messaging and the look-up caches.

use std::{ops::Deref, sync::Arc};

use common::{bus::Bus, store::Store};
use tokio_util::task::TaskTracker;

use crate::{auth::KeyDirectory, config::ApiConfig, models::ModelCatalog, ratelimit::RateLimiter};

/// Cheap to clone; everything lives behind one `Arc`.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

/// What [`AppState`] holds.
pub struct Shared {
    /// The configuration.
    pub config: ApiConfig,
    /// MongoDB.
    pub store: Store,
    /// NATS JetStream.
    pub bus: Bus,
    /// API keys, cached briefly.
    pub keys: KeyDirectory,
    /// Registered models, cached briefly.
    pub models: ModelCatalog,
    /// The per-key rate limit.
    pub rate_limiter: RateLimiter,
    /// Work that outlives its request (confirming that a job was stored); waited for on
    /// shutdown.
    pub background: TaskTracker,
}

impl AppState {
    /// Builds the state around connected clients.
    pub fn new(config: ApiConfig, store: Store, bus: Bus) -> Self {
        Self(Arc::new(Shared {
            keys: KeyDirectory::new(store.api_keys()),
            models: ModelCatalog::new(store.models()),
            rate_limiter: RateLimiter::new(bus.clone()),
            background: TaskTracker::new(),
            config,
            store,
            bus,
        }))
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
