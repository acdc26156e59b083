//! Step 3 of a job (see [`super`]): `processing → succeeded | failed` (or `canceled`, at a
//! client's deadline), and its `completed` event.
//!
//! The change is conditional on the change sequence this runner last wrote, so nothing is read
//! back and the write shares a command with other predictions' changes; the event carries this
//! runner's copy with the change applied. If the sequence moved (a cancel, say), the
//! conditional change on the status decides and returns the stored prediction. The files of
//! the output are stored first ([`super::output_files`]), and the output holds their URLs.
//!
//! A try that fails is made again by the caller with the same result and end time, never by
//! running the model again: a try whose write applied though its answer was lost is known by
//! that end time, and the files an earlier try stored are dropped as not in the output.

use anyhow::Context;
use bson::{Bson, DateTime, doc};
use common::{
    domain::{DeadlineEnd, Metrics, Prediction, PredictionError, PredictionStatus, Price, WebhookEvent, deadline},
    messages::Announcement,
    store::Predictions,
    usage,
};
use serde_json::Value;
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
        completed_at: DateTime,
    ) -> anyhow::Result<()> {
        // A prediction whose client's deadline had passed when it was taken never ran for
        // the client: it is not charged.
        let aborted = matches!(&result, Err(e) if e.code == DeadlineEnd::Aborted.code());
        let metrics = if aborted {
            Metrics::at_completion(prediction.created_at, None, completed_at, Price::FREE)
        } else {
            prediction.metrics_at(completed_at)
        };
        // A training's output becomes `{version, weights}`: its weights, a file whatever their
        // size, are not held to the output limit. Nor are an output's files: its JSON is.
        let result = match result {
            Ok(output) if prediction.is_training() => Box::pin(self.training_result(prediction, output)).await?,
            Ok(output) => self.store_output(prediction, output).await?.and_then(|value| within_limits(value, progress)),
            Err(e) => Err(e),
        };
        // The change, typed once: the document written and the copy published come from it.
        let mut done = prediction.clone();
        done.logs = progress.logs();
        done.completed_at = Some(completed_at);
        done.metrics = Some(metrics);
        done.model_metrics = progress.model_metrics();
        let mut changes = doc! {
            "logs": &done.logs,
            "completed_at": completed_at,
            "metrics": bson::to_bson(&metrics)?,
        };
        if let Some(recorded) = &done.model_metrics {
            changes.insert("model_metrics", bson::to_bson(recorded)?);
        }
        usage::mark_pending(&mut changes);
        match result {
            Ok(output) => {
                self.set_output(&mut done, &mut changes, Some(output)).await?;
                done.status = PredictionStatus::Succeeded;
            }
            Err(e) => {
                tracing::info!(code = %e.code, message = %e.message, "model failed or reached its deadline");
                self.set_output(&mut done, &mut changes, progress.output()).await?;
                changes.insert("error", doc! { "code": &e.code, "message": &e.message });
                // A client's deadline cancels it; any other error fails it.
                done.status = deadline::status_of_error(&e.code);
                done.error = Some(PredictionError { code: e.code, message: e.message });
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
            if let Some(stored) = predictions.transition(&prediction.id, status, changes).await? {
                return Ok(Some(stored));
            }
            // Not `processing` any more: canceled meanwhile, or ended by an earlier try of
            // this very result whose answer was lost or unconfirmed (it has this result's end
            // time). Read on the primary: a majority read may not see that try yet.
            let stored = predictions.get_settled(&prediction.id).await?;
            Ok(stored.filter(|p| p.status == status && p.completed_at == Some(completed_at)))
        }
        .instrument(tracing::info_span!("store_result"))
        .await
        .context("storing the result")?;
        self.metrics.state_written(status.as_str(), writing.elapsed().as_secs_f64());
        match stored {
            Some(p) => {
                tracing::info!(status = %p.status, "prediction completed");
                self.drop_files_not_in_output(&p).await;
                self.usage.record(&p);
                self.publish(&p, WebhookEvent::Completed, Announcement::First)
                    .instrument(tracing::info_span!("publish_completed"))
                    .await?;
            }
            None => tracing::info!("prediction was canceled before its result was stored; result dropped"),
        }
        Ok(())
    }

    /// Sets the final `output` on `done` and in `changes`: in the document when it is small,
    /// else in a payload file the document names (`spilled.output`, see
    /// `common::files::payloads`); `done` keeps it whole for the `completed` event.
    async fn set_output(
        &self,
        done: &mut Prediction,
        changes: &mut bson::Document,
        output: Option<Value>,
    ) -> anyhow::Result<()> {
        let spilled = match &output {
            Some(value) => self.payloads.spill_output(done, value).await.context("storing a large output")?,
            None => None,
        };
        match (&spilled, &output) {
            (Some(file), _) => {
                changes.insert("output", Bson::Null);
                changes.insert("spilled.output", file.as_str());
            }
            (None, Some(value)) => {
                changes.insert("output", bson::to_bson(value).context("the output as BSON")?);
            }
            (None, None) => {
                changes.insert("output", Bson::Null);
            }
        }
        done.spilled.output = spilled;
        done.output = output;
        Ok(())
    }

    /// Removes the files of `p` its final output does not name: what an earlier run of it
    /// stored before its runner died (a Cog server's upload, say). Only an output that names
    /// files is looked at (one read per such prediction, none for the rest); the files of a
    /// run that ended without naming any, and a failure here, are left to the retention
    /// sweep, which removes every file of a prediction with its data.
    async fn drop_files_not_in_output(&self, p: &Prediction) {
        if p.is_training() {
            return;
        }
        let named: Vec<_> = p
            .output
            .as_ref()
            .map(common::domain::output::strings)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|s| self.links.stored_file(s))
            .collect();
        if named.is_empty() {
            return;
        }
        match self.files.delete_outputs_of_except(&p.id, &named).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(files = n, "files of earlier runs not in the output removed"),
            Err(e) => tracing::warn!(error = %e, "files not in the output left to the retention sweep"),
        }
    }
}

/// An output as stored, or `OUTPUT_TOO_LARGE` when it passed the output limit (while it
/// streamed, or as returned): its text, or its compact JSON text with each file as its URL.
fn within_limits(output: Value, progress: &Progress) -> Result<Value, ModelError> {
    let limit = progress.limits().max_output_bytes;
    let size = match &output {
        Value::String(text) => text.len(),
        value => common::files::payloads::json_len(value),
    };
    if progress.output_overflowed() || size > limit {
        return Err(ModelError {
            code: "OUTPUT_TOO_LARGE".into(),
            message: format!("The output is larger than {limit} bytes (PREDICTION_MAX_OUTPUT_BYTES)."),
        });
    }
    Ok(output)
}
