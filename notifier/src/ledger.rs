//! What this replica remembers of the deliveries of events it handed back to JetStream, so
//! that a redelivered event's attempt number is usually known without counting its attempt
//! records in MongoDB.
//!
//! JetStream numbers the deliveries of a message (1, 2, ...). When this replica has handled
//! every earlier delivery of an event (it noted delivery `n - 1` here), it knows exactly how
//! many of them were attempts. Otherwise (another replica, a restart, an expired ack wait, an
//! entry evicted) the ledger answers nothing and the caller counts the records: the ledger
//! can save a read, never give a wrong number.

use std::time::Duration;

use common::cache::TtlCache;

/// Entries kept at most (when full, the ledger forgets and the caller reads instead).
const CAPACITY: usize = 100_000;

/// The state after an event's last delivery handled here.
#[derive(Debug, Clone, Copy)]
struct Handled {
    /// JetStream's delivery number of it.
    delivery: i64,
    /// Attempts made up to and including it.
    attempts: u32,
}

/// Per-event delivery history of this replica, keyed by `webhook-id`.
pub struct DeliveryLedger {
    handled: TtlCache<String, Handled>,
}

impl DeliveryLedger {
    /// Remembers entries for `ttl`; it should outlast the longest retry delay.
    pub fn new(ttl: Duration) -> Self {
        Self { handled: TtlCache::new(ttl, CAPACITY) }
    }

    /// The attempts made before delivery number `delivery` of `webhook_id`, if known here.
    pub fn attempts_before(&self, webhook_id: &str, delivery: i64) -> Option<u32> {
        if delivery <= 1 {
            return Some(0);
        }
        let handled = self.handled.get(&webhook_id.to_owned())?;
        (handled.delivery == delivery - 1).then_some(handled.attempts)
    }

    /// Notes that delivery `delivery` of `webhook_id` was handed back after `attempts`
    /// attempts in all (this one included, if it was one).
    pub fn handed_back(&self, webhook_id: &str, delivery: i64, attempts: u32) {
        self.handled.insert(webhook_id.to_owned(), Handled { delivery, attempts });
    }

    /// Notes that delivery `delivery` was handed back without an attempt: remembered only
    /// when the attempts before it are known.
    pub fn handed_back_unattempted(&self, webhook_id: &str, delivery: i64) {
        match self.attempts_before(webhook_id, delivery) {
            Some(attempts) => self.handed_back(webhook_id, delivery, attempts),
            None => self.handled.remove(&webhook_id.to_owned()),
        }
    }

    /// Forgets an event that will not be delivered again (acknowledged or terminated).
    pub fn finished(&self, webhook_id: &str) {
        self.handled.remove(&webhook_id.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger() -> DeliveryLedger {
        DeliveryLedger::new(Duration::from_secs(60))
    }

    #[test]
    fn a_first_delivery_has_no_attempts_before_it() {
        assert_eq!(ledger().attempts_before("msg_1", 1), Some(0));
    }

    #[test]
    fn a_redelivery_after_deliveries_handled_here_counts_their_attempts() {
        let ledger = ledger();
        ledger.handed_back_unattempted("msg_1", 1);
        ledger.handed_back("msg_1", 2, 1);
        assert_eq!(ledger.attempts_before("msg_1", 3), Some(1));
        ledger.handed_back("msg_1", 3, 2);
        assert_eq!(ledger.attempts_before("msg_1", 4), Some(2));
    }

    #[test]
    fn a_gap_in_the_deliveries_seen_here_means_unknown() {
        let ledger = ledger();
        ledger.handed_back("msg_1", 1, 1);
        // Delivery 2 went to another replica (or expired here): its outcome is not known.
        assert_eq!(ledger.attempts_before("msg_1", 3), None);
        assert_eq!(ledger.attempts_before("msg_2", 2), None);
    }

    #[test]
    fn an_unattempted_hand_back_after_an_unknown_history_is_not_remembered() {
        let ledger = ledger();
        ledger.handed_back_unattempted("msg_1", 4);
        assert_eq!(ledger.attempts_before("msg_1", 5), None);
    }

    #[test]
    fn a_finished_event_is_forgotten() {
        let ledger = ledger();
        ledger.handed_back("msg_1", 1, 1);
        ledger.finished("msg_1");
        assert_eq!(ledger.attempts_before("msg_1", 2), None);
    }

    #[test]
    fn an_expired_entry_is_unknown() {
        let ledger = DeliveryLedger::new(Duration::ZERO);
        ledger.handed_back("msg_1", 1, 1);
        assert_eq!(ledger.attempts_before("msg_1", 2), None);
    }
}
