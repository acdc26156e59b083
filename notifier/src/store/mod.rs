//! The collections only the notifier reads and writes; the collections two or more services
//! share are [`common::store`]'s.
//!
//! | collection | module | written by |
//! |---|---|---|
//! | `webhook_retries`, `webhook_targets` | [`webhook_retries`] | notifier (events waiting for a retry, per receiver) |
//!
//! Their indexes are in [`common::store::indexes`] with every other collection's (the index
//! set is one migration step, [`common::store::migrations`]). They are reached from a
//! [`Store`] through [`NotifierCollections`].

pub mod webhook_retries;

use common::store::Store;

/// The notifier's own collections on a [`Store`].
pub trait NotifierCollections {
    /// The `webhook_retries` and `webhook_targets` collections (events waiting for a retry).
    fn webhook_retries(&self) -> webhook_retries::WebhookRetries;
}

impl NotifierCollections for Store {
    fn webhook_retries(&self) -> webhook_retries::WebhookRetries {
        webhook_retries::WebhookRetries::new(self.database())
    }
}
