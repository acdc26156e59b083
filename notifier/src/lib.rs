//! The notifier: turns status events into signed webhook deliveries.
//!
//! - [`consumer`]: the durable consumer on the events stream, shared by every replica.
//! - [`pull`]: its pull loop, as many messages as there are free permits.
//! - [`deliver`]: one signed HTTP POST, bounded in time, no redirects.
//! - [`retry`]: the retry schedule with jitter.
//! - [`secrets`]: the accounts' signing secrets, opened and cached briefly.
//! - [`ssrf`]: which addresses a webhook may not reach.
//! - [`sequences`]: one prediction's events in order, `output`/`logs` throttled, latest wins.
//! - [`targets`]: a concurrency limit per receiver, so one cannot hold up the others.
//! - [`recorder`]: attempt records stored before acknowledging, several per write.
//! - [`waiting`]: the events waiting for a retry, kept in MongoDB per receiver;
//!   [`backlog`]: the workers that attempt them when due (started beside the consumer).
//! - [`metrics`]: what `/metrics` shows (deliveries by outcome, latency, retry backlog).
//! - [`notices`]: the accounts' budget notices (`account.budget`), delivered beside the events.
//!
//! Also here:
//! - [`stored_bodies`]: webhook bodies of events by reference.
//! - [`store`]: the collections only the notifier uses (events waiting for a retry).
#![forbid(unsafe_code)]

pub mod backlog;
pub mod config;
pub mod consumer;
pub mod deliver;
pub mod metrics;
pub mod notices;
pub mod pull;
pub mod recorder;
pub mod retry;
pub mod secrets;
pub mod sequences;
pub mod ssrf;
pub mod store;
pub mod stored_bodies;
pub mod targets;
pub mod waiting;

use std::sync::Arc;

use anyhow::Context;
use common::{bus::heartbeat::Heartbeat, files::payloads::Payloads, links::Links};
use tokio_util::sync::CancellationToken;

use crate::store::NotifierCollections;
use crate::{
    config::NotifierConfig, consumer::Notifier, deliver::Deliverer, recorder::AttemptRecorder, secrets::SecretCache,
    sequences::Sequences, stored_bodies::StoredBodies, targets::Targets, waiting::Backlog,
};

/// Runs until `shutdown` fires.
pub async fn run(config: NotifierConfig, shutdown: CancellationToken) -> anyhow::Result<()> {
    let common = &config.common;
    let (store, bus) = common::connect::connect(common, "notifier").await?;
    // Webhook bodies read by reference show predictions whole, values kept in the file store
    // included (`common::files::payloads`).
    let files = common::files::Files::open(&store, &common.files).await.context("opening the file store")?;
    let metrics = metrics::NotifierMetrics::new();
    if let Some(bind) = config.metrics_bind {
        let (counts, shown) = (store.command_counts().clone(), metrics.clone());
        let render = move || format!("{}{}", shown.render(), counts.openmetrics());
        let readiness = common::connect::readiness(common, "notifier", &bus).await?;
        common::telemetry::serve_operations(bind, render, readiness, shutdown.clone()).await?;
    }
    // Subscribed before the first event is taken, so no rotation can slip past the cache.
    let rotations = bus.client().subscribe(bus.subjects().secret_rotations()).await?;
    let notifier = Arc::new(Notifier {
        deliverer: Deliverer::new(&config)?,
        secrets: SecretCache::new(store.accounts(), common.master_key.clone(), config.secret_cache, rotations),
        sequences: Sequences::default(),
        targets: Targets::new(config.per_target),
        dead_letters: store.dead_letters(),
        attempts: store.webhook_attempts(),
        recorder: AttemptRecorder::start(store.webhook_attempts(), config.record_linger),
        backlog: Backlog::new(store.webhook_retries()),
        schedule: config.retry_schedule.clone(),
        heartbeat: Heartbeat::start((config.timeout + consumer::ACK_MARGIN) / 3),
        metrics,
        stored_bodies: StoredBodies::new(
            store.predictions(),
            Payloads::new(files),
            Links::new(common.public_base_url.clone(), common.master_key.clone()),
        ),
    });
    let notices = tokio::spawn(notices::deliver_due(notifier.clone(), store.budget_notices(), shutdown.clone()));
    // The retries' workers, beside the consumer of first deliveries.
    let retries = tokio_util::task::TaskTracker::new();
    retries.spawn(backlog::work(notifier.clone(), config.clone(), retries.clone(), shutdown.clone()));
    let consumed = consumer::consume(&config, &bus, notifier, shutdown).await;
    retries.close();
    if tokio::time::timeout(config.shutdown_grace, retries.wait()).await.is_err() {
        tracing::warn!("retries still in flight after the grace period; they are taken again when their lease ends");
    }
    // It stops at its next look once `shutdown` fired; a round under way is left to its lease.
    notices.abort();
    consumed
}
