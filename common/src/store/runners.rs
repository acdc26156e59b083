//! The `runners` collection (written by runners): each live runner process, the hardware pool
//! it declares and the model versions it serves, rewritten every [`HEARTBEAT`]. A runner that
//! stops removes its record; one that dies stops rewriting it, and counts as gone once its
//! record is older than [`LIVE_WITHIN`].
//!
//! This is how the api knows which versions are *live* (`latest_version` is the newest of
//! them) and which pools exist (`GET /v1/hardware`), and what the console shows of a model's
//! instances (the servers runners start themselves, [`InstanceReport`]).

use std::time::Duration;

use bson::{DateTime, doc};
use futures::TryStreamExt;
use mongodb::{Collection, Database};
use serde::{Deserialize, Serialize};

use super::StoreError;
use crate::domain::{ModelRef, Pool};

/// How often a runner rewrites its record.
pub const HEARTBEAT: Duration = Duration::from_secs(5);
/// A record rewritten within this long is a live runner's (three heartbeats).
pub const LIVE_WITHIN: Duration = Duration::from_secs(15);

/// One version of one model a runner serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Served {
    /// The model.
    pub model: ModelRef,
    /// Its version on this runner.
    pub version: String,
}

/// What a runner is running of one model, and how long its last runs of it took: the model's
/// part of a waiting prediction's queue place (`api::queue`), summed over the live runners,
/// with no query over the predictions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRuns {
    /// The model.
    pub model: ModelRef,
    /// Its predictions running on this runner now.
    pub running: u64,
    /// How long its last succeeded runs here took (seconds), newest first, at most
    /// [`RECENT_RUNS`].
    pub recent_run_seconds: Vec<f64>,
}

/// The most run times a runner reports per model.
pub const RECENT_RUNS: usize = 20;

/// One model server this runner starts and stops itself (a Cog project it was given), as it
/// stands: what the console's model page shows of the model's instances.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceReport {
    /// The model it serves.
    pub model: ModelRef,
    /// Its version (a trainer's ends in `-train`).
    pub version: String,
    /// `stopped`, `booting`, `ready`, `busy` or `stopping`.
    pub state: String,
    /// When its latest boot began, if it ever booted.
    pub booted_at: Option<DateTime>,
    /// How long its latest boot that reached `READY` took (seconds).
    pub boot_seconds: Option<f64>,
    /// Why its latest server ended (`idle`, `crashed`, `setup_failed`, `shutdown`), if one did.
    pub last_exit: Option<String>,
}

/// A runner process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunnerRecord {
    /// A name unique to the process (host, process id and a random part).
    #[serde(rename = "_id")]
    pub id: String,
    /// The hardware pool it declares.
    pub pool: Pool,
    /// What it serves.
    pub serves: Vec<Served>,
    /// When it started.
    pub started_at: DateTime,
    /// When it last rewrote its record.
    pub seen_at: DateTime,
    /// What it runs of each model it ran since it started (rewritten within a second of a
    /// change; absent from records of runners before this field).
    #[serde(default)]
    pub runs: Vec<ModelRuns>,
    /// The model servers it starts itself, as they stand (rewritten within a second of a
    /// change; absent from records of runners before this field).
    #[serde(default)]
    pub instances: Vec<InstanceReport>,
}

/// Typed access to the `runners` collection.
#[derive(Clone, Debug)]
pub struct Runners {
    coll: Collection<RunnerRecord>,
}

impl Runners {
    pub(super) fn new(db: &Database) -> Self {
        Self { coll: db.collection("runners") }
    }

    /// The collection itself (indexes).
    pub fn collection(&self) -> &Collection<RunnerRecord> {
        &self.coll
    }

    /// Writes the record, seen now.
    pub async fn heartbeat(&self, record: &RunnerRecord) -> Result<(), StoreError> {
        let record = RunnerRecord { seen_at: DateTime::now(), ..record.clone() };
        self.coll.replace_one(doc! { "_id": &record.id }, &record).upsert(true).await.map(|_| ())
    }

    /// Removes the record of a runner that stops.
    pub async fn remove(&self, id: &str) -> Result<(), StoreError> {
        self.coll.delete_one(doc! { "_id": id }).await.map(|_| ())
    }

    /// When runner `id` last wrote its record, if it has one (it removes it when it stops).
    pub async fn seen_at(&self, id: &str) -> Result<Option<DateTime>, StoreError> {
        // Read as a document: the projection leaves out fields a record requires.
        let records = self.coll.clone_with_type::<bson::Document>();
        let record = records.find_one(doc! { "_id": id }).projection(doc! { "seen_at": 1 }).await?;
        Ok(record.and_then(|r| r.get_datetime("seen_at").ok().copied()))
    }

    /// The runners seen within [`LIVE_WITHIN`] of `now`.
    pub async fn live(&self, now: DateTime) -> Result<Vec<RunnerRecord>, StoreError> {
        let since = DateTime::from_millis(now.timestamp_millis() - LIVE_WITHIN.as_millis() as i64);
        self.coll.find(doc! { "seen_at": { "$gte": since } }).await?.try_collect().await
    }
}
