//! A small map whose entries expire after a fixed time, for look-ups that may be a little stale
//! (API keys, models, signing secrets): it saves a database round trip per request while a
//! change still takes effect within the time to live.
//!
//! [`TtlCache::get_or_load`] reads an expired entry again by one caller at a time, serving the
//! others the entry as it was meanwhile: without it, every request that came while the read of
//! an expired entry was under way read it too (a herd). Under the bench's overload (4,400
//! creates a second on one key and one model) the stand-in saw 46 reads of the one API key and
//! 78 of the one model within the same 100 ms, each time their entries expired; every request
//! of those instants waited for its own read.
//!
//! A crate such as `moka` would do this too; this one has no background threads and keeps the
//! dependency tree small.

use std::{
    collections::{HashMap, HashSet},
    hash::Hash,
    sync::{Mutex, MutexGuard},
    time::{Duration, Instant},
};

/// A bounded map whose entries live for `ttl`.
pub struct TtlCache<K, V> {
    ttl: Duration,
    capacity: usize,
    inner: Mutex<Inner<K, V>>,
}

struct Inner<K, V> {
    entries: HashMap<K, (V, Instant)>,
    /// The keys a caller of [`TtlCache::get_or_load`] is reading now.
    loading: HashSet<K>,
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    /// A cache whose entries live for `ttl`, holding at most `capacity` of them.
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        Self {
            ttl,
            capacity: capacity.max(1),
            inner: Mutex::new(Inner { entries: HashMap::new(), loading: HashSet::new() }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner<K, V>> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The entry, if present and fresh.
    pub fn get(&self, key: &K) -> Option<V> {
        self.get_within(key, self.ttl)
    }

    /// The entry, if present and younger than `age` (for a caller that needs it fresher, or
    /// accepts it older, than the cache's time to live).
    pub fn get_within(&self, key: &K, age: Duration) -> Option<V> {
        self.lock().entries.get(key).filter(|(_, at)| at.elapsed() < age).map(|(v, _)| v.clone())
    }

    /// The entry, if present, however old (for a caller that prefers an old value to waiting
    /// while another refreshes it).
    pub fn get_stale(&self, key: &K) -> Option<V> {
        self.lock().entries.get(key).map(|(v, _)| v.clone())
    }

    /// The entry if fresh; otherwise what `load` reads, stored. While one caller loads an
    /// expired entry, the others get it as it was rather than each reading it again, so an
    /// entry is at most `ttl` plus one read old. A key with no entry at all (a first look-up,
    /// or one cleared or removed) is loaded by every caller that asks for it meanwhile. A load
    /// that fails or is dropped stores nothing and leaves the next caller to load.
    ///
    /// `load` makes the read's future only when one is needed, and it is awaited boxed: a
    /// look-up is most often a hit, and a read's future (a few KB for a MongoDB query) would
    /// otherwise be part of every caller's future.
    pub async fn get_or_load<E, F: Future<Output = Result<V, E>>>(
        &self,
        key: &K,
        load: impl FnOnce() -> F,
    ) -> Result<V, E> {
        {
            let mut inner = self.lock();
            match inner.entries.get(key) {
                Some((value, at)) if at.elapsed() < self.ttl => return Ok(value.clone()),
                Some((value, _)) if inner.loading.contains(key) => return Ok(value.clone()),
                _ => inner.loading.insert(key.clone()),
            };
        }
        let _loading = Loading { cache: self, key };
        let value = Box::pin(load()).await?;
        self.insert(key.clone(), value.clone());
        Ok(value)
    }

    /// Stores an entry; when full, expired entries are dropped first, then everything.
    pub fn insert(&self, key: K, value: V) {
        let mut inner = self.lock();
        if inner.entries.len() >= self.capacity {
            let ttl = self.ttl;
            inner.entries.retain(|_, (_, at)| at.elapsed() < ttl);
            if inner.entries.len() >= self.capacity {
                inner.entries.clear();
            }
        }
        inner.entries.insert(key, (value, Instant::now()));
    }

    /// Forgets every entry (after a change whose entries cannot be named).
    pub fn clear(&self) {
        self.lock().entries.clear();
    }

    /// Forgets an entry (after a change made by this process).
    pub fn remove(&self, key: &K) {
        self.lock().entries.remove(key);
    }
}

/// A load under way: the key is let go however the load ends.
struct Loading<'a, K: Eq + Hash + Clone, V: Clone> {
    cache: &'a TtlCache<K, V>,
    key: &'a K,
}

impl<K: Eq + Hash + Clone, V: Clone> Drop for Loading<'_, K, V> {
    fn drop(&mut self) {
        self.cache.lock().loading.remove(self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_entry_is_returned_and_an_expired_one_is_not() {
        let cache = TtlCache::new(Duration::from_secs(60), 10);
        cache.insert("a", 1);
        assert_eq!(cache.get(&"a"), Some(1));
        let expired = TtlCache::new(Duration::ZERO, 10);
        expired.insert("a", 1);
        assert_eq!(expired.get(&"a"), None);
        assert_eq!(expired.get_stale(&"a"), Some(1), "kept until replaced or dropped");
    }

    #[test]
    fn the_cache_never_grows_past_its_capacity() {
        let cache = TtlCache::new(Duration::from_secs(60), 2);
        for i in 0..10 {
            cache.insert(i, i);
        }
        let len = cache.lock().entries.len();
        assert!(len <= 2);
        assert_eq!(cache.get(&9), Some(9));
    }

    #[tokio::test]
    async fn an_expired_entry_is_served_as_it_was_while_another_caller_loads_it() {
        let cache = TtlCache::new(Duration::ZERO, 10);
        cache.insert("a", 1);
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let first = cache.get_or_load(&"a", || async {
            released.await.ok();
            Ok::<_, ()>(2)
        });
        tokio::pin!(first);
        assert!(futures::poll!(first.as_mut()).is_pending(), "the first caller loads");
        let loads = std::sync::atomic::AtomicUsize::new(0);
        let meanwhile = cache
            .get_or_load(&"a", || async {
                loads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok::<_, ()>(3)
            })
            .await;
        assert_eq!(meanwhile, Ok(1), "served the entry as it was");
        assert_eq!(loads.into_inner(), 0, "not read a second time");
        release.send(()).ok();
        assert_eq!(first.await, Ok(2));
        assert_eq!(cache.get_stale(&"a"), Some(2));
    }

    #[tokio::test]
    async fn a_load_that_fails_or_is_dropped_leaves_the_next_caller_to_load() {
        let cache = TtlCache::new(Duration::ZERO, 10);
        cache.insert("a", 1);
        assert_eq!(cache.get_or_load(&"a", || async { Err::<i32, _>("down") }).await, Err("down"));
        let dropped = cache.get_or_load(&"a", std::future::pending::<Result<i32, ()>>);
        assert!(tokio::time::timeout(Duration::from_millis(10), dropped).await.is_err());
        assert_eq!(cache.get_or_load(&"a", || async { Ok::<_, ()>(4) }).await, Ok(4));
    }

    #[tokio::test]
    async fn a_fresh_entry_is_not_loaded_and_a_missing_one_is() {
        let cache = TtlCache::new(Duration::from_secs(60), 10);
        assert_eq!(cache.get_or_load(&"a", || async { Ok::<_, ()>(1) }).await, Ok(1));
        assert_eq!(cache.get_or_load(&"a", || async { Ok::<_, ()>(2) }).await, Ok(1));
        let no_read = || -> std::future::Ready<Result<i32, ()>> { unreachable!("a fresh entry makes no read") };
        assert_eq!(cache.get_or_load(&"a", no_read).await, Ok(1), "the read is not even made");
    }

    #[test]
    fn removed_entries_are_gone() {
        let cache = TtlCache::new(Duration::from_secs(60), 10);
        cache.insert("a", 1);
        cache.remove(&"a");
        assert_eq!(cache.get(&"a"), None);
    }
}
