//! Consuming status events: one durable consumer (`<P>_notifier`) shared by every notifier
//! replica, so each event is delivered by one replica in the normal case.
//!
//! **Retries wait in MongoDB, per receiver, not in JetStream.** A message held in JetStream
//! for a retry (a nak with a delay) would keep its place in the consumer's window of
//! unacknowledged messages, which is bounded (`max_ack_pending`): a thousand events waiting for
//! one receiver that is down would fill it and stop every account's webhooks. So a failed
//! attempt is recorded, the event is written to its receiver's queue of waiting events
//! ([`crate::waiting`]) and only then is its message acknowledged; the backlog's workers make
//! the later attempts. The consumer's window only ever holds the events being delivered now,
//! so an event for a healthy receiver is delivered as soon as it is published, however many
//! wait elsewhere. An event whose receiver has all its slots busy ([`crate::targets`]) joins
//! that receiver's queue the same way, without an attempt.
//!
//! Nothing about pending retries lives in a notifier's memory, so a notifier killed between
//! attempts loses nothing: an event whose message was not yet acknowledged is delivered again
//! (at the latest after `ack_wait`), and one in the backlog is taken again when its lease ends.
//! The attempt number is one more than the attempts made before: 0 on a first delivery, the
//! backlog's count for a retry, and counted from the records of the event's `webhook-id` for a
//! redelivered message. Each attempt's record is stored ([`crate::recorder`], several per
//! write) before its message is acknowledged or its retry written. After the last attempt
//! the delivery is recorded as failed. Before sending, an event waits for its turn in its
//! prediction's sequence ([`crate::sequences`]) and for a slot at its target
//! ([`crate::targets`]).

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use async_nats::jetstream::{
    AckKind, Message,
    consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull},
};
use bson::DateTime;
use common::{
    bus::{Bus, heartbeat::Heartbeat, held::HeldMessage},
    domain::{WebhookEvent, WebhookUrl},
    messages::{ANNOUNCEMENT_HEADER, Announcement, DeliverableEvent},
    store::{
        WebhookAttempts,
        webhook_attempts::{AttemptOutcome, WebhookAttempt},
    },
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::Instrument;

use crate::{
    config::NotifierConfig,
    deliver::{AttemptResult, Deliverer, Webhook},
    metrics::{BACKLOG_REFRESH, NotifierMetrics},
    pull::{Permits, pull_with_permits},
    recorder::AttemptRecorder,
    retry::RetrySchedule,
    secrets::SecretCache,
    sequences::{self, Sequence, Sequences, Verdict},
    stored_bodies::StoredBodies,
    targets::Targets,
    waiting::Backlog,
};

/// How long to wait before retrying when a dependency (MongoDB) failed before sending.
pub(crate) const DEPENDENCY_RETRY: Duration = Duration::from_secs(5);
/// How much longer than the delivery timeout an event may stay unacknowledged before
/// JetStream hands it to another replica (a notifier that died mid-delivery); a held event
/// sends in-progress acks every third of that, however long it waits for its turn.
pub const ACK_MARGIN: Duration = Duration::from_secs(5);
/// How long a delivery to a target at its concurrency limit waits before it is tried again.
pub(crate) const TARGET_BUSY_RETRY: Duration = Duration::from_millis(500);

/// What the notifier needs to deliver one event.
pub struct Notifier {
    /// Sends the requests.
    pub deliverer: Deliverer,
    /// Signing secrets by account.
    pub secrets: SecretCache,
    /// Where attempts are recorded (and counted, for a redelivered message).
    pub attempts: WebhookAttempts,
    /// Stores attempt records, several per write.
    pub recorder: AttemptRecorder,
    /// The events waiting for a retry, per receiver.
    pub backlog: Backlog,
    /// When to retry.
    pub schedule: RetrySchedule,
    /// Per-prediction order and throttling.
    pub sequences: Sequences,
    /// Per-target concurrency limits.
    pub targets: Targets,
    /// Where undecodable events are recorded.
    pub dead_letters: common::store::dead_letters::DeadLetters,
    /// The in-progress acks of held event messages (about every third of their ack wait).
    pub heartbeat: Heartbeat,
    /// What `/metrics` shows.
    pub metrics: NotifierMetrics,
    /// The bodies of events that name their prediction instead of carrying it.
    pub stored_bodies: StoredBodies,
}

/// What to do with the event message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Disposition {
    Ack,
    RetryAfter(Duration),
    Terminate,
}

/// Consumes events until `shutdown` fires, then lets in-flight deliveries finish.
pub async fn consume(
    config: &NotifierConfig,
    bus: &Bus,
    notifier: Arc<Notifier>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let subjects = bus.subjects();
    let stream = bus.jetstream().get_stream(subjects.events_stream()).await.context("opening the events stream")?;
    let name = subjects.notifier_consumer();
    let consumer: PullConsumer = stream
        .create_consumer(pull::Config {
            durable_name: Some(name.clone()),
            deliver_policy: DeliverPolicy::All,
            ack_policy: AckPolicy::Explicit,
            ack_wait: config.timeout + ACK_MARGIN,
            ..Default::default()
        })
        .await
        .with_context(|| format!("creating consumer {name}"))?;
    tracing::info!(consumer = %name, "consuming status events");

    let tracker = TaskTracker::new();
    tracker.spawn(report_backlog(consumer.clone(), notifier.clone(), shutdown.clone()));
    let permits = Arc::new(Semaphore::new(config.concurrency));
    pull_with_permits(consumer, vec![permits], tracker.clone(), shutdown, move |message, permits| {
        handle(message, notifier.clone(), permits)
    })
    .await;
    tracker.close();
    if tokio::time::timeout(config.shutdown_grace, tracker.wait()).await.is_err() {
        tracing::warn!("deliveries still in flight after the grace period; they will be redelivered");
    }
    tracing::info!("notifier stopped");
    Ok(())
}

/// Reads the consumer's backlog, and the events waiting for a retry, into the metrics every
/// [`BACKLOG_REFRESH`] until `shutdown`.
async fn report_backlog(mut consumer: PullConsumer, notifier: Arc<Notifier>, shutdown: CancellationToken) {
    let metrics: &NotifierMetrics = &notifier.metrics;
    loop {
        match tokio::time::timeout(BACKLOG_REFRESH, consumer.info()).await {
            Ok(Ok(info)) => metrics.set_backlog(info.num_pending, info.num_ack_pending, info.num_redelivered),
            Ok(Err(e)) => tracing::debug!(error = %e, "consumer info unavailable; backlog not updated"),
            Err(_) => tracing::debug!("consumer info did not answer; backlog not updated"),
        }
        match tokio::time::timeout(BACKLOG_REFRESH, notifier.backlog.waiting()).await {
            Ok(Ok(waiting)) => metrics.set_waiting(waiting),
            Ok(Err(e)) => tracing::debug!(error = %e, "waiting retries not counted"),
            Err(_) => tracing::debug!("the count of waiting retries did not answer"),
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(BACKLOG_REFRESH) => {}
        }
    }
}

async fn handle(message: Message, notifier: Arc<Notifier>, _permits: Permits) {
    let held = HeldMessage::<DeliverableEvent>::take(message, "notifier", &notifier.dead_letters, &notifier.heartbeat);
    let Some(event) = held.await else { return };
    let (delivery, _) = event.delivery();
    let announcement = Announcement::from_header(event.header(ANNOUNCEMENT_HEADER));
    let change = event.payload();
    let settle = if change.kind.is_resend() {
        let span = tracing::info_span!("webhook_resend", prediction_id = %change.prediction_id, event = %change.event, seq = change.seq);
        common::trace_context::continue_trace(&span, event.trace_context());
        resend(&notifier, change).instrument(span).await
    } else {
        let span = tracing::info_span!("webhook", prediction_id = %change.prediction_id, event = %change.event, seq = change.seq);
        common::trace_context::continue_trace(&span, event.trace_context());
        first_delivery(Arrival { delivery, announcement }, &notifier, change, event.raw()).instrument(span).await
    };
    event.settle(settle).await;
}

/// An event's own message: delivered now, or written to its receiver's backlog for a later
/// attempt (then acknowledged: see the module's notes); handed back only when neither could
/// be done.
async fn first_delivery(arrival: Arrival, notifier: &Notifier, change: &DeliverableEvent, message: &[u8]) -> AckKind {
    let Some(url) = change.webhook.clone() else {
        return AckKind::Ack;
    };
    // A redelivered message (a notifier that died mid-attempt, or a hand-back) may follow
    // attempts: they are counted from their records.
    let before = match arrival.delivery {
        ..=1 => 0,
        _ => match notifier.recorded_attempts(&change.message_id()).await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "attempt count unavailable; retrying");
                return AckKind::Nak(Some(DEPENDENCY_RETRY));
            }
        },
    };
    match route(arrival, notifier, change, &url, before, None).await {
        Next::Done => AckKind::Ack,
        Next::Terminate => AckKind::Term,
        Next::HandBack(delay) => AckKind::Nak(Some(delay)),
        Next::Retry { after, attempts } => {
            match notifier.backlog.schedule(change, message, &url, attempts, after).await {
                Ok(()) => AckKind::Ack,
                Err(e) => {
                    // Kept in JetStream instead: it holds a place in the consumer's window until
                    // then, which only a MongoDB that refuses writes should ever cause.
                    tracing::warn!(error = %e, "retry not written to the backlog; handed back to JetStream");
                    AckKind::Nak(Some(after))
                }
            }
        }
    }
}

/// A resend: exactly one more attempt of the event, with its `webhook-id` and the next attempt
/// number, outside the prediction's sequence (its order was kept the first time) and without
/// retries. Its record is stored before the message is acked.
async fn resend(notifier: &Notifier, change: &DeliverableEvent) -> AckKind {
    let Some(url) = change.webhook.clone() else {
        return AckKind::Ack;
    };
    let Some(_slot) = notifier.targets.acquire(&url).await else {
        return AckKind::Nak(Some(TARGET_BUSY_RETRY));
    };
    let before = match notifier.recorded_attempts(&change.message_id()).await {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, "attempt count unavailable; retrying");
            return AckKind::Nak(Some(DEPENDENCY_RETRY));
        }
    };
    let record = match notifier.attempt(change, &url, before.saturating_add(1), Retries::None).await {
        Outcome::Attempted { record, .. } => record,
        Outcome::NotAttempted(disposition) => return disposition.ack_kind(),
    };
    match notifier.recorder.record(record).await {
        Ok(()) => AckKind::Ack,
        Err(e) => {
            tracing::warn!(error = %e, "resend attempt not recorded; handed back to be made again");
            AckKind::Nak(Some(DEPENDENCY_RETRY))
        }
    }
}

/// Whether a failed attempt is retried on the schedule.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Retries {
    /// On the schedule (an event's own deliveries).
    Scheduled,
    /// Never (a resend).
    None,
}

/// How an event reached this replica.
#[derive(Clone, Copy)]
pub(crate) struct Arrival {
    /// JetStream's delivery count of its message (1 the first time; 0 for a retry from the
    /// backlog, whose message was acknowledged).
    pub(crate) delivery: i64,
    /// Who published it (a `completed` event announced [`Announcement::Again`] may be a copy).
    pub(crate) announcement: Announcement,
}

/// What is left to do for an event after [`route`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Nothing: delivered, dropped as stale or superseded, or given up after its last attempt.
    Done,
    /// Nothing, and it can never be delivered (refused by policy, its body gone).
    Terminate,
    /// Another attempt `after` this long, `attempts` having been made (as many as before
    /// when its target had no free slot).
    Retry { after: Duration, attempts: u32 },
    /// Nothing was sent: a dependency failed first; try again after this long.
    HandBack(Duration),
}

/// Drops what needs no webhook (filtered out, stale, superseded), then delivers the event when
/// its prediction's sequence gives it its turn, `before` attempts having been made; `slot` is
/// a slot at its target already held (a retry), else one is waited for briefly.
pub(crate) async fn route(
    arrival: Arrival,
    notifier: &Notifier,
    change: &DeliverableEvent,
    url: &WebhookUrl,
    before: u32,
    slot: Option<OwnedSemaphorePermit>,
) -> Next {
    if !change.event.selected_by(change.webhook_events_filter.as_deref()) {
        return Next::Done;
    }
    let Some(sequence) = notifier.sequences.enter(&change.prediction_id, change.event, change.seq) else {
        tracing::debug!("stale retry after the prediction's completed webhook; dropped");
        return Next::Done;
    };
    let turn = sequence.turn().await;
    match sequence.verdict(change.event, change.seq) {
        Verdict::Superseded => {
            tracing::debug!("superseded by a newer state of the prediction; dropped");
            return Next::Done;
        }
        Verdict::Deliver { wait } => sequences::wait_out(wait).await,
    }
    deliver(arrival, notifier, change, url, (before, slot), &sequence, turn).await
}

/// In the event's turn: a slot at its target, the attempt. Then, with the turn released, the
/// attempt's record is stored; only then is what is left to do answered. An attempt whose
/// record could not be stored is handed back to be made again, so no attempt goes
/// unrecorded.
async fn deliver(
    Arrival { delivery, announcement }: Arrival,
    notifier: &Notifier,
    change: &DeliverableEvent,
    url: &WebhookUrl,
    (before, slot): (u32, Option<OwnedSemaphorePermit>),
    sequence: &Sequence,
    turn: tokio::sync::MutexGuard<'_, ()>,
) -> Next {
    let webhook_id = change.message_id();
    if change.event == WebhookEvent::Completed && delivery == 1 && announcement == Announcement::Again {
        // A first delivery of a `completed` event announced again that was attempted before
        // is a copy republished after JetStream's duplicate window (a runner announcing an
        // ended prediction again): the records in MongoDB, not a window, make it exactly once.
        // The first announcement, by the writer of the change, cannot be such a copy.
        match notifier.attempts.any_for_webhook(&webhook_id).await {
            Ok(false) => {}
            Ok(true) => {
                tracing::info!("a copy of an already attempted completed event; not sent again");
                return Next::Done;
            }
            Err(e) => {
                tracing::warn!(error = %e, "earlier attempts unknown; retrying");
                return Next::HandBack(DEPENDENCY_RETRY);
            }
        }
    }
    let slot = match slot {
        Some(slot) => slot,
        None => match notifier.targets.acquire(url).await {
            Some(slot) => slot,
            None => {
                tracing::debug!("target at its concurrency limit; the event waits in its backlog");
                return Next::Retry { after: TARGET_BUSY_RETRY, attempts: before };
            }
        },
    };
    let attempt = before.saturating_add(1);
    let (record, disposition) = match notifier.attempt(change, url, attempt, Retries::Scheduled).await {
        Outcome::Attempted { record, disposition } => (record, disposition),
        Outcome::NotAttempted(Disposition::Terminate) => return Next::Terminate,
        Outcome::NotAttempted(_) => return Next::HandBack(DEPENDENCY_RETRY),
    };
    drop(slot);
    if disposition == Disposition::Ack {
        sequence.delivered(change.event);
        if change.event == WebhookEvent::Completed {
            notifier.sequences.finish(&change.prediction_id);
        }
    }
    // The prediction's next event may go out while this record waits for its write.
    drop(turn);
    if let Err(e) = notifier.recorder.record(record).await {
        tracing::warn!(error = %e, "attempt not recorded; the event is handed back to be attempted again");
        return Next::HandBack(DEPENDENCY_RETRY);
    }
    match disposition {
        Disposition::Ack => Next::Done,
        // Refused by policy, or its last attempt failed.
        Disposition::Terminate => Next::Terminate,
        Disposition::RetryAfter(after) => Next::Retry { after, attempts: attempt },
    }
}

impl Disposition {
    fn ack_kind(self) -> AckKind {
        match self {
            Disposition::Ack => AckKind::Ack,
            Disposition::RetryAfter(delay) => AckKind::Nak(Some(delay)),
            Disposition::Terminate => AckKind::Term,
        }
    }
}

/// What came of trying to deliver an event.
enum Outcome {
    /// A request was sent (or refused by policy): its record, and what to do with the message.
    Attempted { record: WebhookAttempt, disposition: Disposition },
    /// Nothing was sent (a dependency failed first).
    NotAttempted(Disposition),
}

impl Notifier {
    /// How many attempts of the event `webhook_id` are recorded.
    pub(crate) async fn recorded_attempts(&self, webhook_id: &str) -> Result<u32, common::store::StoreError> {
        let recorded = self.attempts.count_for_webhook(webhook_id).await?;
        Ok(u32::try_from(recorded).unwrap_or(u32::MAX))
    }

    async fn attempt(&self, change: &DeliverableEvent, url: &WebhookUrl, attempt: u32, retries: Retries) -> Outcome {
        let secrets = match self.secrets.get(&change.account_id).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = format!("{e:#}"), "signing secret unavailable; retrying");
                return Outcome::NotAttempted(Disposition::RetryAfter(DEPENDENCY_RETRY));
            }
        };
        let stored;
        let body = match change.body() {
            Some(body) => body,
            None => match self.stored_bodies.body(&change.prediction_id).await {
                Ok(Some(body)) => {
                    stored = body;
                    stored.as_slice()
                }
                Ok(None) => {
                    tracing::warn!("the prediction of an event by reference is not stored; nothing to send");
                    return Outcome::NotAttempted(Disposition::Terminate);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the prediction of an event by reference is unreadable; retrying");
                    return Outcome::NotAttempted(Disposition::RetryAfter(DEPENDENCY_RETRY));
                }
            },
        };
        let webhook_id = change.message_id();
        let hook = Webhook { id: &webhook_id, event: change.event, seq: change.seq, url, body };
        let attempt_span = tracing::info_span!("webhook_attempt", attempt, url = %url);
        let signing = secrets.signing_at(DateTime::now());
        let (result, latency) = self.deliverer.send(&hook, &signing).instrument(attempt_span).await;
        self.metrics.attempted(&result, latency);

        let retry = |retry_after: Option<Duration>| {
            self.schedule
                .delay_after(attempt)
                .filter(|_| retries == Retries::Scheduled)
                .map(|d| d.max(retry_after.unwrap_or_default().min(self.schedule.longest())))
        };
        let (status_code, error, outcome, disposition) = match &result {
            AttemptResult::Delivered { status } => (Some(*status), None, AttemptOutcome::Delivered, Disposition::Ack),
            AttemptResult::Refused { reason } => {
                (None, Some(reason.clone()), AttemptOutcome::Refused, Disposition::Terminate)
            }
            AttemptResult::Rejected { status, retry_after } => {
                let next = retry(*retry_after);
                let error = Some(format!("receiver answered {status}"));
                match next {
                    Some(d) => (Some(*status), error, AttemptOutcome::WillRetry, Disposition::RetryAfter(d)),
                    None => (Some(*status), error, AttemptOutcome::Failed, Disposition::Terminate),
                }
            }
            AttemptResult::Failed { error, .. } => match retry(None) {
                Some(d) => (None, Some(error.clone()), AttemptOutcome::WillRetry, Disposition::RetryAfter(d)),
                None => (None, Some(error.clone()), AttemptOutcome::Failed, Disposition::Terminate),
            },
        };
        if outcome == AttemptOutcome::Failed {
            self.metrics.failed_permanently();
        }
        match outcome {
            AttemptOutcome::Delivered => tracing::info!(attempt, ?latency, "webhook delivered"),
            _ => tracing::warn!(
                attempt,
                ?latency,
                ?outcome,
                error = error.as_deref().unwrap_or(""),
                "webhook not delivered"
            ),
        }
        let record = WebhookAttempt {
            prediction_id: change.prediction_id.clone(),
            account_id: change.account_id.clone(),
            webhook_id,
            event: change.event,
            seq: change.seq,
            attempt,
            url: url.to_string(),
            status_code,
            latency_ms: latency.as_millis() as u64,
            error,
            outcome,
            at: DateTime::now(),
        };
        Outcome::Attempted { record, disposition }
    }
}
