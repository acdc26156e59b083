//! Webhook resends: finding the event a delivery carried, and asking the notifiers for one
//! more attempt of it.
//!
//! The event comes from the events stream (kept 24 h), read back as the prediction's events
//! ([`super::prediction_events`]), so a resend carries the very payload of the first attempt. The request is published on the prediction's resend subject with a fresh
//! `Nats-Msg-Id`: two resends are two attempts, never de-duplicated into one.

use std::time::Duration;

use futures::StreamExt;

use super::{Bus, BusError};
use crate::{
    domain::{PredictionId, WebhookEvent},
    messages::{PredictionChanged, StatusEvent},
};

/// The bound on reading one prediction's events back.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

impl Bus {
    /// The stored status event of prediction `id` with this `event` and `seq`, if the events
    /// stream still holds it.
    pub async fn find_event(
        &self,
        id: &PredictionId,
        event: WebhookEvent,
        seq: i64,
    ) -> Result<Option<PredictionChanged>, BusError> {
        let mut events = self.prediction_events(id).await?;
        let search = async {
            while let Some(read) = events.next().await {
                let read = read?;
                if let Some(change) = read.change.filter(|c| c.event == event && c.seq == seq) {
                    return Ok(Some(change));
                }
                if read.caught_up {
                    break;
                }
            }
            Ok(None)
        };
        match tokio::time::timeout(READ_TIMEOUT, search).await {
            Ok(found) => found,
            // Nothing stored for the prediction: the consumer simply waits for more.
            Err(_) => Ok(None),
        }
    }

    /// Asks the notifiers for one more attempt of `change`'s webhook, and waits for the
    /// stream to store the request.
    pub async fn publish_resend(&self, change: PredictionChanged) -> Result<(), BusError> {
        let subject = self.subjects.resends(&change.prediction_id);
        let msg_id = format!("resend.{:032x}", rand::random::<u128>());
        let payload = change.encode_within(StatusEvent::WebhookResendV1, self.payload_limit());
        self.publish_stored(subject, msg_id, bytes::Bytes::from(payload), async_nats::HeaderMap::new()).await
    }
}
