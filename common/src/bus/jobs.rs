//! The jobs stream (`<P>_JOBS`, work-queue retention): one message per prediction to run, on
//! a subject of its lane (model, route, account, priority), published with `Nats-Msg-Id` =
//! the prediction id, so a republish within the duplicate window is dropped by the server.
//! Each message is removed once a runner acks it.

use bytes::Bytes;

use super::{Bus, BusError};
use crate::{domain::Prediction, messages::JobMessage};

/// A prediction's job as sent to the jobs stream: its subject, its `Nats-Msg-Id` (the
/// prediction id, so a copy within the duplicate window is dropped) and its encoded
/// [`JobMessage`]. Cheap to clone (the payload is shared), so a job kept for sending again
/// costs its message, not its prediction.
#[derive(Debug, Clone)]
pub struct EncodedJob {
    subject: String,
    prediction_id: String,
    payload: Bytes,
}

impl EncodedJob {
    /// The id of the job's prediction.
    pub fn prediction_id(&self) -> &str {
        &self.prediction_id
    }
}

impl Bus {
    /// Publishes the job of `prediction` and waits for the stream to store it.
    pub async fn publish_job(&self, prediction: &Prediction) -> Result<(), BusError> {
        self.send_job(&self.job_of(prediction)).await?.await
    }

    /// Publishes a new job for `prediction`, whose first job is gone (see the runner's
    /// reconciler): under a message id of its own, since the stream may still remember the
    /// first one's for its de-duplication window, and would take this one for a copy of it.
    pub async fn publish_requeued_job(&self, prediction: &Prediction) -> Result<(), BusError> {
        let job = self.job_of(prediction);
        let msg_id = format!("{}.requeued", job.prediction_id);
        self.send_stored(job.subject, msg_id, job.payload, async_nats::HeaderMap::new()).await?.await
    }

    /// The job of `prediction`, encoded once for every send of it.
    pub fn job_of(&self, prediction: &Prediction) -> EncodedJob {
        EncodedJob {
            subject: self.job_subject(prediction),
            prediction_id: prediction.id.to_string(),
            payload: Bytes::from(JobMessage::encode_for(prediction)),
        }
    }

    /// Sends `job` without waiting for the stream to confirm it; the returned future resolves
    /// once the jobs stream has stored it (for callers that answer first and confirm after).
    pub async fn send_job(
        &self,
        job: &EncodedJob,
    ) -> Result<impl Future<Output = Result<(), BusError>> + Send + 'static, BusError> {
        let stored = self
            .send_stored(
                job.subject.clone(),
                job.prediction_id.clone(),
                job.payload.clone(),
                async_nats::HeaderMap::new(),
            )
            .await?;
        let (bus, job) = (self.clone(), job.clone());
        Ok(async move {
            match stored.await {
                // Boxed: this future waits in a task of its own for every create, and this
                // step is rare.
                Err(e) => Box::pin(bus.send_again_if_remade(job, e)).await,
                Ok(()) => Ok(()),
            }
        })
    }

    /// After `job`'s publish failed with `e`: if the jobs stream was lost and is made again,
    /// the job sent once more (and its storing awaited); else `e`.
    async fn send_again_if_remade(self, job: EncodedJob, e: BusError) -> Result<(), BusError> {
        if !self.remade_after(&e).await {
            return Err(e);
        }
        self.send_stored(job.subject, job.prediction_id, job.payload, async_nats::HeaderMap::new()).await?.await
    }

    /// Whether the job of `prediction` is still in the jobs stream (not yet acked).
    pub async fn job_exists(&self, prediction: &Prediction) -> Result<bool, BusError> {
        let stream = self.subjects.jobs_stream();
        let fail = |e: async_nats::Error| BusError::Stream { stream: stream.clone(), source: e };
        let handle = self.js.get_stream_no_info(&stream).await.map_err(|e| fail(e.into()))?;
        match handle.get_last_raw_message_by_subject(&self.job_subject(prediction)).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == async_nats::jetstream::stream::LastRawMessageErrorKind::NoMessageFound => Ok(false),
            Err(e) => Err(fail(e.into())),
        }
    }

    /// The subject of `prediction`'s job: its lane (model, route, account, priority) and id.
    fn job_subject(&self, prediction: &Prediction) -> String {
        self.subjects.job(
            &prediction.model,
            &prediction.route(),
            &prediction.account_id,
            prediction.priority,
            &prediction.id,
        )
    }
}
