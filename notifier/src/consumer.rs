//! Consuming status events: one durable consumer (`<P>_notifier`) shared by every notifier
//! replica, so each event is delivered by one replica in the normal case.
//!
//! **Retries are JetStream redeliveries.** A failed attempt is recorded in MongoDB and the
//! event message is nak'd with the schedule's delay; JetStream keeps it and delivers it again
//! after the delay, to whichever replica pulls next. Nothing about pending retries lives in a
//! notifier's memory, so a notifier killed between attempts loses nothing: the message is
//! simply delivered again (at the latest after `ack_wait`). The attempt number is one more
//! than the attempts made before: known from this replica's [`crate::ledger`] when it handled
//! every earlier delivery, else counted from the records of the event's `webhook-id`. Each
//! attempt's record is stored ([`crate::recorder`], several per write) before its message is
//! acknowledged or handed back. After the last attempt the
//! delivery is recorded as failed and the message terminated. Before sending, an event waits
//! for its turn in its prediction's sequence ([`crate::sequences`]) and for a slot at its target
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
use tokio::sync::Semaphore;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::Instrument;

use crate::{
    config::NotifierConfig,
    deliver::{AttemptResult, Deliverer, Webhook},
    ledger::DeliveryLedger,
    metrics::{BACKLOG_REFRESH, NotifierMetrics},
    pull::{Permits, pull_with_permits},
    recorder::AttemptRecorder,
    retry::RetrySchedule,
    secrets::SecretCache,
    sequences::{self, Sequence, Sequences, Verdict},
    stored_bodies::StoredBodies,
    targets::Targets,
};

/// How long to wait before retrying when a dependency (MongoDB) failed before sending.
const DEPENDENCY_RETRY: Duration = Duration::from_secs(5);
/// How much longer than the delivery timeout an event may stay unacknowledged before
/// JetStream hands it to another replica (a notifier that died mid-delivery); a held event
/// sends in-progress acks every third of that, however long it waits for its turn.
pub const ACK_MARGIN: Duration = Duration::from_secs(5);
/// How long a delivery to a target at its concurrency limit waits before it is tried again.
const TARGET_BUSY_RETRY: Duration = Duration::from_millis(500);

/// What the notifier needs to deliver one event.
pub struct Notifier {
    /// Sends the requests.
    pub deliverer: Deliverer,
    /// Signing secrets by account.
    pub secrets: SecretCache,
    /// Where attempts are counted (when the ledger does not know).
    pub attempts: WebhookAttempts,
    /// Stores attempt records, several per write.
    pub recorder: AttemptRecorder,
    /// This replica's memory of the deliveries it handed back.
    pub ledger: DeliveryLedger,
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
    tracker.spawn(report_backlog(consumer.clone(), notifier.metrics.clone(), shutdown.clone()));
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

/// Reads the consumer's backlog into the metrics every [`BACKLOG_REFRESH`] until `shutdown`.
async fn report_backlog(mut consumer: PullConsumer, metrics: NotifierMetrics, shutdown: CancellationToken) {
    loop {
        match tokio::time::timeout(BACKLOG_REFRESH, consumer.info()).await {
            Ok(Ok(info)) => metrics.set_backlog(info.num_pending, info.num_ack_pending, info.num_redelivered),
            Ok(Err(e)) => tracing::debug!(error = %e, "consumer info unavailable; backlog not updated"),
            Err(_) => tracing::debug!("consumer info did not answer; backlog not updated"),
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
        route(Arrival { delivery, announcement }, &notifier, change).instrument(span).await
    };
    event.settle(settle).await;
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
    let before = match notifier.attempts.count_for_webhook(&change.message_id()).await {
        Ok(n) => u32::try_from(n).unwrap_or(u32::MAX),
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

/// How an event's message reached this replica.
#[derive(Clone, Copy)]
struct Arrival {
    /// JetStream's delivery count (1 the first time).
    delivery: i64,
    /// Who published it (a `completed` event announced [`Announcement::Again`] may be a copy).
    announcement: Announcement,
}

/// Drops what needs no webhook (none set, filtered out, stale, superseded), then delivers the
/// event when its prediction's sequence gives it its turn; returns how to settle its message.
async fn route(arrival: Arrival, notifier: &Notifier, change: &DeliverableEvent) -> AckKind {
    let Some(url) = change.webhook.clone() else {
        return AckKind::Ack;
    };
    if !change.event.selected_by(change.webhook_events_filter.as_deref()) {
        return AckKind::Ack;
    }
    let Some(sequence) = notifier.sequences.enter(&change.prediction_id, change.event, change.seq) else {
        tracing::debug!("stale retry after the prediction's completed webhook; dropped");
        return AckKind::Ack;
    };
    let turn = sequence.turn().await;
    match sequence.verdict(change.event, change.seq) {
        Verdict::Superseded => {
            tracing::debug!("superseded by a newer state of the prediction; dropped");
            return AckKind::Ack;
        }
        Verdict::Deliver { wait } => sequences::wait_out(wait).await,
    }
    deliver(arrival, notifier, change, &url, &sequence, turn).await
}

/// In the event's turn: a slot at its target, its attempt number, the attempt. Then, with the
/// turn released, the attempt's record is stored; only then is the message acked (or handed
/// back for its retry). An attempt whose record could not be stored is handed back to be
/// made again, so no attempt goes unrecorded.
async fn deliver(
    Arrival { delivery, announcement }: Arrival,
    notifier: &Notifier,
    change: &DeliverableEvent,
    url: &WebhookUrl,
    sequence: &Sequence,
    turn: tokio::sync::MutexGuard<'_, ()>,
) -> AckKind {
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
                return AckKind::Ack;
            }
            Err(e) => {
                tracing::warn!(error = %e, "earlier attempts unknown; retrying");
                return AckKind::Nak(Some(DEPENDENCY_RETRY));
            }
        }
    }
    let Some(slot) = notifier.targets.acquire(url).await else {
        tracing::debug!("target at its concurrency limit; handed back for a moment");
        notifier.ledger.handed_back_unattempted(&webhook_id, delivery);
        return AckKind::Nak(Some(TARGET_BUSY_RETRY));
    };
    let before = match notifier.attempts_before(&webhook_id, delivery).await {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, "attempt count unavailable; retrying");
            notifier.ledger.handed_back_unattempted(&webhook_id, delivery);
            return AckKind::Nak(Some(DEPENDENCY_RETRY));
        }
    };
    let attempt = before.saturating_add(1);
    let (record, disposition) = match notifier.attempt(change, url, attempt, Retries::Scheduled).await {
        Outcome::Attempted { record, disposition } => (record, disposition),
        Outcome::NotAttempted(disposition) => {
            notifier.ledger.handed_back(&webhook_id, delivery, before);
            return disposition.ack_kind();
        }
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
        notifier.ledger.handed_back(&webhook_id, delivery, before);
        return AckKind::Nak(Some(DEPENDENCY_RETRY));
    }
    match disposition {
        Disposition::RetryAfter(_) => notifier.ledger.handed_back(&webhook_id, delivery, attempt),
        Disposition::Ack | Disposition::Terminate => notifier.ledger.finished(&webhook_id),
    }
    disposition.ack_kind()
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
    /// How many attempts of the event were made before delivery number `delivery` (handing a
    /// message back for a busy target is not an attempt): from this replica's ledger when it
    /// saw every earlier delivery, else counted from the records.
    async fn attempts_before(&self, webhook_id: &str, delivery: i64) -> Result<u32, common::store::StoreError> {
        if let Some(known) = self.ledger.attempts_before(webhook_id, delivery) {
            return Ok(known);
        }
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
