//! Jobs the api could not publish, published again as soon as NATS takes them.
//!
//! A create stores its prediction, then publishes its job. While NATS is down or restarting
//! that publish fails (or its confirmation never comes); the prediction is accepted all the
//! same, and its job waits here. One task publishes the waiting jobs again, oldest first, in
//! rounds of up to [`ROUND`] at once, with a pause that grows from 100 ms to 1 s while rounds
//! keep failing: each job starts within moments of NATS's return, not when the runners'
//! reconciler would find it (a `starting` prediction 30 s old without its job). Republishing
//! is harmless: the job's `Nats-Msg-Id` is its prediction id, so a copy within the stream's
//! duplicate window is dropped, and a runner acks a job whose prediction has moved on.
//!
//! What this does not cover, the reconciler still does: jobs waiting here when the api
//! process dies, and more than [`CAPACITY`] of them at once.

use std::{collections::VecDeque, time::Duration};

use common::bus::{Bus, BusError, EncodedJob};
use futures::future::join_all;
use tokio::sync::mpsc;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

/// The most jobs kept waiting; past it a job is left to the reconciler.
pub const CAPACITY: usize = 100_000;
/// The most jobs published at once in one round.
const ROUND: usize = 256;
/// The first pause after a failed round, and the longest.
const PAUSE: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(1));
/// How long a stopping api keeps trying the jobs still waiting.
const LAST_TRY: Duration = Duration::from_secs(2);
/// How long a job's publish may wait for the stream's confirmation before the job is taken for
/// lost and published again: far above a confirmation's time under load (milliseconds), far
/// below the client's 5 s request timeout, so a job published as NATS went away is sent again
/// within moments of its return (republishing is harmless, see above).
pub const CONFIRM_WITHIN: Duration = Duration::from_secs(2);

/// Hands jobs to the republishing task. Cheap to clone.
#[derive(Clone)]
pub struct JobOutbox {
    queue: mpsc::Sender<EncodedJob>,
    stop: CancellationToken,
}

impl JobOutbox {
    /// Starts the task on `tracker` (which a stopping api waits for).
    pub fn start(bus: Bus, tracker: &TaskTracker) -> Self {
        let (queue, receiver) = mpsc::channel(CAPACITY);
        let stop = CancellationToken::new();
        tracker.spawn(republish(bus, receiver, stop.clone()));
        Self { queue, stop }
    }

    /// Keeps `job` until it is published.
    pub fn hold(&self, job: EncodedJob) {
        if let Err(e) = self.queue.try_send(job) {
            tracing::error!(error = %e, "the job outbox is full; the reconciler will republish this job");
        }
    }

    /// Stops the task after one last try of what waits (within [`LAST_TRY`]).
    pub fn close(&self) {
        self.stop.cancel();
    }
}

/// Waits up to [`CONFIRM_WITHIN`] for the jobs stream to confirm a sent job; the error says
/// why it was not confirmed.
pub async fn confirmed(stored: impl Future<Output = Result<(), BusError>>) -> Result<(), String> {
    match tokio::time::timeout(CONFIRM_WITHIN, stored).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err(format!("not confirmed within {CONFIRM_WITHIN:?}")),
    }
}

async fn republish(bus: Bus, mut queue: mpsc::Receiver<EncodedJob>, stop: CancellationToken) {
    let mut waiting: VecDeque<EncodedJob> = VecDeque::new();
    let mut pause = PAUSE.0;
    loop {
        if waiting.is_empty() {
            tokio::select! {
                job = queue.recv() => match job {
                    Some(job) => waiting.push_back(job),
                    None => return,
                },
                () = stop.cancelled() => return,
            }
        }
        while let Ok(job) = queue.try_recv() {
            waiting.push_back(job);
        }
        if stop.is_cancelled() {
            last_try(&bus, waiting).await;
            return;
        }
        if round(&bus, &mut waiting).await {
            pause = PAUSE.0;
        } else {
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = stop.cancelled() => {}
            }
            pause = (pause * 2).min(PAUSE.1);
        }
    }
}

/// Publishes up to [`ROUND`] waiting jobs at once; those that fail wait again, in front.
/// Whether every one was published.
async fn round(bus: &Bus, waiting: &mut VecDeque<EncodedJob>) -> bool {
    let batch: Vec<EncodedJob> = waiting.drain(..waiting.len().min(ROUND)).collect();
    let publish = |job| async move {
        let stored = bus.send_job(job).await.map_err(|e| e.to_string())?;
        confirmed(stored).await
    };
    let results = join_all(batch.iter().map(publish)).await;
    let mut failed = Vec::new();
    for (job, result) in batch.into_iter().zip(results) {
        match result {
            Ok(()) => tracing::info!(prediction_id = job.prediction_id(), "job published after an earlier failure"),
            Err(e) => {
                tracing::debug!(prediction_id = job.prediction_id(), error = %e, "job still not published");
                failed.push(job);
            }
        }
    }
    let all = failed.is_empty();
    for job in failed.into_iter().rev() {
        waiting.push_front(job);
    }
    all
}

async fn last_try(bus: &Bus, mut waiting: VecDeque<EncodedJob>) {
    let _ =
        tokio::time::timeout(LAST_TRY, async { while !waiting.is_empty() && round(bus, &mut waiting).await {} }).await;
    if !waiting.is_empty() {
        tracing::warn!(jobs = waiting.len(), "jobs still not published at shutdown; the reconciler will publish them");
    }
}
