//! Consuming status events: one durable consumer (`<P>_notifier`) shared by every notifier
//! replica, so each event is delivered by one replica in the normal case.
//!
//! **Retries are JetStream redeliveries.** A failed attempt is recorded in MongoDB and the
//! event message is nak'd with the schedule's delay; JetStream keeps it and delivers it again
//! after the delay, to whichever replica pulls next. Nothing about pending retries lives in a
//! notifier's memory, so a notifier killed between attempts loses nothing: the message is
//! simply delivered again (at the latest after `ack_wait`). The attempt number is the
//! message's delivery count. After the last attempt the delivery is recorded as failed and
//! the message terminated.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use async_nats::jetstream::{
    AckKind, Message,
    consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull},
};
use bson::DateTime;
use common::{
    bus::{
        Bus,
        pull::{acknowledge, pull_with_permits},
    },
    domain::WebhookUrl,
    messages::{PredictionChanged, StatusEvent},
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
    retry::RetrySchedule,
    secrets::SecretCache,
};

/// How long to wait before retrying when a dependency (MongoDB) failed before sending.
const DEPENDENCY_RETRY: Duration = Duration::from_secs(5);

/// What the notifier needs to deliver one event.
pub struct Notifier {
    /// Sends the requests.
    pub deliverer: Deliverer,
    /// Signing secrets by account.
    pub secrets: SecretCache,
    /// Where attempts are recorded.
    pub attempts: WebhookAttempts,
    /// When to retry.
    pub schedule: RetrySchedule,
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
            ack_wait: config.timeout + Duration::from_secs(20),
            ..Default::default()
        })
        .await
        .with_context(|| format!("creating consumer {name}"))?;
    tracing::info!(consumer = %name, "consuming status events");

    let tracker = TaskTracker::new();
    let permits = Arc::new(Semaphore::new(config.concurrency));
    pull_with_permits(consumer, permits, tracker.clone(), shutdown, move |message, permit| {
        handle(message, notifier.clone(), permit)
    })
    .await;
    tracker.close();
    if tokio::time::timeout(config.shutdown_grace, tracker.wait()).await.is_err() {
        tracing::warn!("deliveries still in flight after the grace period; they will be redelivered");
    }
    tracing::info!("notifier stopped");
    Ok(())
}

async fn handle(message: Message, notifier: Arc<Notifier>, _permit: OwnedSemaphorePermit) {
    let change = match serde_json::from_slice::<StatusEvent>(&message.payload) {
        Ok(StatusEvent::PredictionChangedV1(change)) => change,
        Err(e) => {
            tracing::error!(subject = %message.subject, error = %e, "undecodable status event terminated");
            acknowledge(&message, AckKind::Term).await;
            return;
        }
    };
    let span =
        tracing::info_span!("webhook", prediction_id = %change.prediction_id, event = %change.event, seq = change.seq);
    async {
        let Some(url) = change.webhook.clone() else {
            return acknowledge(&message, AckKind::Ack).await;
        };
        if !change.event.selected_by(change.webhook_events_filter.as_deref()) {
            return acknowledge(&message, AckKind::Ack).await;
        }
        let attempt = message.info().map(|i| i.delivered.max(1) as u32).unwrap_or(1);
        let kind = match notifier.attempt(&change, &url, attempt).await {
            Disposition::Ack => AckKind::Ack,
            Disposition::RetryAfter(delay) => AckKind::Nak(Some(delay)),
            Disposition::Terminate => AckKind::Term,
        };
        acknowledge(&message, kind).await;
    }
    .instrument(span)
    .await;
}

impl Notifier {
    async fn attempt(&self, change: &PredictionChanged, url: &WebhookUrl, attempt: u32) -> Disposition {
        let secrets = match self.secrets.get(&change.account_id).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = format!("{e:#}"), "signing secret unavailable; retrying");
                return Disposition::RetryAfter(DEPENDENCY_RETRY);
            }
        };
        let body = match serde_json::to_vec(&change.prediction) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(error = %e, "payload does not serialize; event dropped");
                return Disposition::Terminate;
            }
        };
        let webhook_id = change.message_id();
        let hook = Webhook { id: &webhook_id, event: change.event, seq: change.seq, url, body: &body };
        let (result, latency) = self.deliverer.send(&hook, &secrets.signing_at(DateTime::now())).await;

        let retry = |retry_after: Option<Duration>| {
            self.schedule
                .delay_after(attempt)
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
            AttemptResult::Failed { error } => match retry(None) {
                Some(d) => (None, Some(error.clone()), AttemptOutcome::WillRetry, Disposition::RetryAfter(d)),
                None => (None, Some(error.clone()), AttemptOutcome::Failed, Disposition::Terminate),
            },
        };
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
        if let Err(e) = self.attempts.record(&record).await {
            tracing::warn!(error = %e, "attempt not recorded");
        }
        disposition
    }
}
