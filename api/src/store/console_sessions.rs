//! The `console_sessions` collection (written by the api): one document per signed-in browser.
//! `_id` is the SHA-256 (hex) of the session token the cookie carries, so the collection never
//! holds a usable token. A session is bound to the API key it was opened with: it lasts until
//! `expires_at`, `POST /logout`, or the key's deactivation or expiry, whichever comes first.
//!
//! Expiry is checked here, in code; the TTL index on `expires_at` only cleans up (real MongoDB
//! honours it, the local stand-in does not).

use bson::{DateTime, doc};
use mongodb::{Collection, Database};
use serde::{Deserialize, Serialize};

use common::domain::{AccountId, ApiKeyId, KeyHash};
use common::store::StoreError;

/// One session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsoleSession {
    /// SHA-256 (hex) of the session token.
    #[serde(rename = "_id")]
    pub token_hash: String,
    /// The account signed in.
    pub account_id: AccountId,
    /// The key used to sign in (its scopes are the session's).
    pub key_id: ApiKeyId,
    /// That key's hash, to look it up as requests do.
    pub key_hash: KeyHash,
    /// The token every console form must carry.
    pub csrf_token: String,
    /// When the session began.
    pub created_at: DateTime,
    /// When it ends at the latest.
    pub expires_at: DateTime,
}

/// Typed access to the `console_sessions` collection.
#[derive(Clone, Debug)]
pub struct ConsoleSessions {
    coll: Collection<ConsoleSession>,
}

impl ConsoleSessions {
    pub(super) fn new(db: &Database) -> Self {
        Self { coll: db.collection("console_sessions") }
    }

    /// Stores a new session.
    pub async fn insert(&self, session: &ConsoleSession) -> Result<(), StoreError> {
        self.coll.insert_one(session).await.map(|_| ())
    }

    /// The session with this token hash, if it exists and has not expired at `now`.
    pub async fn find_live(&self, token_hash: &str, now: DateTime) -> Result<Option<ConsoleSession>, StoreError> {
        let found = self.coll.find_one(doc! { "_id": token_hash }).await?;
        Ok(found.filter(|s| s.expires_at > now))
    }

    /// Ends the session with this token hash (nothing if there is none).
    pub async fn delete(&self, token_hash: &str) -> Result<(), StoreError> {
        self.coll.delete_one(doc! { "_id": token_hash }).await.map(|_| ())
    }
}
