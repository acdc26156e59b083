//! Step 0, for a model whose server is not up: the job waits for its boot. The prediction
//! stays `starting` meanwhile, and its logs show the boot so far (the server's start and its
//! setup's output), stored every [`BOOT_LOG_INTERVAL`] while they grow, so a client polling
//! a prediction whose model takes minutes to load sees why it waits. Once it runs, the same
//! text heads its logs ([`Progress::set_preamble`]).

use std::time::Duration;

use bson::doc;
use common::domain::PredictionId;
use futures::future::BoxFuture;

use super::Executor;
use crate::{
    models::{Model, ModelError},
    progress::Progress,
};

/// How often a waiting prediction's logs take the boot's new lines.
pub const BOOT_LOG_INTERVAL: Duration = Duration::from_secs(1);

impl Executor {
    /// Waits for `preparing` (the boot of `model`'s server), storing its log so far in the
    /// waiting prediction `id` whenever it grew. A store that fails meanwhile only delays
    /// what the client sees: the boot goes on.
    pub(super) async fn await_boot(
        &self,
        id: &PredictionId,
        model: &dyn Model,
        preparing: BoxFuture<'_, Result<(), ModelError>>,
        progress: &Progress,
    ) -> Result<(), ModelError> {
        tokio::pin!(preparing);
        let mut written = String::new();
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + BOOT_LOG_INTERVAL, BOOT_LOG_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                prepared = &mut preparing => return prepared,
                _ = ticks.tick() => {}
            }
            let Some(boot) = model.boot_log().filter(|boot| *boot != written) else { continue };
            progress.set_preamble(&boot);
            let stored = self.store.predictions().update_while_starting(id, doc! { "logs": progress.logs() }).await;
            match stored {
                // Stored, or no longer `starting` (canceled, taken by another runner): either
                // way, only newer lines are worth a write.
                Ok(_) => written = boot,
                Err(e) => tracing::warn!(error = %e, "boot log not stored; retried at the next tick"),
            }
        }
    }
}
