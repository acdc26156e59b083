//! Step 1 of a job (see [`super`]): `starting → processing`, and the prediction to run.
//!
//! When the job carries the prediction as created, the change is conditional on its `seq` and
//! reads nothing back: it goes to the runner's [`crate::group_update::GroupUpdate`] beside other
//! predictions' changes, and the runner applies it to the job's copy. Otherwise, or if that
//! copy is no longer current (canceled, or a redelivery), the change returns the stored
//! prediction, and if that fails too the prediction is read to decide what the job is. A job
//! found `processing` under it already is settled with its holder ([`crate::execute::holder`]).

use anyhow::Context;
use bson::doc;
use common::{
    domain::{Prediction, PredictionId, PredictionStatus, WebhookEvent},
    messages::Announcement,
    store::Predictions,
};
use futures::FutureExt;
use tracing::Instrument;

use super::{Executor, ModelCall};

/// What step 1 found to do.
pub(super) enum Begun {
    /// Run this prediction; `true` when this call started it (so its `start` event is due).
    Run(Prediction, bool),
    /// Nothing to run.
    Nothing,
    /// It is `processing` under this job already: see [`crate::execute::holder`].
    Held(Prediction),
}

impl Executor {
    /// Step 1 with the model already running beside it, when the job carried its input
    /// (`early_call`): as [`Self::begin`], and the model call (still running, or its result).
    /// When there is nothing to run the call is dropped, which aborts it.
    pub(super) async fn begin_beside<'a>(
        &self,
        id: &PredictionId,
        stream_seq: u64,
        created: Option<Box<Prediction>>,
        early_call: Option<ModelCall<'a>>,
    ) -> anyhow::Result<(Begun, Option<ModelCall<'a>>)> {
        let Some(mut call) = early_call else {
            return Ok((self.begin(id, stream_seq, created).await?, None));
        };
        let begin = self.begin(id, stream_seq, created);
        tokio::pin!(begin);
        let (begun, call) = tokio::select! {
            begun = &mut begin => (begun?, call),
            result = &mut call => (begin.await?, futures::future::ready(result).boxed()),
        };
        Ok((begun, Some(call)))
    }

    /// Step 1: what there is to do for prediction `id` on this delivery of job `stream_seq`.
    async fn begin(
        &self,
        id: &PredictionId,
        stream_seq: u64,
        created: Option<Box<Prediction>>,
    ) -> anyhow::Result<Begun> {
        let predictions = self.store.predictions();
        let job_seq = i64::try_from(stream_seq).unwrap_or(i64::MAX);
        let writing = std::time::Instant::now();
        let started_at = self.store.clock().now();
        let started_on = self.prices.started_on();
        let changes = doc! {
            "started_at": started_at,
            "job_seq": job_seq,
            "held_by": &self.runner_id,
            "started_on": { "pool": started_on.pool.as_str(), "price_nanos": started_on.price.0 },
        };
        // The job carries the prediction as created: if it is still so, it is moved without
        // reading it back, beside other predictions' changes.
        if let Some(mut p) = created.filter(|p| &p.id == id && p.status == PredictionStatus::Starting) {
            let at_seq = Predictions::change_at_seq(id, p.status, p.seq, PredictionStatus::Processing, changes.clone());
            if let Some(change) = at_seq
                && self
                    .changes
                    .apply(change)
                    .instrument(tracing::info_span!("mark_processing"))
                    .await
                    .context("marking the prediction processing")?
            {
                self.metrics.state_written("processing", writing.elapsed().as_secs_f64());
                (p.status, p.started_at, p.job_seq, p.seq) =
                    (PredictionStatus::Processing, Some(started_at), Some(job_seq), p.seq + 1);
                (p.started_on, p.held_by) = (Some(started_on), Some(self.runner_id.clone()));
                self.mark_started(&p);
                return Ok(Begun::Run(*p, true));
            }
        }
        let started = predictions
            .transition(id, PredictionStatus::Processing, changes)
            .instrument(tracing::info_span!("mark_processing"))
            .await
            .context("marking the prediction processing")?;
        self.metrics.state_written("processing", writing.elapsed().as_secs_f64());
        if let Some(p) = started {
            self.mark_started(&p);
            return Ok(Begun::Run(p, true));
        }
        // Read on the primary: an earlier try of this start whose answer was lost, or whose
        // majority acknowledgment timed out, applied there, and a majority read may not see it.
        match predictions.get_settled(id).await.context("reading the prediction")? {
            None => {
                tracing::warn!("job for a prediction that does not exist; dropped");
                Ok(Begun::Nothing)
            }
            Some(p) if p.status.is_terminal() => {
                self.publish(&p, WebhookEvent::Completed, Announcement::Again).await?;
                Ok(Begun::Nothing)
            }
            Some(p) if p.status == PredictionStatus::Processing && p.job_seq.is_none_or(|s| s == job_seq) => {
                Ok(Begun::Held(p))
            }
            Some(p) if p.status == PredictionStatus::Processing => {
                tracing::warn!(held_by_job = ?p.job_seq, "duplicate job for a prediction another runner holds; dropped");
                Ok(Begun::Nothing)
            }
            Some(p) => anyhow::bail!("prediction is {} but could not be started", p.status),
        }
    }
}
