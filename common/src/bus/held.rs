//! One JetStream message while a service acts on it: the runner's jobs and the notifier's
//! status events are both taken through [`HeldMessage`], so the rules below cannot be
//! forgotten by either:
//!
//! - **decode or dead-letter**: a payload that does not decode is recorded in `dead_letters`
//!   and terminated at once, never redelivered forever;
//! - **held means heartbeat**: while the message is held, an in-progress ack goes out about
//!   every interval of the [`Heartbeat`] it is held through (a third of the consumer's ack
//!   wait), so JetStream does not hand it to another replica in the middle of the work, however
//!   long the work waits or runs;
//! - **acked only on purpose**: the message is settled by an explicit [`HeldMessage::settle`],
//!   which the caller makes after the effect is stored; one dropped unsettled (a panic, a task
//!   dropped at shutdown) is handed back at once (nak) instead of after its ack wait.

use async_nats::jetstream::{AckKind, Message};
use serde::de::DeserializeOwned;

use super::heartbeat::{Beating, Heartbeat};
use crate::store::dead_letters::DeadLetters;

/// A decoded message held by its handler.
pub struct HeldMessage<T> {
    message: Option<Message>,
    heartbeat: Option<Beating>,
    payload: T,
}

impl<T: DeserializeOwned> HeldMessage<T> {
    /// Decodes `message` and holds it through `heartbeat` (its in-progress acks); an
    /// undecodable one is recorded as `service`'s dead letter and terminated (`None`).
    pub async fn take(
        message: Message,
        service: &str,
        dead_letters: &DeadLetters,
        heartbeat: &Heartbeat,
    ) -> Option<Self> {
        match serde_json::from_slice::<T>(&message.payload) {
            Ok(payload) => {
                let beating = heartbeat.hold(&message);
                Some(Self { message: Some(message), heartbeat: Some(beating), payload })
            }
            Err(e) => {
                tracing::error!(subject = %message.subject, error = %e, "undecodable message terminated and recorded");
                // Boxed: a rare path whose future would otherwise grow every handler's.
                let reason = e.to_string();
                let record = Box::pin(dead_letters.record(service, &message.subject, &message.payload, &reason));
                if let Err(e) = record.await {
                    tracing::warn!(error = %e, "dead letter not recorded");
                }
                acknowledge(&message, AckKind::Term).await;
                None
            }
        }
    }
}

impl<T> HeldMessage<T> {
    /// The decoded payload.
    pub fn payload(&self) -> &T {
        &self.payload
    }

    /// The decoded payload, for a handler that takes parts of it (instead of copying them).
    pub fn payload_mut(&mut self) -> &mut T {
        &mut self.payload
    }

    /// The trace context the message's headers carry (see [`crate::trace_context`]).
    pub fn trace_context(&self) -> opentelemetry::Context {
        crate::trace_context::extract_nats(self.message.as_ref().and_then(|m| m.headers.as_ref()))
    }

    /// The message's payload as published.
    pub fn raw(&self) -> &[u8] {
        self.message.as_ref().map_or(&[], |m| &m.payload)
    }

    /// The value of the message's header `name`, if it has one.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.message.as_ref()?.headers.as_ref()?.get(name).map(|v| v.as_str())
    }

    /// How many times JetStream has delivered the message (1 the first time) and its
    /// sequence in the stream.
    pub fn delivery(&self) -> (i64, u64) {
        self.message.as_ref().and_then(|m| m.info().ok()).map_or((1, 0), |i| (i.delivered, i.stream_sequence))
    }

    /// Settles the message as `kind` (ack, nak with a delay, term), ending its heartbeat.
    pub async fn settle(mut self, kind: AckKind) {
        drop(self.heartbeat.take());
        if let Some(message) = self.message.take() {
            acknowledge(&message, kind).await;
        }
    }
}

impl<T> Drop for HeldMessage<T> {
    fn drop(&mut self) {
        drop(self.heartbeat.take());
        if let Some(message) = self.message.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            // Not settled: hand it back now. Best effort (a drop cannot wait); if this process
            // is going away, the ack wait redelivers it anyway.
            runtime.spawn(async move { acknowledge(&message, AckKind::Nak(None)).await });
        }
    }
}

/// Acknowledges `message` as `kind`, logging (not failing) when the server cannot be told: the
/// message is then redelivered, which every handler tolerates.
pub async fn acknowledge(message: &Message, kind: AckKind) {
    if let Err(e) = message.ack_with(kind).await {
        tracing::warn!(error = %e, "acknowledgement not sent; the message may be redelivered");
    }
}
