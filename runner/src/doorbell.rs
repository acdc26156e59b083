//! How a runner learns that a lane has work ([`crate::lanes`]):
//! - **doorbells**: a core-NATS subscription to each served model's job subjects; a published
//!   job names its lane in its subject, and rings it (opening it first if it is new);
//! - **a scan** at start, every [`SCAN_INTERVAL`] and whenever the connection to NATS is made
//!   again (doorbells rung while the runner was away are lost): the jobs stream's subjects of each
//!   served model, which name every lane with a job waiting or running (a work queue keeps a
//!   message until it is acked). This finds what no doorbell announced: jobs queued while no
//!   runner was up, or handed back by a runner that died; lanes it sees empty stop being
//!   asked until a job rings them. The scan also reports each model's unfinished jobs to the
//!   metrics (`runner_jobs_pending`).

use std::sync::Arc;

use anyhow::Context;
use common::{bus::Bus, domain::ModelRef};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::{
    lanes::{Lanes, SCAN_INTERVAL},
    metrics::RunnerMetrics,
    scheduler::{Scheduler, fair_pick::Heard},
};

/// Rings the scheduler for every job published for `models` (core NATS), and scans for lanes
/// at start, every [`SCAN_INTERVAL`] and after each reconnect to NATS (reporting each model's
/// unfinished jobs to `metrics`), until `shutdown` fires.
pub async fn announce(
    bus: &Bus,
    models: Vec<ModelRef>,
    scheduler: Arc<Scheduler>,
    lanes: Arc<Lanes>,
    metrics: RunnerMetrics,
    shutdown: CancellationToken,
) -> anyhow::Result<tokio::task::JoinSet<()>> {
    let mut tasks = tokio::task::JoinSet::new();
    for model in &models {
        let mut jobs = bus
            .client()
            .subscribe(bus.subjects().model_jobs(model))
            .await
            .with_context(|| format!("subscribing to the jobs of {model}"))?;
        let (scheduler, lanes, shutdown, model) = (scheduler.clone(), lanes.clone(), shutdown.clone(), model.clone());
        tasks.spawn(async move {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    job = jobs.next() => match job {
                        Some(job) => match lanes.lane_of(&model, &job.subject) {
                            Some(key) => scheduler.ring(key, Heard::Doorbell).await,
                            None => tracing::debug!(subject = %job.subject, "a job subject of no known format"),
                        },
                        None => return,
                    },
                }
            }
        });
    }
    let bus = bus.clone();
    let mut reconnects = bus.reconnects();
    tasks.spawn(async move {
        let mut tick = tokio::time::interval(SCAN_INTERVAL);
        let connected_again =
            || tracing::info!("connected to NATS again; scanning for jobs whose doorbells rang while away");
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
                Ok(()) = reconnects.changed() => {
                    connected_again();
                    tick.reset();
                }
            }
            // A scan's requests sent before a lost connection are never answered: it is begun
            // again as soon as the connection is back, not after their timeouts.
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = scan(&bus, &models, &scheduler, &lanes, &metrics) => break,
                    Ok(()) = reconnects.changed() => {
                        connected_again();
                        tick.reset();
                    }
                }
            }
        }
    });
    Ok(tasks)
}

/// One scan of each model's lanes with jobs: rings each, and reports the model's jobs.
async fn scan(bus: &Bus, models: &[ModelRef], scheduler: &Scheduler, lanes: &Lanes, metrics: &RunnerMetrics) {
    let running = match lanes.running(models).await {
        Ok(running) => Some(running),
        Err(e) => {
            tracing::debug!(error = format!("{e:#}"), "the running jobs were not counted");
            None
        }
    };
    for model in models {
        let scanned_at = std::time::Instant::now();
        match lanes.with_jobs(model).await {
            Ok((found, jobs)) => {
                let name = model.to_string();
                let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
                metrics.set_pending(&name, count(jobs));
                if let Some(running) = &running {
                    let running = running.get(model).copied().unwrap_or(0).min(jobs);
                    metrics.set_depth(&name, count(jobs - running), count(running));
                }
                scheduler.scanned(model, &found, scanned_at);
                for key in found {
                    scheduler.ring(key, Heard::Scan).await;
                }
            }
            Err(e) => {
                tracing::warn!(%model, error = format!("{e:#}"), "scanning for lanes failed; making sure the streams exist");
                if let Err(e) = bus.ensure_streams().await {
                    tracing::warn!(error = %e, "streams not created");
                }
            }
        }
    }
}
