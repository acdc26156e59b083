//! The `hardware_prices` collection: each hardware pool's price per second (see
//! [`crate::domain::money`]), `{_id: pool, price_nanos, set_at}`, written by the operator
//! (`api admin set-price`); a pool without a document is free. Prices belong to the whole
//! service: no account's key changes them.
//!
//! A runner reads its pool's price when it starts, when a change is broadcast
//! ([`crate::bus::Bus::publish_price_set`]) and every few minutes besides, and records it
//! on each job it starts; so a price applies to jobs that start after it is set, and a job's
//! cost never changes after.

use std::{collections::BTreeMap, time::Duration};

use bson::{DateTime, doc};
use futures::TryStreamExt;
use mongodb::{Collection, Database};
use serde::{Deserialize, Serialize};

use super::StoreError;
use crate::domain::{Pool, Price};

/// How often a runner reads its pool's price again without being told of a change.
pub const REREAD: Duration = Duration::from_secs(300);

/// A pool's price as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolPrice {
    /// The pool.
    #[serde(rename = "_id")]
    pub pool: Pool,
    /// Its price per second.
    #[serde(rename = "price_nanos")]
    pub price: Price,
    /// When the operator set it.
    pub set_at: DateTime,
}

/// Typed access to `hardware_prices`.
#[derive(Clone, Debug)]
pub struct Prices {
    coll: Collection<PoolPrice>,
}

impl Prices {
    pub(super) fn new(db: &Database) -> Self {
        Self { coll: db.collection("hardware_prices") }
    }

    /// Sets `pool`'s price.
    pub async fn set(&self, pool: &Pool, price: Price) -> Result<(), StoreError> {
        let update = doc! { "$set": { "price_nanos": price.0, "set_at": DateTime::now() } };
        self.coll.update_one(doc! { "_id": pool.as_str() }, update).upsert(true).await?;
        Ok(())
    }

    /// `pool`'s price (free when none was set).
    pub async fn of(&self, pool: &Pool) -> Result<Price, StoreError> {
        Ok(self.coll.find_one(doc! { "_id": pool.as_str() }).await?.map_or(Price::FREE, |p| p.price))
    }

    /// Every price set, by pool.
    pub async fn all(&self) -> Result<BTreeMap<Pool, Price>, StoreError> {
        // In `_id` order: a walk of the `_id` index, not a scan (one document per priced pool).
        let prices: Vec<PoolPrice> = self.coll.find(doc! {}).sort(doc! { "_id": 1 }).await?.try_collect().await?;
        Ok(prices.into_iter().map(|p| (p.pool, p.price)).collect())
    }
}
