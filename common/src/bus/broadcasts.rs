//! Broadcasts on core NATS, not stored: whoever listens when one is sent hears it.
//!
//! - **Cancels**: the runner holding a prediction aborts it. Runners also check the stored
//!   status, so a missed broadcast only delays a cancel.
//! - **Secret rotations**: every notifier drops its cached copy of the account's signing
//!   secrets. Sent and flushed before the api answers the rotation.
//! - **Key deactivations**: every api replica drops its cached key look-ups. Sent and flushed
//!   before the api answers the deactivation.
//! - **Price changes**: the runners of the pool take its new price at once (they also read it
//!   every few minutes, so a missed broadcast only delays a price).

use bytes::Bytes;

use super::{Bus, BusError};
use crate::{
    domain::{AccountId, ApiKeyId, Pool, PredictionId, Price},
    messages::{CancelMessage, KeyMessage, PriceMessage, SecretMessage},
};

impl Bus {
    /// Broadcasts a cancel to every runner (not stored: runners also poll the status).
    pub async fn publish_cancel(&self, id: &PredictionId) -> Result<(), BusError> {
        let subject = self.subjects.cancel(id);
        let msg = CancelMessage::CancelPredictionV1 { prediction_id: id.clone() };
        self.client
            .publish(subject.clone(), encode(&msg))
            .await
            .map_err(|e| BusError::Publish { subject, source: e.into() })
    }

    /// Tells every notifier that `account`'s signing secret changed, and waits until the
    /// server has it (so it reaches the notifiers before anything caused by the answer).
    pub async fn publish_secret_rotated(&self, account: &AccountId) -> Result<(), BusError> {
        let subject = self.subjects.secret_rotations();
        let msg = SecretMessage::SecretRotatedV1 { account_id: account.clone() };
        let fail = |e: async_nats::Error| BusError::Publish { subject: subject.clone(), source: e };
        self.client.publish(subject.clone(), encode(&msg)).await.map_err(|e| fail(e.into()))?;
        self.client.flush().await.map_err(|e| fail(e.into()))
    }

    /// Tells every api replica that `key` no longer works, and waits until the server has it.
    pub async fn publish_key_deactivated(&self, account: &AccountId, key: &ApiKeyId) -> Result<(), BusError> {
        let subject = self.subjects.key_deactivations();
        let msg = KeyMessage::KeyDeactivatedV1 { account_id: account.clone(), key_id: key.clone() };
        let fail = |e: async_nats::Error| BusError::Publish { subject: subject.clone(), source: e };
        self.client.publish(subject.clone(), encode(&msg)).await.map_err(|e| fail(e.into()))?;
        self.client.flush().await.map_err(|e| fail(e.into()))
    }

    /// Tells every runner that `pool` now costs `price` a second, and waits until the server
    /// has it.
    pub async fn publish_price_set(&self, pool: &Pool, price: Price) -> Result<(), BusError> {
        let subject = self.subjects.prices_changed();
        let msg = PriceMessage::PriceSetV1 { pool: pool.clone(), price_nanos: price };
        let fail = |e: async_nats::Error| BusError::Publish { subject: subject.clone(), source: e };
        self.client.publish(subject.clone(), encode(&msg)).await.map_err(|e| fail(e.into()))?;
        self.client.flush().await.map_err(|e| fail(e.into()))
    }

    /// Subscribes to the price changes announced from now on.
    pub async fn subscribe_prices_changed(&self) -> Result<async_nats::Subscriber, BusError> {
        let subject = self.subjects.prices_changed();
        self.client.subscribe(subject.clone()).await.map_err(|e| BusError::Publish { subject, source: e.into() })
    }

    /// Subscribes to the key deactivations announced from now on.
    pub async fn subscribe_key_deactivations(&self) -> Result<async_nats::Subscriber, BusError> {
        let subject = self.subjects.key_deactivations();
        self.client.subscribe(subject.clone()).await.map_err(|e| BusError::Publish { subject, source: e.into() })
    }
}

fn encode<T: serde::Serialize>(msg: &T) -> Bytes {
    // The message types are plain data (strings, numbers, JSON values): serializing cannot fail.
    Bytes::from(serde_json::to_vec(msg).expect("wire messages always serialize"))
}
