//! A job delivered again while its prediction is `processing` under it (see [`super`], step
//! 1). That is a runner that stopped mid-run, or a runner that still runs it but whose
//! in-progress acks did not arrive in time (a JetStream leader election, a runner starved of
//! CPU): JetStream cannot tell them apart, and running it again in the second case runs the
//! model twice at once (a GPU's time, a training twice) and breaks the account's cap. So the
//! prediction records its holder (`held_by`, the runner's presence id), and this delivery
//! takes it over only once that runner is known gone:
//!
//! - it is asked over core NATS ([`common::messages::HolderQuery`] on its own subject): it
//!   answers whether it runs the prediction; an answer of no means it does not (its result
//!   is stored, or it gave the run up);
//! - no responders (a stopped process leaves no subscription) is taken as gone once its
//!   presence record is missing or [`SILENT_FOR`] old as well: a runner reconnecting to NATS
//!   has no subscription for a moment, but still writes its presence every 5 s;
//! - no answer in time (a frozen or cut-off machine, whose connection the server has not
//!   dropped yet) counts only once its presence is [`LOST_AFTER`] old.
//!
//! Until then this delivery watches, every [`WATCH_EVERY`], its message kept in progress like
//! any running job's: the prediction ending ends the job (its `completed` event republished,
//! deduplicated), and a holder known gone lets it take over, by a write conditional on that
//! holder (so two deliveries never both take over). On the job's last delivery a holder
//! known gone fails the prediction instead (`JOB_DELIVERIES_EXHAUSTED`, see
//! [`super::Delivery::numbered`]).

use std::time::Duration;

use anyhow::Context;
use bson::DateTime;
use common::{
    domain::{Prediction, PredictionStatus, WebhookEvent},
    messages::{Announcement, HolderAnswer, HolderQuery},
    store::runners::HEARTBEAT,
};
use tokio_util::sync::CancellationToken;

use super::Executor;

/// How often a watched prediction and its holder are looked at.
pub const WATCH_EVERY: Duration = Duration::from_secs(1);
/// How long a holder is given to answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);
/// How old the presence of a holder with no subscription must be for it to count as gone:
/// past its heartbeat (5 s) and a write's time.
pub const SILENT_FOR: Duration = Duration::from_secs(HEARTBEAT.as_secs() + 2);
/// How old the presence of a holder that does not answer must be for it to count as gone:
/// longer than a MongoDB election (about 12 s) keeps it from writing, twice over.
pub const LOST_AFTER: Duration = Duration::from_secs(30);

/// How watching a prediction held by another execution ended.
pub(super) enum Watched {
    /// Its holder is gone and this delivery now holds it: run it.
    TakenOver(Box<Prediction>),
    /// Nothing left to run (it ended, another runner holds it, or it failed here).
    Ended,
    /// The runner stops: hand the job back.
    Stopped,
}

/// What is known of a holder.
#[derive(Debug, PartialEq, Eq)]
enum Holder {
    Running,
    Gone,
    Unknown,
}

impl Executor {
    /// The job `job_seq` found `p` `processing` under it: watch it until it ends or its holder
    /// is known gone, then take it over (or, on the job's `last` delivery, fail it).
    /// `here_already`: another execution in this process runs it.
    pub(super) async fn settle_holder(
        &self,
        mut p: Prediction,
        job_seq: i64,
        last: Option<i64>,
        here_already: bool,
        stop: &CancellationToken,
    ) -> anyhow::Result<Watched> {
        loop {
            match self.holder(&p, here_already).await {
                Holder::Gone if last.is_some() => {
                    let delivered = last.unwrap_or_default();
                    tracing::error!(
                        delivered,
                        holder = ?p.held_by,
                        "prediction was processing on a runner that stopped, on every delivery of its job; it fails"
                    );
                    self.fail(&p, super::deliveries_exhausted(delivered)).await?;
                    return Ok(Watched::Ended);
                }
                Holder::Gone => {
                    let predictions = self.store.predictions();
                    let handed = predictions.hand_over(&p.id, job_seq, p.held_by.as_deref(), &self.runner_id).await;
                    if let Some(taken) = handed.context("taking the prediction over")? {
                        tracing::warn!(holder = ?p.held_by, "prediction was processing on a runner that stopped; taking it over");
                        return Ok(Watched::TakenOver(Box::new(taken)));
                    }
                    // Another delivery took it over first, or it moved on: looked at again.
                }
                Holder::Running | Holder::Unknown => {}
            }
            tokio::select! {
                () = stop.cancelled() => return Ok(Watched::Stopped),
                () = tokio::time::sleep(WATCH_EVERY) => {}
            }
            let Some(now) = self.store.predictions().get(&p.id).await.context("reading the prediction")? else {
                return Ok(Watched::Ended);
            };
            if now.status.is_terminal() {
                self.publish(&now, WebhookEvent::Completed, Announcement::Again).await?;
                return Ok(Watched::Ended);
            }
            if now.status != PredictionStatus::Processing || now.job_seq.is_some_and(|s| s != job_seq) {
                tracing::warn!(status = %now.status, "the watched prediction moved on elsewhere; dropped");
                return Ok(Watched::Ended);
            }
            p = now;
        }
    }

    /// What is known of `p`'s holder now.
    async fn holder(&self, p: &Prediction, here_already: bool) -> Holder {
        let Some(holder) = p.held_by.as_deref() else {
            // Started by a release that did not record holders: as it did, take it over.
            return Holder::Gone;
        };
        if holder == self.runner_id {
            // This process started it: it runs it still, or the attempt gave it up.
            return if here_already { Holder::Running } else { Holder::Gone };
        }
        let query = HolderQuery::HoldsPredictionV1 { prediction_id: p.id.clone() };
        let Ok(body) = serde_json::to_vec(&query) else { return Holder::Unknown };
        let subject = self.bus.subjects().runner_inquiries(holder);
        let asked = tokio::time::timeout(ASK_TIMEOUT, self.bus.client().request(subject, body.into())).await;
        let silent_for = match asked {
            Ok(Ok(reply)) => {
                return match serde_json::from_slice::<HolderAnswer>(&reply.payload) {
                    Ok(HolderAnswer::HoldsPredictionAnswerV1 { holds: true }) => Holder::Running,
                    Ok(HolderAnswer::HoldsPredictionAnswerV1 { holds: false }) => Holder::Gone,
                    Err(e) => {
                        tracing::warn!(holder, error = %e, "undecodable answer of the holder");
                        Holder::Unknown
                    }
                };
            }
            Ok(Err(e)) if e.kind() == async_nats::RequestErrorKind::NoResponders => SILENT_FOR,
            _ => LOST_AFTER,
        };
        match self.store.runners().seen_at(holder).await {
            Ok(None) => Holder::Gone,
            Ok(Some(seen)) if age(seen) >= silent_for => Holder::Gone,
            Ok(Some(_)) => Holder::Unknown,
            Err(e) => {
                tracing::warn!(holder, error = %e, "the holder's presence could not be read");
                Holder::Unknown
            }
        }
    }
}

/// How long ago `at` was (zero if it is ahead of this clock).
pub(crate) fn age(at: DateTime) -> Duration {
    Duration::from_millis(u64::try_from(DateTime::now().timestamp_millis() - at.timestamp_millis()).unwrap_or(0))
}
