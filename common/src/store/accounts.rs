//! The `accounts` collection (written by the api): an account's name and its webhook signing
//! secrets, sealed with the master key. During a rotation's transition window the previous
//! secret is kept with its expiry, for the notifier to sign with both.

use bson::{DateTime, doc};
use mongodb::{Collection, Database};
use serde::{Deserialize, Serialize};

use super::StoreError;
use crate::{
    crypto::{CryptoError, MasterKey},
    domain::{AccountId, Micros, WebhookSecret},
};

/// The signing secrets as stored: sealed text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SealedSigningSecrets {
    /// The current secret, sealed.
    pub current: String,
    /// When the current secret was created.
    pub created_at: DateTime,
    /// The previous secret, sealed, while its transition window is open.
    pub previous: Option<String>,
    /// When the previous secret stops signing.
    pub previous_expires_at: Option<DateTime>,
}

/// The signing secrets, opened.
#[derive(Debug, Clone, PartialEq)]
pub struct SigningSecrets {
    /// The current secret.
    pub current: WebhookSecret,
    /// When it was created.
    pub created_at: DateTime,
    /// The previous secret and when it stops signing.
    pub previous: Option<(WebhookSecret, DateTime)>,
}

impl SigningSecrets {
    /// The secrets that sign a delivery made at `now`: the current one, then the previous one
    /// while its window is open.
    pub fn signing_at(&self, now: DateTime) -> Vec<&WebhookSecret> {
        let mut out = vec![&self.current];
        if let Some((old, expires)) = &self.previous
            && now < *expires
        {
            out.push(old);
        }
        out
    }
}

/// An account.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Account {
    /// The account id.
    #[serde(rename = "_id")]
    pub id: AccountId,
    /// Its unique name.
    pub name: String,
    /// When it was created.
    pub created_at: DateTime,
    /// Its webhook signing secrets.
    pub webhook_secret: SealedSigningSecrets,
    /// The most predictions it may have running at once, over every runner (`None`: no cap).
    /// Past it, its jobs wait in the queue while other accounts' jobs take the free slots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
    /// The highest priority its predictions may ask for (`normal` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_priority: Option<crate::domain::Priority>,
    /// Its monthly budget as the operator set it (`api admin set-budget`; none: no budget).
    #[serde(default, rename = "monthly_budget_micros", skip_serializing_if = "Option::is_none")]
    pub operator_budget: Option<Micros>,
    /// A lower monthly budget its admins set for themselves (`PATCH /v1/account`).
    #[serde(default, rename = "own_budget_micros", skip_serializing_if = "Option::is_none")]
    pub own_budget: Option<Micros>,
}

/// What an account may ask of the service, as a create checks it: read together, in one
/// look-up of the account.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccountLimits {
    /// The highest priority its predictions may ask for.
    pub max_priority: crate::domain::Priority,
    /// Its monthly budget as the operator set it.
    pub operator_budget: Option<Micros>,
    /// The lower budget its admins set, if any.
    pub own_budget: Option<Micros>,
}

impl AccountLimits {
    /// The budget in force: the lower of the operator's and the account's own.
    pub fn monthly_budget(&self) -> Option<Micros> {
        match (self.operator_budget, self.own_budget) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

impl Account {
    /// Its limits.
    pub fn limits(&self) -> AccountLimits {
        AccountLimits {
            max_priority: self.max_priority.unwrap_or_default(),
            operator_budget: self.operator_budget,
            own_budget: self.own_budget,
        }
    }
}

fn secret_context(id: &AccountId) -> String {
    format!("webhook_secret:{id}")
}

impl Account {
    /// A new account with a fresh signing secret.
    pub fn new(name: &str, master: &MasterKey) -> (Self, WebhookSecret) {
        let id = AccountId::generate();
        let secret = WebhookSecret::generate();
        let now = DateTime::now();
        let account = Self {
            webhook_secret: SealedSigningSecrets {
                current: master.seal(secret.expose(), &secret_context(&id)),
                created_at: now,
                previous: None,
                previous_expires_at: None,
            },
            id,
            name: name.to_owned(),
            created_at: now,
            max_concurrency: None,
            max_priority: None,
            operator_budget: None,
            own_budget: None,
        };
        (account, secret)
    }

    /// The secrets after a rotation at `now`: a fresh current secret, and the current one kept
    /// as the previous until `now + transition_ms`. Returns them with the new secret.
    pub fn rotated(
        &self,
        master: &MasterKey,
        now: DateTime,
        transition_ms: i64,
    ) -> (SealedSigningSecrets, WebhookSecret) {
        let secret = WebhookSecret::generate();
        let sealed = SealedSigningSecrets {
            current: master.seal(secret.expose(), &secret_context(&self.id)),
            created_at: now,
            previous: Some(self.webhook_secret.current.clone()),
            previous_expires_at: Some(DateTime::from_millis(now.timestamp_millis() + transition_ms)),
        };
        (sealed, secret)
    }

    /// Its signing secrets sealed again under the master key's current key, if the previous
    /// key sealed either of them (a master-key rotation); `None` when neither is left to move.
    pub fn resealed_secrets(&self, master: &MasterKey) -> Result<Option<SealedSigningSecrets>, CryptoError> {
        let ctx = secret_context(&self.id);
        let sealed = &self.webhook_secret;
        let current = master.reseal(&sealed.current, &ctx)?;
        let previous = match &sealed.previous {
            Some(previous) => master.reseal(previous, &ctx)?,
            None => None,
        };
        if current.is_none() && previous.is_none() {
            return Ok(None);
        }
        Ok(Some(SealedSigningSecrets {
            current: current.unwrap_or_else(|| sealed.current.clone()),
            previous: previous.or_else(|| sealed.previous.clone()),
            ..sealed.clone()
        }))
    }

    /// Opens the signing secrets with the master key.
    pub fn signing_secrets(&self, master: &MasterKey) -> Result<SigningSecrets, CryptoError> {
        let ctx = secret_context(&self.id);
        let open = |sealed: &str| {
            let text = master.open(sealed, &ctx)?;
            WebhookSecret::parse(&text).map_err(|_| CryptoError::CannotOpen)
        };
        let previous = match (&self.webhook_secret.previous, self.webhook_secret.previous_expires_at) {
            (Some(sealed), Some(expires)) => Some((open(sealed)?, expires)),
            _ => None,
        };
        Ok(SigningSecrets {
            current: open(&self.webhook_secret.current)?,
            created_at: self.webhook_secret.created_at,
            previous,
        })
    }
}

/// Typed access to the `accounts` collection.
#[derive(Clone, Debug)]
pub struct Accounts {
    coll: Collection<Account>,
}

impl Accounts {
    pub(super) fn new(db: &Database) -> Self {
        Self { coll: db.collection("accounts") }
    }

    /// Stores a new account; a taken name is a duplicate-key error.
    pub async fn insert(&self, account: &Account) -> Result<(), StoreError> {
        self.coll.insert_one(account).await.map(|_| ())
    }

    /// Every account, one batch at a time (a master-key rotation walks them).
    pub async fn every(&self) -> Result<mongodb::Cursor<Account>, StoreError> {
        self.coll.find(doc! {}).sort(doc! { "_id": 1 }).await
    }

    /// An account by id.
    pub async fn get(&self, id: &AccountId) -> Result<Option<Account>, StoreError> {
        self.coll.find_one(doc! { "_id": id.as_str() }).await
    }

    /// Replaces the signing secrets if the current one is still `expected_current` (so two
    /// concurrent rotations cannot lose one); returns whether it replaced them.
    pub async fn replace_secrets(
        &self,
        id: &AccountId,
        expected_current: &str,
        secrets: &SealedSigningSecrets,
    ) -> Result<bool, StoreError> {
        let filter = doc! { "_id": id.as_str(), "webhook_secret.current": expected_current };
        let update = doc! { "$set": { "webhook_secret": bson::to_bson(secrets)? } };
        Ok(self.coll.update_one(filter, update).await?.modified_count == 1)
    }

    /// Sets (or, with `None`, lifts) the account's concurrency cap; returns whether the
    /// account exists.
    pub async fn set_max_concurrency(&self, id: &AccountId, max: Option<u32>) -> Result<bool, StoreError> {
        let update = match max {
            Some(n) => doc! { "$set": { "max_concurrency": i64::from(n) } },
            None => doc! { "$unset": { "max_concurrency": "" } },
        };
        Ok(self.coll.update_one(doc! { "_id": id.as_str() }, update).await?.matched_count == 1)
    }

    /// Field `field` of account `id` alone (a document with it, if set, and `_id`).
    async fn field_of(&self, id: &AccountId, field: &str) -> Result<Option<bson::Document>, StoreError> {
        let options = mongodb::options::FindOneOptions::builder().projection(doc! { field: 1 }).build();
        let raw = self.coll.clone_with_type::<bson::Document>();
        raw.find_one(doc! { "_id": id.as_str() }).with_options(options).await
    }

    /// Sets the highest priority account `id`'s predictions may ask for; whether it exists.
    pub async fn set_max_priority(&self, id: &AccountId, max: crate::domain::Priority) -> Result<bool, StoreError> {
        let update = doc! { "$set": { "max_priority": max.as_str() } };
        Ok(self.coll.update_one(doc! { "_id": id.as_str() }, update).await?.matched_count == 1)
    }

    /// Sets (or, with `None`, lifts) the operator's monthly budget of account `id`; whether it
    /// exists.
    pub async fn set_operator_budget(&self, id: &AccountId, budget: Option<Micros>) -> Result<bool, StoreError> {
        self.set_or_unset(id, "monthly_budget_micros", budget).await
    }

    /// Sets (or, with `None`, clears) the lower budget account `id`'s admins chose; whether
    /// it exists.
    pub async fn set_own_budget(&self, id: &AccountId, budget: Option<Micros>) -> Result<bool, StoreError> {
        self.set_or_unset(id, "own_budget_micros", budget).await
    }

    async fn set_or_unset(&self, id: &AccountId, field: &str, amount: Option<Micros>) -> Result<bool, StoreError> {
        let update = match amount {
            Some(m) => doc! { "$set": { field: m.0 } },
            None => doc! { "$unset": { field: "" } },
        };
        Ok(self.coll.update_one(doc! { "_id": id.as_str() }, update).await?.matched_count == 1)
    }

    /// Account `id`'s limits (the defaults for an account that does not exist).
    pub async fn limits(&self, id: &AccountId) -> Result<AccountLimits, StoreError> {
        let projection = doc! { "max_priority": 1, "monthly_budget_micros": 1, "own_budget_micros": 1 };
        let options = mongodb::options::FindOneOptions::builder().projection(projection).build();
        let raw = self.coll.clone_with_type::<bson::Document>();
        let Some(found) = raw.find_one(doc! { "_id": id.as_str() }).with_options(options).await? else {
            return Ok(AccountLimits::default());
        };
        let amount =
            |field: &str| found.get(field).and_then(|v| v.as_i64().or_else(|| v.as_i32().map(i64::from))).map(Micros);
        Ok(AccountLimits {
            max_priority: found.get_str("max_priority").ok().and_then(|p| p.parse().ok()).unwrap_or_default(),
            operator_budget: amount("monthly_budget_micros"),
            own_budget: amount("own_budget_micros"),
        })
    }

    /// The highest priority account `id`'s predictions may ask for (`normal` by default, and
    /// for an account that does not exist).
    pub async fn max_priority(&self, id: &AccountId) -> Result<crate::domain::Priority, StoreError> {
        let found = self.field_of(id, "max_priority").await?;
        Ok(found.and_then(|d| d.get_str("max_priority").ok().and_then(|p| p.parse().ok())).unwrap_or_default())
    }

    /// An account's concurrency cap (`None`: no cap, or no such account).
    pub async fn max_concurrency(&self, id: &AccountId) -> Result<Option<u32>, StoreError> {
        let found = self.field_of(id, "max_concurrency").await?;
        Ok(found
            .and_then(|d| {
                d.get("max_concurrency")
                    .and_then(bson::Bson::as_i64)
                    .or_else(|| d.get_i32("max_concurrency").ok().map(i64::from))
            })
            .and_then(|n| u32::try_from(n).ok()))
    }

    /// An account by name.
    pub async fn find_by_name(&self, name: &str) -> Result<Option<Account>, StoreError> {
        self.coll.find_one(doc! { "name": name }).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn master() -> MasterKey {
        MasterKey::from_base64(&MasterKey::generate_base64()).expect("valid")
    }

    #[test]
    fn a_new_accounts_secret_opens_to_the_one_handed_out() {
        let m = master();
        let (account, secret) = Account::new("acme", &m);
        assert!(!account.webhook_secret.current.contains(secret.expose()));
        let opened = account.signing_secrets(&m).expect("opens");
        assert_eq!(opened.current, secret);
        assert!(opened.previous.is_none());
    }

    #[test]
    fn the_previous_secret_signs_only_until_it_expires() {
        let secrets = SigningSecrets {
            current: WebhookSecret::generate(),
            created_at: DateTime::from_millis(0),
            previous: Some((WebhookSecret::generate(), DateTime::from_millis(10_000))),
        };
        assert_eq!(secrets.signing_at(DateTime::from_millis(9_999)).len(), 2);
        assert_eq!(secrets.signing_at(DateTime::from_millis(10_000)).len(), 1);
        assert_eq!(secrets.signing_at(DateTime::from_millis(10_000))[0], &secrets.current);
    }

    #[test]
    fn a_rotation_keeps_the_old_secret_as_previous_until_the_window_ends() {
        let m = master();
        let (account, old) = Account::new("acme", &m);
        let now = DateTime::from_millis(1_000_000);
        let (sealed, new) = account.rotated(&m, now, 3_600_000);
        let rotated = Account { webhook_secret: sealed, ..account };
        let opened = rotated.signing_secrets(&m).expect("opens");
        assert_eq!(opened.current, new);
        assert_eq!(opened.previous, Some((old, DateTime::from_millis(4_600_000))));
        assert_eq!(opened.signing_at(now).len(), 2);
    }

    #[test]
    fn a_secret_sealed_for_one_account_does_not_open_for_another() {
        let m = master();
        let (a, _) = Account::new("a", &m);
        let (mut b, _) = Account::new("b", &m);
        b.webhook_secret.current = a.webhook_secret.current.clone();
        assert!(b.signing_secrets(&m).is_err());
    }
}
