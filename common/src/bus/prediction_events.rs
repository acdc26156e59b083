//! One prediction's status events read back from the events stream (kept 24 h): an ordered
//! consumer filtered to the prediction's subject, from the first event the stream holds,
//! following new ones as they are stored. The one reader of a prediction's events: the api's
//! SSE stream follows it live, and a webhook resend searches it for the event a delivery
//! carried ([`super::resend`]).

use async_nats::jetstream::consumer::{DeliverPolicy, pull::OrderedConfig};
use futures::{StreamExt, stream::BoxStream};

use super::{Bus, BusError};
use crate::{
    domain::PredictionId,
    messages::{PredictionChanged, StatusEvent},
};

/// One event as read.
#[derive(Debug, Clone)]
pub struct ReadEvent {
    /// The change it announces (`None` for a message that is not a prediction's change: a
    /// resend request, or one this version cannot decode).
    pub change: Option<PredictionChanged>,
    /// Whether it was the last event stored when it was read: nothing older is left to read.
    pub caught_up: bool,
}

impl Bus {
    /// Prediction `id`'s events in the order they were stored, from the first the stream
    /// holds, then each new one as it is stored (the stream does not end by itself).
    pub async fn prediction_events(
        &self,
        id: &PredictionId,
    ) -> Result<BoxStream<'static, Result<ReadEvent, BusError>>, BusError> {
        let stream = self.subjects.events_stream();
        let fail = move |e: async_nats::Error| BusError::Stream { stream: stream.clone(), source: e };
        let handle = self.js.get_stream_no_info(self.subjects.events_stream()).await.map_err(|e| fail(e.into()))?;
        let consumer = handle
            .create_consumer(OrderedConfig {
                filter_subject: self.subjects.events(id),
                deliver_policy: DeliverPolicy::All,
                ..Default::default()
            })
            .await
            .map_err(|e| fail(e.into()))?;
        let messages = consumer.messages().await.map_err(|e| fail(e.into()))?;
        Ok(messages
            .map(move |message| {
                let message = message.map_err(|e| fail(e.into()))?;
                let caught_up = message.info().map(|i| i.pending == 0).unwrap_or(true);
                let change = serde_json::from_slice::<StatusEvent>(&message.payload)
                    .ok()
                    .and_then(StatusEvent::prediction_change);
                Ok(ReadEvent { change, caught_up })
            })
            .boxed())
    }
}
