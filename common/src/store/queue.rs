//! The queue as one waiting prediction sees it, read from the `predictions` collection: the
//! `starting` predictions of its model ahead of it in its own lane (same account, created
//! before it), how many of every other account's are waiting, how many of the model's are
//! running, and the model's latest run times. [`crate::store::Predictions::queue_figures`]
//! answers them in four queries, each on an index led by the status or the model.

use bson::{Bson, Document, doc};
use futures::TryStreamExt;

use super::{Predictions, StoreError};
use crate::domain::Prediction;

/// How many finished runs the estimate averages.
pub const RECENT_RUNS: i64 = 20;

/// What the queue looks like to one waiting prediction.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueFigures {
    /// Predictions of its lane (model and account) created before it and still waiting.
    pub ahead_in_lane: u64,
    /// Waiting predictions of each other lane of the model.
    pub other_lanes: Vec<u64>,
    /// Predictions of the model running now: with work waiting, every slot serving the model
    /// is busy (no slot idles while work waits), so this is the slots that serve it.
    pub running: u64,
    /// The model's latest run times (`predict_time`, seconds), newest first.
    pub recent_run_seconds: Vec<f64>,
}

impl Predictions {
    /// The queue figures of waiting prediction `p`.
    pub async fn queue_figures(&self, p: &Prediction) -> Result<QueueFigures, StoreError> {
        let coll = self.collection().clone_with_type::<Document>();
        let model = p.model.to_string();
        let ahead = doc! {
            "model": &model, "account_id": p.account_id.as_str(), "status": "starting",
            "$or": [
                { "created_at": { "$lt": p.created_at } },
                { "created_at": p.created_at, "_id": { "$lt": p.id.as_str() } },
            ],
        };
        let ahead_in_lane = coll.count_documents(ahead).await?;
        let lanes = vec![
            doc! { "$match": { "model": &model, "status": "starting", "account_id": { "$ne": p.account_id.as_str() } } },
            doc! { "$group": { "_id": "$account_id", "n": { "$sum": 1 } } },
        ];
        let other_lanes: Vec<u64> = coll
            .aggregate(lanes)
            .await?
            .try_collect::<Vec<Document>>()
            .await?
            .iter()
            .filter_map(|d| match d.get("n") {
                Some(Bson::Int32(n)) => u64::try_from(*n).ok(),
                Some(Bson::Int64(n)) => u64::try_from(*n).ok(),
                _ => None,
            })
            .collect();
        let running = coll.count_documents(doc! { "model": &model, "status": "processing" }).await?;
        let recent = coll
            .find(doc! { "model": &model, "status": "succeeded" })
            .sort(doc! { "completed_at": -1 })
            .limit(RECENT_RUNS)
            .projection(doc! { "metrics.predict_time": 1 })
            .await?
            .try_collect::<Vec<Document>>()
            .await?;
        let recent_run_seconds =
            recent.iter().filter_map(|d| d.get_document("metrics").ok()?.get_f64("predict_time").ok()).collect();
        Ok(QueueFigures { ahead_in_lane, other_lanes, running, recent_run_seconds })
    }
}
