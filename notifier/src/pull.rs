//! The pull loop of the notifier's one consumer: pull only as many messages as there are free
//! permits, so no message waits in a local buffer while its `ack_wait` runs out, and hand each
//! message with its permits to a task in the caller's tracker. A message needs one permit of
//! every semaphore given. The loop stops pulling when `shutdown` fires; the caller then waits
//! on its tracker. (It holds its permits through a long poll, which is right for one consumer;
//! the runner, with a consumer per model, uses its own scheduler so that no idle consumer
//! holds a slot.)

use std::{future::Future, sync::Arc, time::Duration};

use async_nats::jetstream::{Message, consumer::PullConsumer};
use futures::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

/// The most messages one pull asks for.
const MAX_BATCH: usize = 64;
/// How long one pull waits for messages before asking again.
const PULL_EXPIRY: Duration = Duration::from_secs(2);

/// One permit of each semaphore: what one message needs to be handled.
pub type Permits = Vec<OwnedSemaphorePermit>;

async fn acquire_all(semaphores: &[Arc<Semaphore>]) -> Option<Permits> {
    let mut permits = Vec::with_capacity(semaphores.len());
    for s in semaphores {
        permits.push(s.clone().acquire_owned().await.ok()?);
    }
    Some(permits)
}

fn try_acquire_all(semaphores: &[Arc<Semaphore>]) -> Option<Permits> {
    semaphores.iter().map(|s| s.clone().try_acquire_owned().ok()).collect()
}

/// Pulls messages from `consumer` and runs `handle` on each, holding one permit of every
/// semaphore in `limits` per message.
pub async fn pull_with_permits<F, Fut>(
    consumer: PullConsumer,
    limits: Vec<Arc<Semaphore>>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    handle: F,
) where
    F: Fn(Message, Permits) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    while !shutdown.is_cancelled() {
        let first = tokio::select! {
            () = shutdown.cancelled() => return,
            permits = acquire_all(&limits) => match permits {
                Some(p) => p,
                None => return,
            },
        };
        let mut held = vec![first];
        while held.len() < MAX_BATCH {
            match try_acquire_all(&limits) {
                Some(p) => held.push(p),
                None => break,
            }
        }
        let mut batch = match consumer.batch().max_messages(held.len()).expires(PULL_EXPIRY).messages().await {
            Ok(batch) => batch,
            Err(e) => {
                tracing::warn!(error = %e, "pull failed; retrying in 1 s");
                drop(held);
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        while let Some(next) = batch.next().await {
            match next {
                Ok(message) => match held.pop() {
                    Some(permit) => {
                        tracker.spawn(handle(message, permit));
                    }
                    None => break,
                },
                Err(e) => {
                    tracing::warn!(error = %e, "pull interrupted");
                    break;
                }
            }
        }
    }
}
