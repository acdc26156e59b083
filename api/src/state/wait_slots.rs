//! The cap on held `Prefer: wait` creates: at most `API_MAX_WAITS` per replica and
//! `API_MAX_WAITS_PER_KEY` per key at once. A create past either cap is answered at once with
//! the prediction as created (`starting`), as RFC 7240 lets a server ignore a preference, and
//! as Replicate's clients expect: they poll a `starting` prediction. A wait that was honoured
//! is announced with `Preference-Applied: wait=N`.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use common::domain::ApiKeyId;

/// The held waits of one replica.
pub struct WaitSlots {
    max: usize,
    max_per_key: usize,
    held: Arc<Mutex<Held>>,
}

#[derive(Default)]
struct Held {
    total: usize,
    by_key: HashMap<ApiKeyId, usize>,
}

/// One held wait; released when dropped.
pub struct WaitSlot {
    key: ApiKeyId,
    held: Arc<Mutex<Held>>,
}

impl WaitSlots {
    /// At most `max` waits at once, `max_per_key` of them for one key.
    pub fn new(max: usize, max_per_key: usize) -> Self {
        Self { max, max_per_key, held: Arc::new(Mutex::new(Held::default())) }
    }

    /// A slot for `key`, if neither cap is reached.
    pub fn try_take(&self, key: &ApiKeyId) -> Option<WaitSlot> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let of_key = held.by_key.get(key).copied().unwrap_or(0);
        if held.total >= self.max || of_key >= self.max_per_key {
            return None;
        }
        held.total += 1;
        held.by_key.insert(key.clone(), of_key + 1);
        Some(WaitSlot { key: key.clone(), held: self.held.clone() })
    }

    /// Waits held now.
    pub fn held(&self) -> usize {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).total
    }
}

impl Drop for WaitSlot {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.total -= 1;
        if let Some(n) = held.by_key.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                held.by_key.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_caps_hold_and_a_released_slot_is_free_again() {
        let slots = WaitSlots::new(3, 2);
        let (a, b) = (ApiKeyId::generate(), ApiKeyId::generate());
        let a1 = slots.try_take(&a).expect("free");
        let _a2 = slots.try_take(&a).expect("free");
        assert!(slots.try_take(&a).is_none(), "the key's cap");
        let _b1 = slots.try_take(&b).expect("free");
        assert!(slots.try_take(&b).is_none(), "the replica's cap");
        assert_eq!(slots.held(), 3);
        drop(a1);
        assert!(slots.try_take(&b).is_some(), "released");
    }
}
