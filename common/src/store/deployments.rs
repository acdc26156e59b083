//! The `deployments` collection (written by the api): each account's deployments by name, with
//! their current release (model, version, hardware pool, instance bounds). Every change makes
//! a new release (`number + 1`), written only if the release it replaces is still current, so
//! two concurrent updates cannot both claim the same number.

use bson::{DateTime, doc};
use futures::TryStreamExt;
use mongodb::{Collection, Database};
use serde::{Deserialize, Serialize};

use super::StoreError;
use crate::domain::{AccountId, ModelRef, Pool};

/// What a release runs on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseConfiguration {
    /// The hardware pool whose runners run its predictions.
    pub hardware: Pool,
    /// The fewest runners an autoscaler keeps.
    pub min_instances: u32,
    /// The most runners an autoscaler starts.
    pub max_instances: u32,
    /// The priority of its predictions that ask for none (`normal` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<crate::domain::Priority>,
}

/// One release of a deployment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Release {
    /// 1 for the first, one more for each change.
    pub number: u32,
    /// The model.
    pub model: ModelRef,
    /// The version its predictions run.
    pub version: String,
    /// When it was made.
    pub created_at: DateTime,
    /// The name of the account whose key made it.
    pub created_by: String,
    /// What it runs on.
    pub configuration: ReleaseConfiguration,
}

/// A deployment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeploymentRecord {
    /// `<account id>/<name>`: a name is unique within its account.
    #[serde(rename = "_id")]
    pub id: String,
    /// The account.
    pub account_id: AccountId,
    /// The account's name (the deployment's `owner`).
    pub owner: String,
    /// The deployment's name.
    pub name: String,
    /// When it was created.
    pub created_at: DateTime,
    /// The release its predictions run.
    pub current_release: Release,
}

impl DeploymentRecord {
    /// The id of `account`'s deployment `name`.
    pub fn id_of(account: &AccountId, name: &str) -> String {
        format!("{account}/{name}")
    }

    /// `owner/name`, as a prediction's `deployment` names it.
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }
}

/// Typed access to the `deployments` collection.
#[derive(Clone, Debug)]
pub struct Deployments {
    coll: Collection<DeploymentRecord>,
}

impl Deployments {
    pub(super) fn new(db: &Database) -> Self {
        Self { coll: db.collection("deployments") }
    }

    /// The collection itself (indexes).
    pub fn collection(&self) -> &Collection<DeploymentRecord> {
        &self.coll
    }

    /// Stores a new deployment; a taken name is a duplicate-key error.
    pub async fn insert(&self, deployment: &DeploymentRecord) -> Result<(), StoreError> {
        self.coll.insert_one(deployment).await.map(|_| ())
    }

    /// `account`'s deployment `name`.
    pub async fn get(&self, account: &AccountId, name: &str) -> Result<Option<DeploymentRecord>, StoreError> {
        self.coll.find_one(doc! { "_id": DeploymentRecord::id_of(account, name) }).await
    }

    /// One page of `account`'s deployments, newest first, and how many it has.
    pub async fn list(
        &self,
        account: &AccountId,
        offset: u64,
        limit: i64,
    ) -> Result<(Vec<DeploymentRecord>, u64), StoreError> {
        let filter = doc! { "account_id": account.as_str() };
        super::page(&self.coll, filter, doc! { "created_at": -1, "_id": -1 }, offset, limit).await
    }

    /// Every deployment (the api's metrics).
    pub async fn all(&self) -> Result<Vec<DeploymentRecord>, StoreError> {
        self.coll.find(doc! {}).await?.try_collect().await
    }

    /// Makes `release` current if release `replaces` still is; returns whether it did.
    pub async fn release(
        &self,
        account: &AccountId,
        name: &str,
        replaces: u32,
        release: &Release,
    ) -> Result<bool, StoreError> {
        let filter =
            doc! { "_id": DeploymentRecord::id_of(account, name), "current_release.number": i64::from(replaces) };
        let update = doc! { "$set": { "current_release": bson::to_bson(release)? } };
        Ok(self.coll.update_one(filter, update).await?.modified_count == 1)
    }

    /// Whether any deployment runs `model` now.
    pub async fn uses_model(&self, model: &ModelRef) -> Result<bool, StoreError> {
        self.any_release(doc! { "current_release.model": model.to_string() }).await
    }

    /// Whether any deployment runs version `version` of `model` now.
    pub async fn uses_version(&self, model: &ModelRef, version: &str) -> Result<bool, StoreError> {
        self.any_release(doc! { "current_release.model": model.to_string(), "current_release.version": version }).await
    }

    /// Whether any deployment's current release matches `filter`.
    async fn any_release(&self, filter: bson::Document) -> Result<bool, StoreError> {
        let found = self
            .coll
            .clone_with_type::<bson::Document>()
            .find_one(filter)
            .projection(doc! { "_id": 1 })
            .max_time(super::read_limit())
            .await?;
        Ok(found.is_some())
    }

    /// Deletes `account`'s deployment `name`; returns whether it existed.
    pub async fn delete(&self, account: &AccountId, name: &str) -> Result<bool, StoreError> {
        Ok(self.coll.delete_one(doc! { "_id": DeploymentRecord::id_of(account, name) }).await?.deleted_count == 1)
    }
}
