//! Webhook resends: finding the event a delivery carried, and asking the notifiers for one
//! more attempt of it.
//!
//! The event comes from the events stream (kept 24 h), read back through an ordered consumer
//! filtered to the prediction's subject, so a resend carries the very payload of the first
//! attempt. The request is published on the prediction's resend subject with a fresh
//! `Nats-Msg-Id`: two resends are two attempts, never de-duplicated into one.

use std::time::Duration;

use async_nats::jetstream::consumer::{DeliverPolicy, pull::OrderedConfig};
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
        let stream = self.subjects.events_stream();
        let fail = |e: async_nats::Error| BusError::Stream { stream: stream.clone(), source: e };
        let handle = self.js.get_stream_no_info(&stream).await.map_err(|e| fail(e.into()))?;
        let consumer = handle
            .create_consumer(OrderedConfig {
                filter_subject: self.subjects.events(id),
                deliver_policy: DeliverPolicy::All,
                ..Default::default()
            })
            .await
            .map_err(|e| fail(e.into()))?;
        let mut messages = consumer.messages().await.map_err(|e| fail(e.into()))?;
        let search = async {
            while let Some(message) = messages.next().await {
                let message = message.map_err(|e| fail(e.into()))?;
                let last = message.info().map(|i| i.pending == 0).unwrap_or(true);
                if let Some(change) = serde_json::from_slice::<StatusEvent>(&message.payload)
                    .ok()
                    .and_then(StatusEvent::prediction_change)
                    && change.event == event
                    && change.seq == seq
                {
                    return Ok(Some(change));
                }
                if last {
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
