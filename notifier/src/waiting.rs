//! The events waiting for a retry, as this replica sees them: where they are kept (MongoDB,
//! per receiver: [`crate::store::webhook_retries`]) and when the next one this replica wrote
//! falls due. Delivery writes to it ([`crate::consumer`]); the workers of [`crate::backlog`]
//! take from it.

use std::{sync::Mutex, time::Duration};

use common::{domain::WebhookUrl, messages::DeliverableEvent, store::StoreError};
use tokio::{sync::Notify, time::Instant};
use tokio_util::sync::CancellationToken;

use crate::{
    store::webhook_retries::{WaitingRetry, WebhookRetries},
    targets::target_of,
};

/// The longest a worker sleeps when nothing is due.
pub const POLL: Duration = Duration::from_secs(1);
/// The events waiting for a retry, and when this replica next expects one to be due.
pub struct Backlog {
    pub(crate) store: WebhookRetries,
    soonest: Mutex<Option<Instant>>,
    wake: Notify,
}

impl Backlog {
    /// The backlog in `store`.
    pub fn new(store: WebhookRetries) -> Self {
        Self { store, soonest: Mutex::new(None), wake: Notify::new() }
    }

    /// Keeps the event `change` (its message as published: `message`) for an attempt at `url`
    /// in `delay`, after `attempts` attempts.
    pub async fn schedule(
        &self,
        change: &DeliverableEvent,
        message: &[u8],
        url: &WebhookUrl,
        attempts: u32,
        delay: Duration,
    ) -> Result<(), StoreError> {
        let due = bson::DateTime::from_millis(
            bson::DateTime::now().timestamp_millis().saturating_add(i64::try_from(delay.as_millis()).unwrap_or(0)),
        );
        let about = (change.prediction_id.clone(), change.account_id.clone(), change.event);
        let retry = WaitingRetry::new(change.message_id(), target_of(url), about, attempts, due, message);
        self.store.schedule(&retry).await?;
        let at = Instant::now() + delay;
        {
            let mut soonest = self.soonest.lock().unwrap_or_else(|p| p.into_inner());
            *soonest = Some(soonest.map_or(at, |s| s.min(at)));
        }
        self.wake.notify_one();
        Ok(())
    }

    /// How many events wait (an estimate from the collection's metadata).
    pub async fn waiting(&self) -> Result<u64, StoreError> {
        self.store.waiting().await
    }

    /// Sleeps until the soonest retry this replica wrote is due, [`POLL`] at most, or until a
    /// sooner one is written, or `shutdown`.
    pub(crate) async fn idle(&self, shutdown: &CancellationToken) {
        loop {
            let now = Instant::now();
            let until = {
                let mut soonest = self.soonest.lock().unwrap_or_else(|p| p.into_inner());
                match *soonest {
                    Some(at) if at <= now => {
                        *soonest = None;
                        return;
                    }
                    Some(at) => at.min(now + POLL),
                    None => now + POLL,
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep_until(until) => return,
                () = self.wake.notified() => {}
            }
        }
    }
}
