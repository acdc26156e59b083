//! The `api_keys` collection (written by the api). A key is found by the SHA-256 hash of its
//! value (unique index); the value itself is sealed with the master key so that the account's
//! admins can read it back. `last_used_at` is written at most once a minute per key.

use bson::{DateTime, doc};
use mongodb::{Collection, Database};
use serde::{Deserialize, Serialize};

use common::store::StoreError;
use common::{
    crypto::{CryptoError, MasterKey},
    domain::{AccountId, ApiKeyId, ApiKeyValue, KeyHash, Scope},
};

/// How stale `last_used_at` may be before a use writes it again.
pub const LAST_USED_RESOLUTION_MS: i64 = 60_000;

/// An API key as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiKeyRecord {
    /// The key id.
    #[serde(rename = "_id")]
    pub id: ApiKeyId,
    /// The account it belongs to.
    pub account_id: AccountId,
    /// SHA-256 of the value, hex.
    pub key_hash: KeyHash,
    /// The value, sealed with the master key.
    pub key_sealed: String,
    /// The first 8 characters of the value.
    pub key_prefix: String,
    /// A name for people.
    pub name: String,
    /// What the key may do.
    pub scopes: Vec<Scope>,
    /// Requests per minute allowed.
    pub rate_limit_rpm: u32,
    /// Whether the key works at all.
    pub is_active: bool,
    /// When it was created.
    pub created_at: DateTime,
    /// When it stops working, if ever.
    pub expires_at: Option<DateTime>,
    /// When it was last used (at most a minute stale).
    pub last_used_at: Option<DateTime>,
}

fn key_context(id: &ApiKeyId) -> String {
    format!("api_key:{id}")
}

impl ApiKeyRecord {
    /// A new active key for `account`; returns the record and the value to hand out once.
    pub fn new(
        account_id: AccountId,
        name: String,
        scopes: Vec<Scope>,
        rate_limit_rpm: u32,
        expires_at: Option<DateTime>,
        master: &MasterKey,
    ) -> (Self, ApiKeyValue) {
        let id = ApiKeyId::generate();
        let value = ApiKeyValue::generate();
        let record = Self {
            key_hash: value.hash(),
            key_sealed: master.seal(value.expose(), &key_context(&id)),
            key_prefix: value.prefix().to_owned(),
            id,
            account_id,
            name,
            scopes,
            rate_limit_rpm,
            is_active: true,
            created_at: DateTime::now(),
            expires_at,
            last_used_at: None,
        };
        (record, value)
    }

    /// Whether the key authenticates requests at `now`: active and not expired.
    pub fn is_usable_at(&self, now: DateTime) -> bool {
        self.is_active && self.expires_at.is_none_or(|exp| now < exp)
    }

    /// Whether the key holds `scope`.
    pub fn has_scope(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope)
    }

    /// The key's value, opened with the master key.
    pub fn value(&self, master: &MasterKey) -> Result<String, CryptoError> {
        master.open(&self.key_sealed, &key_context(&self.id))
    }

    /// Its value sealed again under the master key's current key, if the previous key sealed
    /// it (a master-key rotation); `None` when it is already under the current key.
    pub fn resealed(&self, master: &MasterKey) -> Result<Option<String>, CryptoError> {
        master.reseal(&self.key_sealed, &key_context(&self.id))
    }
}

/// Typed access to the `api_keys` collection.
#[derive(Clone, Debug)]
pub struct ApiKeys {
    coll: Collection<ApiKeyRecord>,
}

impl ApiKeys {
    pub(super) fn new(db: &Database) -> Self {
        Self { coll: db.collection("api_keys") }
    }

    /// Stores a new key.
    pub async fn insert(&self, key: &ApiKeyRecord) -> Result<(), StoreError> {
        self.coll.insert_one(key).await.map(|_| ())
    }

    /// The key with this value's hash.
    pub async fn find_by_hash(&self, hash: &KeyHash) -> Result<Option<ApiKeyRecord>, StoreError> {
        self.coll.find_one(doc! { "key_hash": hash.as_str() }).await
    }

    /// A key by id, only if `account` owns it.
    pub async fn get_for_account(
        &self,
        id: &ApiKeyId,
        account: &AccountId,
    ) -> Result<Option<ApiKeyRecord>, StoreError> {
        let key = self.coll.find_one(doc! { "_id": id.as_str() }).await?;
        Ok(key.filter(|k| &k.account_id == account))
    }

    /// A page of `account`'s keys, newest first, and how many it has in all.
    pub async fn list_for_account(
        &self,
        account: &AccountId,
        offset: u64,
        limit: i64,
    ) -> Result<(Vec<ApiKeyRecord>, u64), StoreError> {
        let filter = doc! { "account_id": account.as_str() };
        common::store::page(&self.coll, filter, doc! { "created_at": -1, "_id": -1 }, offset, limit).await
    }

    /// Deactivates key `id` of `account`; returns it as it is now, `None` if `account` has no
    /// such key. Deactivating an inactive key changes nothing.
    pub async fn deactivate(&self, id: &ApiKeyId, account: &AccountId) -> Result<Option<ApiKeyRecord>, StoreError> {
        self.coll
            .find_one_and_update(
                doc! { "_id": id.as_str(), "account_id": account.as_str() },
                doc! { "$set": { "is_active": false } },
            )
            .return_document(mongodb::options::ReturnDocument::After)
            .await
    }

    /// Every key, of every account, one batch at a time (a master-key rotation walks them).
    pub async fn every(&self) -> Result<mongodb::Cursor<ApiKeyRecord>, StoreError> {
        self.coll.find(doc! {}).sort(doc! { "_id": 1 }).await
    }

    /// Replaces key `id`'s sealed value if it is still `expected`; returns whether it did.
    pub async fn replace_sealed(&self, id: &ApiKeyId, expected: &str, sealed: &str) -> Result<bool, StoreError> {
        let filter = doc! { "_id": id.as_str(), "key_sealed": expected };
        Ok(self.coll.update_one(filter, doc! { "$set": { "key_sealed": sealed } }).await?.modified_count == 1)
    }

    /// Records a use at `now` unless one was recorded within the last minute; returns whether
    /// it wrote.
    pub async fn touch_last_used(&self, id: &ApiKeyId, now: DateTime) -> Result<bool, StoreError> {
        let stale_before = DateTime::from_millis(now.timestamp_millis() - LAST_USED_RESOLUTION_MS);
        let filter = doc! {
            "_id": id.as_str(),
            "$or": [ { "last_used_at": null }, { "last_used_at": { "$lt": stale_before } } ],
        };
        let result = self.coll.update_one(filter, doc! { "$set": { "last_used_at": now } }).await?;
        Ok(result.modified_count == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(expires_at: Option<DateTime>) -> ApiKeyRecord {
        let master = MasterKey::from_base64(&MasterKey::generate_base64()).expect("valid");
        ApiKeyRecord::new(AccountId::generate(), "k".into(), vec![Scope::Read], 600, expires_at, &master).0
    }

    #[test]
    fn an_expired_or_inactive_key_is_not_usable() {
        let now = DateTime::from_millis(1_000_000);
        assert!(record(None).is_usable_at(now));
        assert!(record(Some(DateTime::from_millis(1_000_001))).is_usable_at(now));
        assert!(!record(Some(now)).is_usable_at(now));
        let mut inactive = record(None);
        inactive.is_active = false;
        assert!(!inactive.is_usable_at(now));
    }

    #[test]
    fn the_stored_record_finds_and_reveals_the_value() {
        let master = MasterKey::from_base64(&MasterKey::generate_base64()).expect("valid");
        let (rec, value) = ApiKeyRecord::new(AccountId::generate(), "k".into(), vec![Scope::Admin], 600, None, &master);
        assert_eq!(rec.key_hash, value.hash());
        assert_eq!(rec.key_prefix, value.prefix());
        assert_eq!(rec.value(&master).as_deref(), Ok(value.expose()));
        assert!(rec.has_scope(Scope::Admin) && !rec.has_scope(Scope::Write));
    }
}
