//! The events waiting for a retry, kept in MongoDB per receiver
//! ([`crate::store::webhook_retries`]), and the workers that attempt them when they are due.
//!
//! **Isolation lives here.** An event whose attempt failed, or whose receiver had no free slot,
//! leaves JetStream for its receiver's queue, so nothing shared by every receiver fills up
//! while one receiver is down: the consumer's window of unacknowledged messages holds only
//! deliveries under way, and a first delivery to a healthy receiver never waits behind
//! anyone's retries (docs/webhooks.md, "Isolation": within 5 s of its event, however many wait
//! elsewhere).
//!
//! Among the retries themselves, a worker claims a *receiver* at a time, the one due first, and
//! works through its due events with the receiver's own slots ([`crate::targets`]) for at most
//! one delivery timeout (`NOTIFIER_TIMEOUT_SECONDS`), then puts it back due when its next event is. So a
//! receiver with a million events waiting is one entry in the order, like a receiver with
//! one, and at most `NOTIFIER_CONCURRENCY` receivers are worked at once by a replica, with at
//! most `NOTIFIER_CONCURRENCY` retry attempts in flight among them. A retry follows the
//! schedule: it is attempted when due, or as soon as a worker is free after that.
//!
//! A worker that finds nothing due sleeps until the soonest retry this replica wrote, or
//! [`crate::waiting::POLL`] at the longest (retries another replica wrote).

use std::{sync::Arc, time::Duration};

use common::{
    domain::WebhookEvent,
    messages::{Announcement, DeliverableEvent},
    store::webhook_attempts::AttemptOutcome,
};
use tokio::{
    sync::{OwnedSemaphorePermit, Semaphore},
    task::JoinSet,
    time::Instant,
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::Instrument;

use crate::store::webhook_retries::{ClaimedTarget, WaitingRetry};
use crate::{
    config::NotifierConfig,
    consumer::{Arrival, DEPENDENCY_RETRY, Next, Notifier, route},
};

/// How long a worker works through one receiver's due events before it puts the receiver back
/// (and so how long other receivers' retries may wait for a free worker at most, roughly).
fn work_span(config: &NotifierConfig) -> Duration {
    config.timeout
}

/// How many of a receiver's slots' worth of due events are taken at once: a batch takes at
/// most this many delivery timeouts (a receiver that hangs).
const ROUNDS: usize = 4;

/// How long a taken event is not due again: its batch's attempts (the last waits for
/// [`ROUNDS`] - 1 before it), its record and putting it back.
fn event_lease(config: &NotifierConfig) -> Duration {
    config.timeout * (ROUNDS as u32 + 1) + Duration::from_secs(30)
}

/// Works through due retries until `shutdown`, each receiver's in a task of `tracker`.
pub async fn work(notifier: Arc<Notifier>, config: NotifierConfig, tracker: TaskTracker, shutdown: CancellationToken) {
    let receivers = Arc::new(Semaphore::new(config.concurrency));
    let attempts = Arc::new(Semaphore::new(config.concurrency));
    let target_lease = work_span(&config) + event_lease(&config);
    while !shutdown.is_cancelled() {
        let permit = tokio::select! {
            () = shutdown.cancelled() => return,
            permit = receivers.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => return,
            },
        };
        match notifier.backlog.store.claim_target(target_lease).await {
            Ok(Some(claim)) => {
                tracing::debug!(target = %claim.target, version = claim.version, "claimed a receiver's retries");
                let span = tracing::info_span!("webhook_retries", target = %claim.target);
                let work = work_through(notifier.clone(), claim, config.clone(), attempts.clone(), shutdown.clone());
                tracker.spawn(async move {
                    work.instrument(span).await;
                    drop(permit)
                });
                continue;
            }
            Ok(None) => drop(permit),
            Err(e) => {
                drop(permit);
                tracing::warn!(error = %e, "the webhook backlog is unreadable; trying again shortly");
            }
        }
        notifier.backlog.idle(&shutdown).await;
    }
}

/// Attempts the claimed receiver's due events, a batch at a time, each with one of its slots
/// and one of the replica's retry `attempts`, taking batches for at most [`work_span`]; then
/// puts the receiver back.
async fn work_through(
    notifier: Arc<Notifier>,
    claim: ClaimedTarget,
    config: NotifierConfig,
    attempts: Arc<Semaphore>,
    shutdown: CancellationToken,
) {
    let until = Instant::now() + work_span(&config);
    let lease = event_lease(&config);
    let batch = config.per_target * ROUNDS;
    while !shutdown.is_cancelled() && Instant::now() < until {
        let due = match notifier.backlog.store.take_due(&claim.target, lease, batch).await {
            Ok(due) if due.is_empty() => break,
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(error = %e, "the receiver's waiting events are unreadable; it is claimed again later");
                break;
            }
        };
        tracing::debug!(taken = due.len(), "took a batch of due retries");
        // Each waits for a slot at the receiver and a retry attempt of this replica's.
        let mut under_way = JoinSet::new();
        for retry in due {
            let span = tracing::info_span!("webhook", prediction_id = %retry.prediction_id, event = %retry.event);
            under_way.spawn(retry_once(notifier.clone(), retry, attempts.clone()).instrument(span));
        }
        while under_way.join_next().await.is_some() {}
    }
    tracing::debug!("putting the receiver back");
    if let Err(e) = notifier.backlog.store.release_target(&claim).await {
        tracing::warn!(error = %e, "the receiver was not put back; it is due again when its claim ends");
    }
}

/// One attempt of a waiting event, with a slot at its target and one of the replica's retry
/// `attempts`; then the event is put back for its next attempt, or forgotten.
async fn retry_once(notifier: Arc<Notifier>, retry: WaitingRetry, attempts: Arc<Semaphore>) {
    let store = &notifier.backlog.store;
    let (Some(slot), Ok(attempt)) = (notifier.targets.wait_for(&retry.target).await, attempts.acquire_owned().await)
    else {
        return;
    };
    let next = attempt_waiting(&notifier, &retry, slot).await;
    drop(attempt);
    let settled = match next {
        Next::Done | Next::Terminate => store.remove(&retry.webhook_id).await,
        Next::Retry { after, attempts } => store.put_back(&retry.webhook_id, after, attempts).await,
        Next::HandBack(after) => store.put_back(&retry.webhook_id, after, retry.attempts).await,
    };
    if let Err(e) = settled {
        tracing::warn!(error = %e, ?next, "a waiting event's next step was not written; it is taken again when its lease ends");
    }
}

async fn attempt_waiting(notifier: &Notifier, retry: &WaitingRetry, slot: OwnedSemaphorePermit) -> Next {
    let change: DeliverableEvent = match serde_json::from_slice(&retry.message.bytes) {
        Ok(change) => change,
        Err(e) => {
            tracing::error!(error = %e, webhook_id = %retry.webhook_id, "a waiting event does not decode; dropped");
            return Next::Terminate;
        }
    };
    let Some(url) = change.webhook.clone() else { return Next::Done };
    // A retry taken before and never settled (its notifier died mid-attempt) may have been
    // attempted since its count was written: its records say.
    let before = match retry.taken {
        false => retry.attempts,
        true => match notifier.recorded_attempts(&retry.webhook_id).await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "attempt count unavailable; retrying");
                return Next::HandBack(DEPENDENCY_RETRY);
            }
        },
    };
    // `completed` goes out last: an earlier event still waiting once it was delivered (by any
    // replica) is stale.
    if change.event != WebhookEvent::Completed {
        match notifier.attempts.for_prediction(&change.prediction_id).await {
            Ok(records)
                if records
                    .iter()
                    .any(|a| a.event == WebhookEvent::Completed && a.outcome == AttemptOutcome::Delivered) =>
            {
                tracing::debug!("stale retry after the prediction's completed webhook; dropped");
                return Next::Done;
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "the prediction's deliveries are unreadable; retrying");
                return Next::HandBack(DEPENDENCY_RETRY);
            }
        }
    }
    let arrival = Arrival { delivery: 0, announcement: Announcement::First };
    route(arrival, notifier, &change, &url, before, Some(slot)).await
}
