//! Step 3 of a job (see [`super`]): `processing → succeeded | failed`, and its `completed`
//! event.
//!
//! The change is conditional on the change sequence this runner last wrote, so nothing is read
//! back and the write shares a command with other predictions' changes; the event carries this
//! runner's copy with the change applied. If the sequence moved (a cancel, say), the
//! conditional change on the status decides and returns the stored prediction. A file output
//! is stored first, and the prediction's output is its URL.

use anyhow::Context;
use bson::{Bson, DateTime, doc};
use common::{
    domain::{ApiSurface, Metrics, Prediction, PredictionError, PredictionStatus, WebhookEvent},
    files::NewFile,
    messages::Announcement,
    store::Predictions,
    usage,
};
use futures::StreamExt;
use tracing::Instrument;

use super::Executor;
use crate::models::{ModelError, ModelOutput, Progress};

impl Executor {
    /// Step 3: the terminal change and its `completed` event.
    pub(super) async fn finish(
        &self,
        prediction: &Prediction,
        seq: i64,
        result: Result<ModelOutput, ModelError>,
        progress: &Progress,
    ) -> anyhow::Result<()> {
        let completed_at = DateTime::now();
        let metrics = Metrics::at_completion(prediction.created_at, prediction.started_at, completed_at);
        // A training's output becomes `{version, weights}`: its weights, a file whatever their
        // size, are not held to the output limit.
        let result = match result {
            Ok(output) if prediction.is_training() => Box::pin(self.training_result(prediction, output)).await?,
            other => other.and_then(|output| within_limits(output, progress)),
        };
        // The change, typed once: the document written and the copy published come from it.
        let mut done = prediction.clone();
        done.logs = progress.logs();
        done.completed_at = Some(completed_at);
        done.metrics = Some(metrics);
        let mut changes = doc! {
            "logs": &done.logs,
            "completed_at": completed_at,
            "metrics": bson::to_bson(&metrics)?,
        };
        usage::mark_pending(&mut changes);
        match result {
            Ok(output) => {
                let output = self.store_output(prediction, output).await?;
                changes.insert("output", &output);
                done.output = Some(output);
                done.status = PredictionStatus::Succeeded;
            }
            Err(e) => {
                tracing::info!(code = %e.code, message = %e.message, "model failed");
                done.output = progress.output();
                changes.insert("output", done.output.clone().map_or(Bson::Null, Bson::String));
                changes.insert("error", doc! { "code": &e.code, "message": &e.message });
                done.error = Some(PredictionError { code: e.code, message: e.message });
                done.status = PredictionStatus::Failed;
            }
        };
        let status = done.status;
        let writing = std::time::Instant::now();
        let predictions = self.store.predictions();
        let stored = async {
            // Unchanged since this runner's last write (the usual case): written without
            // reading it back, beside other predictions' results. Otherwise (canceled
            // meanwhile, or moved by someone else) the conditional change that returns the
            // stored prediction decides.
            let at_seq =
                Predictions::change_at_seq(&prediction.id, PredictionStatus::Processing, seq, status, changes.clone());
            if let Some(change) = at_seq
                && self.changes.apply(change).await?
            {
                done.seq = seq + 1;
                return anyhow::Ok(Some(done));
            }
            Ok(predictions.transition(&prediction.id, status, changes).await?)
        }
        .instrument(tracing::info_span!("store_result"))
        .await
        .context("storing the result")?;
        self.metrics.state_written(status.as_str(), writing.elapsed().as_secs_f64());
        match stored {
            Some(p) => {
                tracing::info!(status = %p.status, "prediction completed");
                self.usage.record(&p);
                self.publish(&p, WebhookEvent::Completed, Announcement::First)
                    .instrument(tracing::info_span!("publish_completed"))
                    .await?;
            }
            None => tracing::info!("prediction was canceled before its result was stored; result dropped"),
        }
        Ok(())
    }

    /// The stored form of an output (the contract's `output` string): text as it is, other
    /// JSON as compact text, a file stored in GridFS as its absolute URL.
    async fn store_output(&self, p: &Prediction, output: ModelOutput) -> anyhow::Result<String> {
        Ok(match output {
            ModelOutput::Text(text) => text,
            ModelOutput::Json(value) => value.to_string(),
            ModelOutput::File { content_type, extension, bytes } => {
                let new = NewFile {
                    account_id: p.account_id.clone(),
                    name: format!("{}.{extension}", p.id),
                    content_type,
                    metadata: String::new(),
                    expires_at: None,
                    prediction_id: Some(p.id.clone()),
                };
                let body = futures::stream::once(async move { Ok(bytes::Bytes::from(bytes)) }).boxed();
                let record = self.files.create(new, body, u64::MAX).await.context("storing the output file")?;
                self.links.file(&record.id, ApiSurface::Canonical)
            }
        })
    }
}

/// A model's output, or `OUTPUT_TOO_LARGE` when its text passed the output limit (while it
/// streamed, or as returned); a file output is a file, whatever its size.
fn within_limits(output: ModelOutput, progress: &Progress) -> Result<ModelOutput, ModelError> {
    let limit = progress.limits().max_output_bytes;
    let size = match &output {
        ModelOutput::Text(text) => text.len(),
        ModelOutput::Json(value) => serde_json::to_string(value).map_or(usize::MAX, |text| text.len()),
        ModelOutput::File { .. } => 0,
    };
    if progress.output_overflowed() || size > limit {
        return Err(ModelError {
            code: "OUTPUT_TOO_LARGE".into(),
            message: format!("The output is larger than {limit} bytes (PREDICTION_MAX_OUTPUT_BYTES)."),
        });
    }
    Ok(output)
}
