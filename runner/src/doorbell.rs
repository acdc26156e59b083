//! How a runner learns that a lane has work ([`crate::lanes`]):
//! - **doorbells**: a core-NATS subscription to each served model's job subjects; a published
//!   job names its lane in its subject, and rings it (opening it first if it is new);
//! - **a scan** at start, every [`SCAN_INTERVAL`] and whenever the connection to NATS is made
//!   again (doorbells rung while the runner was away are lost). It counts first
//!   ([`Lanes::census`]): each lane's consumer says how many jobs wait and run in it, and the
//!   stream's size says whether some job is held by no consumer. Only then, or at start, after
//!   a reconnect, or when the last listing is [`LIST_INTERVAL`] old, does it list the jobs
//!   stream's subjects of each served model (one entry per job), which name every lane with a
//!   job waiting or running (a work queue keeps a message until it is acked). This finds what
//!   no doorbell announced: jobs queued while no runner was up, or handed back by a runner
//!   that died; lanes it sees empty stop being asked until a job rings them. The scan also
//!   reports each model's unfinished jobs to the metrics (`runner_jobs_pending`,
//!   `runner_jobs_waiting`, `runner_jobs_running`).

use std::sync::Arc;

use anyhow::Context;
use common::{bus::Bus, domain::ModelRef};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::{
    lanes::{Census, LIST_INTERVAL, Lanes, SCAN_INTERVAL},
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
        // When the subjects were last listed in full (none yet: the first scan lists them).
        let mut listed_at: Option<std::time::Instant> = None;
        let connected_again =
            || tracing::info!("connected to NATS again; scanning for jobs whose doorbells rang while away");
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
                Ok(()) = reconnects.changed() => {
                    connected_again();
                    listed_at = None;
                    tick.reset();
                }
            }
            // A scan's requests sent before a lost connection are never answered: it is begun
            // again as soon as the connection is back, not after their timeouts.
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = scan(&bus, &models, &scheduler, &lanes, &metrics, &mut listed_at) => break,
                    Ok(()) = reconnects.changed() => {
                        connected_again();
                        listed_at = None;
                        tick.reset();
                    }
                }
            }
        }
    });
    Ok(tasks)
}

/// Whether a scan lists the subjects: when a count found jobs no consumer holds (or no count
/// was had), and otherwise when the last listing (none: at start, or since a reconnect) is
/// [`LIST_INTERVAL`] old.
pub fn must_list(census: Option<&Census>, last_listing: Option<std::time::Duration>) -> bool {
    census.is_none_or(|c| c.uncovered > 0) || last_listing.is_none_or(|age| age >= LIST_INTERVAL)
}

/// One scan of each model's lanes with jobs: rings each, and reports the model's jobs. Counts
/// by the consumers, and lists the subjects only when [`must_list`] says so (updating
/// `listed_at` when every model's listing was had).
async fn scan(
    bus: &Bus,
    models: &[ModelRef],
    scheduler: &Scheduler,
    lanes: &Lanes,
    metrics: &RunnerMetrics,
    listed_at: &mut Option<std::time::Instant>,
) {
    let counted_at = std::time::Instant::now();
    let census = match lanes.census(models).await {
        Ok(census) => Some(census),
        Err(e) => {
            tracing::debug!(error = format!("{e:#}"), "the jobs were not counted by their consumers");
            None
        }
    };
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    if let Some(census) = census.as_ref().filter(|c| !must_list(Some(c), listed_at.map(|t| t.elapsed()))) {
        metrics.counted_lanes(false);
        for model in models {
            let name = model.to_string();
            let (found, waiting, running) =
                census.models.get(model).map_or((&[][..], 0, 0), |c| (c.lanes.as_slice(), c.waiting, c.running));
            metrics.set_pending(&name, count(waiting + running));
            metrics.set_depth(&name, count(waiting), count(running));
            scheduler.scanned(model, found, counted_at);
            for key in found {
                scheduler.ring(key.clone(), Heard::Scan).await;
            }
        }
        return;
    }
    metrics.counted_lanes(true);
    let mut listed = true;
    for model in models {
        let scanned_at = std::time::Instant::now();
        match lanes.with_jobs(model).await {
            Ok((found, jobs)) => {
                let name = model.to_string();
                metrics.set_pending(&name, count(jobs));
                if let Some(census) = &census {
                    let running = census.models.get(model).map_or(0, |c| c.running).min(jobs);
                    metrics.set_depth(&name, count(jobs - running), count(running));
                }
                scheduler.scanned(model, &found, scanned_at);
                for key in found {
                    scheduler.ring(key, Heard::Scan).await;
                }
            }
            Err(e) => {
                listed = false;
                tracing::warn!(%model, error = format!("{e:#}"), "scanning for lanes failed; making sure the streams exist");
                if let Err(e) = bus.ensure_streams().await {
                    tracing::warn!(error = %e, "streams not created");
                }
            }
        }
    }
    if listed {
        *listed_at = Some(counted_at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subjects_are_listed_only_when_a_job_has_no_consumer_or_the_last_listing_is_old() {
        let covered = Census::default();
        let uncovered = Census { uncovered: 1, ..Census::default() };
        let recent = Some(std::time::Duration::from_secs(10));
        assert!(!must_list(Some(&covered), recent), "every job held by a consumer: counted, not listed");
        assert!(must_list(Some(&uncovered), recent), "a job no consumer holds: its lane is found by listing");
        assert!(must_list(None, recent), "no count: listed");
        assert!(must_list(Some(&covered), None), "at start and after a reconnect: listed");
        assert!(must_list(Some(&covered), Some(LIST_INTERVAL)), "a listing as old as the interval: listed again");
    }
}
