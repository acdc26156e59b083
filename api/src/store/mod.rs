//! The collections only the api reads and writes, one module each; the collections two or
//! more services share are [`common::store`]'s.
//!
//! | collection | module | written by |
//! |---|---|---|
//! | `api_keys` | [`api_keys`] | api (keys created, deactivated, used; `api admin` bootstrap and master-key rotation) |
//! | `collections` | [`collections`] | `api admin collection` (the api reads them) |
//! | `console_sessions` | [`console_sessions`] | api (console sign-in, sign-out) |
//! | `idempotency_keys` | [`idempotency`] | api (create with `Idempotency-Key`) |
//!
//! Their indexes are in [`common::store::indexes`] with every other collection's: the index
//! set is one migration step ([`common::store::migrations`]), whichever service runs it on a
//! new database. They are reached from a [`Store`] through [`ApiCollections`].

pub mod api_keys;
pub mod collections;
pub mod console_sessions;
pub mod idempotency;

use common::store::Store;

pub use api_keys::{ApiKeyRecord, ApiKeys};
pub use idempotency::{Claim, ClaimRaced, IdempotencyKeys};

/// The api's own collections on a [`Store`].
pub trait ApiCollections {
    /// The `api_keys` collection.
    fn api_keys(&self) -> ApiKeys;
    /// The `collections` collection (curated lists of models).
    fn collections(&self) -> collections::ModelCollections;
    /// The `console_sessions` collection.
    fn console_sessions(&self) -> console_sessions::ConsoleSessions;
    /// The `idempotency_keys` collection.
    fn idempotency_keys(&self) -> IdempotencyKeys;
}

impl ApiCollections for Store {
    fn api_keys(&self) -> ApiKeys {
        ApiKeys::new(self.database())
    }

    fn collections(&self) -> collections::ModelCollections {
        collections::ModelCollections::new(self.database())
    }

    fn console_sessions(&self) -> console_sessions::ConsoleSessions {
        console_sessions::ConsoleSessions::new(self.database())
    }

    fn idempotency_keys(&self) -> IdempotencyKeys {
        IdempotencyKeys::new(self.database())
    }
}
