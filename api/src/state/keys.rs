//! [`KeyDirectory`]: API keys by the SHA-256 of their value, as every request looks them up.
//!
//! Each answer (found or not) is cached for [`KEY_CACHE_TTL`], the price of not reading
//! MongoDB on every request. A deactivation does not wait for it: the replica that
//! deactivates a key empties its own cache (refusing the key from its answer on), announces
//! the deactivation on NATS, and answers only once the announcement has come back to its own
//! subscription, that is once the NATS server has passed it to every replica's subscription.
//! Each replica empties its cache as an announcement arrives (a listener task per replica):
//! on another replica the key is refused as soon as that process reads the announcement,
//! which may come a moment after a request it reads first, never as late as the TTL. A lost announcement (NATS down at that
//! moment) costs at most the cache's lifetime, and the deactivation still answers.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use async_nats::Subscriber;
use bson::DateTime;
use common::{
    cache::TtlCache,
    domain::{ApiKeyId, ApiKeyValue, KeyHash},
    messages::KeyMessage,
};
use futures::StreamExt;
use tokio::sync::Notify;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::error::ApiError;
use crate::store::{ApiKeyRecord, ApiKeys, api_keys::LAST_USED_RESOLUTION_MS};

/// How long a key look-up is trusted when no deactivation is announced.
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(5);
const KEY_CACHE_CAPACITY: usize = 10_000;

/// How long a deactivation waits for its announcement to come back before it answers anyway.
const ANNOUNCEMENT_WAIT: Duration = Duration::from_secs(2);

/// API keys by hash, cached briefly; also keeps `last_used_at` to one write a minute per key.
pub struct KeyDirectory {
    keys: ApiKeys,
    cache: Arc<TtlCache<KeyHash, Option<ApiKeyRecord>>>,
    last_touched: Mutex<HashMap<ApiKeyId, Instant>>,
    announced: Arc<Announced>,
    _listener: DropGuard,
}

/// The deactivations this replica has heard announced and not yet been asked about.
#[derive(Default)]
struct Announced {
    keys: Mutex<HashSet<ApiKeyId>>,
    heard: Notify,
}

impl KeyDirectory {
    /// A directory over the `api_keys` collection whose listener empties the cache whenever
    /// `deactivations` (the subscription to the announcements) brings one; the listener stops
    /// when the directory is dropped.
    pub fn new(keys: ApiKeys, deactivations: Subscriber) -> Self {
        let cache = Arc::new(TtlCache::new(KEY_CACHE_TTL, KEY_CACHE_CAPACITY));
        let announced = Arc::new(Announced::default());
        let stop = CancellationToken::new();
        tokio::spawn(listen(deactivations, cache.clone(), announced.clone(), stop.clone()));
        Self { keys, cache, last_touched: Mutex::new(HashMap::new()), announced, _listener: stop.drop_guard() }
    }

    /// Forgets every cached look-up (after a deactivation made by this replica).
    pub fn forget_all(&self) {
        self.cache.clear();
    }

    /// Waits (a bounded time) until this replica has heard `key`'s deactivation announced.
    pub async fn heard(&self, key: &ApiKeyId) -> bool {
        let wait = async {
            loop {
                let heard = self.announced.heard.notified();
                if self.announced.keys.lock().unwrap_or_else(|p| p.into_inner()).remove(key) {
                    return;
                }
                heard.await;
            }
        };
        tokio::time::timeout(ANNOUNCEMENT_WAIT, wait).await.is_ok()
    }

    /// The key record for a presented value, if it exists (usable or not).
    pub async fn lookup(&self, value: &ApiKeyValue) -> Result<Option<ApiKeyRecord>, ApiError> {
        self.lookup_hash(&value.hash()).await
    }

    /// The key record with this hash, if it exists (usable or not).
    pub async fn lookup_hash(&self, hash: &KeyHash) -> Result<Option<ApiKeyRecord>, ApiError> {
        Ok(self.cache.get_or_load(hash, || self.keys.find_by_hash(hash)).await?)
    }

    /// Records a use of `key`, writing `last_used_at` at most once a minute per key and
    /// replica; the store's conditional update keeps it to once a minute across replicas.
    pub fn note_use(&self, key: &ApiKeyRecord) {
        let resolution = Duration::from_millis(LAST_USED_RESOLUTION_MS as u64);
        {
            let mut touched = self.last_touched.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            if touched.get(&key.id).is_some_and(|at| now.duration_since(*at) < resolution) {
                return;
            }
            if touched.len() >= KEY_CACHE_CAPACITY {
                touched.retain(|_, at| now.duration_since(*at) < resolution);
            }
            touched.insert(key.id.clone(), now);
        }
        let keys = self.keys.clone();
        let id = key.id.clone();
        tokio::spawn(async move {
            if let Err(e) = keys.touch_last_used(&id, DateTime::now()).await {
                tracing::warn!(key_id = %id, error = %e, "could not record last_used_at");
            }
        });
    }
}

/// Empties the cache on every announced deactivation, until `stop`.
async fn listen(
    mut deactivations: Subscriber,
    cache: Arc<TtlCache<KeyHash, Option<ApiKeyRecord>>>,
    announced: Arc<Announced>,
    stop: CancellationToken,
) {
    loop {
        let message = tokio::select! {
            () = stop.cancelled() => return,
            message = deactivations.next() => match message {
                Some(message) => message,
                None => return,
            },
        };
        match serde_json::from_slice::<KeyMessage>(&message.payload) {
            Ok(KeyMessage::KeyDeactivatedV1 { key_id, .. }) => {
                cache.clear();
                tracing::debug!(%key_id, "key deactivated; cached look-ups dropped");
                let mut keys = announced.keys.lock().unwrap_or_else(|p| p.into_inner());
                if keys.len() >= KEY_CACHE_CAPACITY {
                    keys.clear();
                }
                keys.insert(key_id);
                drop(keys);
                announced.heard.notify_waiters();
            }
            Err(e) => tracing::warn!(error = %e, "undecodable key announcement ignored"),
        }
    }
}
