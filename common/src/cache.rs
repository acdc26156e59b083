//! A small map whose entries expire after a fixed time, for look-ups that may be a little stale
//! (API keys, models, signing secrets): it saves a database round trip per request while a
//! change still takes effect within the time to live.
//!
//! A crate such as `moka` would do this too; this one is 50 lines, has no background threads
//! and keeps the dependency tree small.

use std::{
    collections::HashMap,
    hash::Hash,
    sync::Mutex,
    time::{Duration, Instant},
};

/// A bounded map whose entries live for `ttl`.
pub struct TtlCache<K, V> {
    ttl: Duration,
    capacity: usize,
    entries: Mutex<HashMap<K, (V, Instant)>>,
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    /// A cache whose entries live for `ttl`, holding at most `capacity` of them.
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        Self { ttl, capacity: capacity.max(1), entries: Mutex::new(HashMap::new()) }
    }

    /// The entry, if present and fresh.
    pub fn get(&self, key: &K) -> Option<V> {
        self.get_within(key, self.ttl)
    }

    /// The entry, if present and younger than `age` (for a caller that needs it fresher, or
    /// accepts it older, than the cache's time to live).
    pub fn get_within(&self, key: &K, age: Duration) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        entries.get(key).filter(|(_, at)| at.elapsed() < age).map(|(v, _)| v.clone())
    }

    /// The entry, if present, however old (for a caller that prefers an old value to waiting
    /// while another refreshes it).
    pub fn get_stale(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        entries.get(key).map(|(v, _)| v.clone())
    }

    /// Stores an entry; when full, expired entries are dropped first, then everything.
    pub fn insert(&self, key: K, value: V) {
        let mut entries = self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if entries.len() >= self.capacity {
            let ttl = self.ttl;
            entries.retain(|_, (_, at)| at.elapsed() < ttl);
            if entries.len() >= self.capacity {
                entries.clear();
            }
        }
        entries.insert(key, (value, Instant::now()));
    }

    /// Forgets every entry (after a change whose entries cannot be named).
    pub fn clear(&self) {
        self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clear();
    }

    /// Forgets an entry (after a change made by this process).
    pub fn remove(&self, key: &K) {
        let mut entries = self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        entries.remove(key);
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
        let len = cache.entries.lock().map(|e| e.len()).unwrap_or(usize::MAX);
        assert!(len <= 2);
        assert_eq!(cache.get(&9), Some(9));
    }

    #[test]
    fn removed_entries_are_gone() {
        let cache = TtlCache::new(Duration::from_secs(60), 10);
        cache.insert("a", 1);
        cache.remove(&"a");
        assert_eq!(cache.get(&"a"), None);
    }
}
