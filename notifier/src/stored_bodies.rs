//! Webhook bodies of events by reference: an event of a prediction with an input or output
//! kept in the file store, or one that would not fit a NATS message (`max_payload`, 1 MiB by
//! default), names the prediction instead of carrying it (`prediction_changed_ref.v1`), and
//! its body is the stored prediction rendered as `GET`
//! shows it on the surface that created it. For a `completed` event that is exactly its final
//! state; an earlier event may show a later state than its own (its `webhook-sequence` still
//! names its change), which receivers that drop stale events take as they would the newer one.

use common::{domain::PredictionId, files::payloads::Payloads, links::Links, store::Predictions};

/// Reads and renders stored predictions.
pub struct StoredBodies {
    predictions: Predictions,
    payloads: Payloads,
    links: Links,
}

impl StoredBodies {
    /// Bodies from `predictions` (with the values they keep in the file store read back from
    /// `payloads`), with URLs from `links`.
    pub fn new(predictions: Predictions, payloads: Payloads, links: Links) -> Self {
        Self { predictions, payloads, links }
    }

    /// The body of prediction `id` as stored now, or `None` when there is no such prediction.
    pub async fn body(&self, id: &PredictionId) -> anyhow::Result<Option<Vec<u8>>> {
        let Some(prediction) = self.predictions.get(id).await? else { return Ok(None) };
        let prediction = self.payloads.whole(prediction).await?;
        let view = prediction.view(&self.links, prediction.surface);
        Ok(Some(serde_json::to_vec(&view).expect("a prediction's view always serializes")))
    }
}
