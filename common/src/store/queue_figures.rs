//! The queue as one waiting prediction sees it: the predictions of its lane waiting ahead of
//! it, how many each lane it takes turns with has waiting (both from the lanes' tickets and
//! marks, [`super::queue_lanes`]), how many of the model's are running, and the model's latest
//! run times. The model's part comes from its lanes (one document each, one query) and from
//! what the live runners report they run of it, with their recent run times
//! ([`super::runners::ModelRuns`]); nothing is counted over the predictions.
//!
//! A prediction stored before lanes had tickets has its place counted instead
//! ([`Predictions::ahead_in_lane`], a count of its lane's waiting predictions created before
//! it), as before.

use bson::{Document, doc};

use super::{Predictions, StoreError};
use crate::domain::Prediction;

/// What the queue looks like to one waiting prediction.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueFigures {
    /// Predictions of its lane (model and account) created before it and still waiting.
    pub ahead_in_lane: u64,
    /// Waiting predictions of each other lane of the model at the same level.
    pub other_lanes: Vec<u64>,
    /// Waiting predictions of the model's lanes at a higher level: they all start first.
    pub higher_levels: u64,
    /// Predictions of the model running now: with work waiting, every slot serving the model
    /// is busy (no slot idles while work waits), so this is the slots that serve it.
    pub running: u64,
    /// The model's latest run times (seconds).
    pub recent_run_seconds: Vec<f64>,
}

impl Predictions {
    /// Waiting predictions of `p`'s lane (model and account) created before it.
    pub async fn ahead_in_lane(&self, p: &Prediction) -> Result<u64, StoreError> {
        let coll = self.collection().clone_with_type::<Document>();
        let ahead = doc! {
            "model": p.model.to_string(), "account_id": p.account_id.as_str(), "status": "starting",
            "$or": [
                { "created_at": { "$lt": p.created_at } },
                { "created_at": p.created_at, "_id": { "$lt": p.id.as_str() } },
            ],
        };
        coll.count_documents(ahead).max_time(super::read_limit()).await
    }
}
