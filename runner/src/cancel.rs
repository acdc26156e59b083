//! The cancel broadcast: the api publishes `cancel.<id>` (core NATS) after it marks a
//! `processing` prediction canceled; every runner hears it and the one running that
//! prediction aborts the model call. A runner that misses the broadcast (e.g. reconnecting)
//! notices the status at its next check (see [`crate::execute`]).

use std::sync::Arc;

use anyhow::Context;
use common::{bus::Bus, messages::CancelMessage};
use futures::StreamExt;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::execute::Executor;

/// Subscribes to cancels and hands them to `executor` until `shutdown` fires, in a task of
/// `tracker`.
pub async fn listen(
    bus: &Bus,
    executor: Arc<Executor>,
    tracker: &TaskTracker,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let subject = bus.subjects().all_cancels();
    let mut subscription =
        bus.client().subscribe(subject.clone()).await.with_context(|| format!("subscribing to {subject}"))?;
    tracker.spawn(async move {
        loop {
            let message = tokio::select! {
                () = shutdown.cancelled() => return,
                m = subscription.next() => match m {
                    Some(m) => m,
                    None => return,
                },
            };
            match serde_json::from_slice::<CancelMessage>(&message.payload) {
                Ok(CancelMessage::CancelPredictionV1 { prediction_id }) => {
                    if executor.cancel(&prediction_id) {
                        tracing::info!(prediction_id = %prediction_id, "cancel received for a prediction running here");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "undecodable cancel message ignored"),
            }
        }
    });
    Ok(())
}
