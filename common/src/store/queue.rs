//! The queue as one waiting prediction sees it, read from the `predictions` collection: the
//! `starting` predictions of its model ahead of it in its own lane (same account, created
//! before it), how many of every other account's are waiting, how many of the model's are
//! running, and the model's latest run times: one query of the prediction's own
//! ([`Predictions::ahead_in_lane`]) and three of its model's ([`Predictions::model_queue`]),
//! each on an index led by the model or the status.

use bson::{Bson, Document, doc};
use futures::TryStreamExt;

use super::{Predictions, StoreError};
use crate::domain::{ModelRef, Prediction};

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

/// What the queue of one model looks like, the same for each of its waiting predictions:
/// cached briefly by the api, so a read of a waiting prediction costs one query of its own.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelQueue {
    /// Waiting predictions of each account (each lane of the model).
    pub waiting_by_account: Vec<(String, u64)>,
    /// Predictions of the model running now.
    pub running: u64,
    /// The model's latest run times (`predict_time`, seconds), newest first.
    pub recent_run_seconds: Vec<f64>,
}

impl ModelQueue {
    /// The figures of a waiting prediction of account `account` with `ahead_in_lane` of its
    /// own lane ahead of it.
    pub fn figures_for(&self, account: &str, ahead_in_lane: u64) -> QueueFigures {
        QueueFigures {
            ahead_in_lane,
            other_lanes: self.waiting_by_account.iter().filter(|(a, _)| a != account).map(|(_, n)| *n).collect(),
            running: self.running,
            recent_run_seconds: self.recent_run_seconds.clone(),
        }
    }
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
        coll.count_documents(ahead).await
    }

    /// The queue of `model`: each account's waiting predictions, the running ones, the
    /// latest run times (three queries).
    pub async fn model_queue(&self, model: &ModelRef) -> Result<ModelQueue, StoreError> {
        let coll = self.collection().clone_with_type::<Document>();
        let model = model.to_string();
        let lanes = vec![
            doc! { "$match": { "model": &model, "status": "starting" } },
            doc! { "$group": { "_id": "$account_id", "n": { "$sum": 1 } } },
        ];
        let waiting_by_account: Vec<(String, u64)> = coll
            .aggregate(lanes)
            .await?
            .try_collect::<Vec<Document>>()
            .await?
            .iter()
            .filter_map(|d| {
                let account = d.get_str("_id").ok()?.to_owned();
                let n = match d.get("n") {
                    Some(Bson::Int32(n)) => u64::try_from(*n).ok(),
                    Some(Bson::Int64(n)) => u64::try_from(*n).ok(),
                    _ => None,
                }?;
                Some((account, n))
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
        Ok(ModelQueue { waiting_by_account, running, recent_run_seconds })
    }

    /// The queue figures of waiting prediction `p`, all read now (four queries).
    pub async fn queue_figures(&self, p: &Prediction) -> Result<QueueFigures, StoreError> {
        let model = self.model_queue(&p.model).await?;
        Ok(model.figures_for(p.account_id.as_str(), self.ahead_in_lane(p).await?))
    }
}
