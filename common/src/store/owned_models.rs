//! The `owned_models` collection: models an account created (`POST /v1/models`, Replicate's
//! `models.create`), as a training's destination. A runner-registered model ([`super::models`])
//! is served by whoever registers it and belongs to no account; an owned model belongs to the
//! account whose name is its owner, has no version until a training records one, and is seen
//! by other accounts only when it is `public`.
//!
//! Written by the api (create, delete); read by the api, and by the runner when a training
//! into one has ended (whether its destination still stands: [`OwnedModels::stands_for`]).
//!
//! A delete marks the model first (`deleting_since`), then checks that no training into it is
//! under way, then removes its versions and the model: a training created meanwhile is
//! refused the marked destination, and one that ends meanwhile finds it marked or gone after
//! recording its version and removes that version again. So a deleted model never comes back
//! with a version, not even when its name is made again.

use bson::{DateTime, doc};
use futures::TryStreamExt;
use mongodb::{Collection, Database};
use serde::{Deserialize, Serialize};

use super::StoreError;
use crate::domain::{AccountId, ModelRef};

/// Who may see and run a model.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Visibility {
    /// Every account.
    Public,
    /// Its own account only.
    Private,
}

impl Visibility {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Public => "public",
            Self::Private => "private",
        }
    }
}

/// A model an account created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OwnedModel {
    /// `<owner>/<name>`; the owner is the account's name.
    #[serde(rename = "_id")]
    pub model: ModelRef,
    /// The account it belongs to.
    pub account_id: AccountId,
    /// Who may see it.
    pub visibility: Visibility,
    /// The hardware pool it names.
    pub hardware: String,
    /// What it does, as its owner says.
    #[serde(default)]
    pub description: Option<String>,
    /// Where to read more of it, as its owner says.
    #[serde(default)]
    pub links: ModelLinks,
    /// When it was created.
    pub created_at: DateTime,
    /// Set when a delete of it began (see the module's notes): it takes no new training.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleting_since: Option<DateTime>,
}

/// A model's links, as its owner gives them (`models.create`): each an absolute URL or none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelLinks {
    /// Its code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github_url: Option<String>,
    /// Its paper.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paper_url: Option<String>,
    /// Its license.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license_url: Option<String>,
    /// An image that shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cover_image_url: Option<String>,
}

impl OwnedModel {
    /// Whether `account` may see (and run) it: its own account, or any when it is public.
    pub fn visible_to(&self, account: &AccountId) -> bool {
        self.visibility == Visibility::Public || &self.account_id == account
    }
}

/// Typed access to the `owned_models` collection.
#[derive(Clone, Debug)]
pub struct OwnedModels {
    coll: Collection<OwnedModel>,
}

impl OwnedModels {
    pub(super) fn new(db: &Database) -> Self {
        Self { coll: db.collection("owned_models") }
    }

    /// Stores `model`; `false` if a model of that address exists already.
    pub async fn insert(&self, model: &OwnedModel) -> Result<bool, StoreError> {
        match self.coll.insert_one(model).await {
            Ok(_) => Ok(true),
            Err(e) if super::is_duplicate_key(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The model at `model`, whoever owns it.
    pub async fn get(&self, model: &ModelRef) -> Result<Option<OwnedModel>, StoreError> {
        self.coll.find_one(doc! { "_id": model.to_string() }).max_time(super::read_limit()).await
    }

    /// One page of the models `account` may see (its own and every public one), by address,
    /// and how many there are in all.
    pub async fn page_visible_to(
        &self,
        account: &AccountId,
        offset: u64,
        limit: i64,
    ) -> Result<(Vec<OwnedModel>, u64), StoreError> {
        let visible = doc! { "$or": [{ "account_id": account.as_str() }, { "visibility": "public" }] };
        super::page(&self.coll, visible, doc! { "_id": 1 }, offset, limit).await
    }

    /// The address and creation time of every model `account` may see (its own and every
    /// public one), and nothing else of them: the keys a sorted list orders.
    pub async fn created_visible_to(&self, account: &AccountId) -> Result<Vec<(ModelRef, DateTime)>, StoreError> {
        #[derive(Deserialize)]
        struct Key {
            #[serde(rename = "_id")]
            model: ModelRef,
            created_at: DateTime,
        }
        let visible = doc! { "$or": [{ "account_id": account.as_str() }, { "visibility": "public" }] };
        let keys = self.coll.clone_with_type::<Key>();
        let found: Vec<Key> = keys
            .find(visible)
            .projection(doc! { "_id": 1, "created_at": 1 })
            .max_time(super::read_limit())
            .await?
            .try_collect()
            .await?;
        Ok(found.into_iter().map(|k| (k.model, k.created_at)).collect())
    }

    /// Sets `fields` (stored names, as strings) of `account`'s `model`, unless a delete of it
    /// has begun; returns it as changed, or `None` when there is no such model of the account.
    pub async fn update(
        &self,
        account: &AccountId,
        model: &ModelRef,
        fields: &[(&str, String)],
    ) -> Result<Option<OwnedModel>, StoreError> {
        let filter = doc! { "_id": model.to_string(), "account_id": account.as_str(), "deleting_since": null };
        let mut set = bson::Document::new();
        for (name, value) in fields {
            set.insert(*name, value);
        }
        self.coll
            .find_one_and_update(filter, doc! { "$set": set })
            .return_document(mongodb::options::ReturnDocument::After)
            .await
    }

    /// Marks `account`'s `model` as being deleted (see the module's notes); whether it exists.
    pub async fn mark_deleting(&self, account: &AccountId, model: &ModelRef) -> Result<bool, StoreError> {
        let filter = doc! { "_id": model.to_string(), "account_id": account.as_str() };
        let marked = self.coll.update_one(filter, doc! { "$set": { "deleting_since": DateTime::now() } }).await?;
        Ok(marked.matched_count == 1)
    }

    /// Takes the mark of [`Self::mark_deleting`] back (the delete was refused).
    pub async fn unmark_deleting(&self, account: &AccountId, model: &ModelRef) -> Result<(), StoreError> {
        let filter = doc! { "_id": model.to_string(), "account_id": account.as_str() };
        self.coll.update_one(filter, doc! { "$unset": { "deleting_since": "" } }).await.map(drop)
    }

    /// Whether `model` still stands as the destination of a training of `account` created at
    /// `created_at`: it exists, belongs to `account`, no delete of it began, and it is the
    /// model the training was made for (created before it, not made again since). Read on the
    /// primary ([`super::settling_read`]): a delete's mark must not be missed by a lagging
    /// majority read.
    pub async fn stands_for(
        &self,
        model: &ModelRef,
        account: &AccountId,
        created_at: DateTime,
    ) -> Result<bool, StoreError> {
        let found = self.coll.find_one(doc! { "_id": model.to_string() }).with_options(super::settling_read()).await?;
        Ok(found.is_some_and(|m| &m.account_id == account && m.deleting_since.is_none() && m.created_at <= created_at))
    }

    /// Deletes `model` of `account`; `false` if it has no such model.
    pub async fn delete(&self, account: &AccountId, model: &ModelRef) -> Result<bool, StoreError> {
        let gone = self.coll.delete_one(doc! { "_id": model.to_string(), "account_id": account.as_str() }).await?;
        Ok(gone.deleted_count == 1)
    }
}
