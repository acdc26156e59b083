//! Counters on the rate-limit stream (`<P>_RATELIMIT`, a counter stream, memory storage, kept
//! 3 min): one counter per API key and minute, incremented atomically with `Nats-Incr` by every
//! api replica (needs nats-server 2.12 or later). A NATS restart loses the stream: the next
//! increment makes it again, and a read of a missing stream counts 0.

use async_nats::jetstream::message::PublishMessage;

use super::{Bus, BusError, publish_failed};

impl Bus {
    /// Adds `by` to the counter `subject` as the increment `id`, and returns the new total;
    /// `None` when an increment of that id was added already (within the stream's duplicate
    /// window): an increment whose answer was lost is sent again under its id, and JetStream
    /// drops the repeat rather than counting it twice.
    pub async fn increment_counter(&self, subject: String, id: &str, by: i64) -> Result<Option<i64>, BusError> {
        match self.try_increment_counter(&subject, id, by).await {
            Err(BusError::StreamMissing { .. }) => {
                self.recreate_streams().await?;
                self.try_increment_counter(&subject, id, by).await
            }
            result => result,
        }
    }

    async fn try_increment_counter(&self, subject: &str, id: &str, by: i64) -> Result<Option<i64>, BusError> {
        let fail = |e: async_nats::Error| BusError::Publish { subject: subject.to_owned(), source: e };
        let publish = PublishMessage::build().header("Nats-Incr", by.to_string()).message_id(id);
        let ack = self.js.send_publish(subject.to_owned(), publish).await.map_err(|e| fail(e.into()))?;
        let ack = ack.await.map_err(|e| publish_failed(subject, e))?;
        if ack.duplicate {
            return Ok(None);
        }
        ack.value
            .as_deref()
            .and_then(|v| v.parse().ok())
            .map(Some)
            .ok_or_else(|| fail("the stream returned no counter value".into()))
    }

    /// The current total of the counter `subject` in `stream` (0 if it was never incremented).
    pub async fn read_counter(&self, stream: &str, subject: &str) -> Result<i64, BusError> {
        let fail = |e: async_nats::Error| BusError::Stream { stream: stream.to_owned(), source: e };
        let handle = self.js.get_stream_no_info(stream).await.map_err(|e| fail(e.into()))?;
        match handle.get_last_raw_message_by_subject(subject).await {
            Ok(message) => {
                #[derive(serde::Deserialize)]
                struct Counter {
                    val: String,
                }
                let counter: Counter = serde_json::from_slice(&message.payload).map_err(|e| fail(e.into()))?;
                counter.val.parse().map_err(|e: std::num::ParseIntError| fail(e.into()))
            }
            Err(e) if e.kind() == async_nats::jetstream::stream::LastRawMessageErrorKind::NoMessageFound => Ok(0),
            // A stream that is gone holds no count; it is created again for the next increment.
            Err(_) if self.stream_missing(stream).await => self.recreate_streams().await.map(|()| 0),
            Err(e) => Err(fail(e.into())),
        }
    }
}
