//! Delivers the accounts' budget notices (`account.budget`, see
//! `common::store::budget_notices`): signed like every webhook (the account's secret,
//! `webhook-id` = the notice's id, the same on every attempt), to each receiver that asked for
//! them, at least once.
//!
//! Every [`LOOK_EVERY`] (and at once when the notifier starts) it claims the due notices one at
//! a time for [`LEASE`], attempts the receivers not yet delivered, and writes what came of it:
//! a receiver that failed is tried again after the retry schedule's next step, and given up
//! once the schedule is spent (or at once when it is refused as a private address). Several
//! notifier replicas share the notices through the claims; one that dies holding a notice
//! leaves it to be claimed again when the lease runs out. Notices are rare (two per account and
//! month at most), so one query every ten seconds is all they cost an idle notifier.

use std::{sync::Arc, time::Duration};

use bson::DateTime;
use common::{
    domain::WebhookEvent,
    store::budget_notices::{BudgetNotice, BudgetNotices},
};
use tokio_util::sync::CancellationToken;

use crate::{
    consumer::Notifier,
    deliver::{AttemptResult, Webhook},
};

/// How often due notices are looked for.
pub const LOOK_EVERY: Duration = Duration::from_secs(10);
/// How long a claim holds a notice past its last extension: a round extends it before each
/// attempt, so it must outlast one attempt (the delivery timeout) and the writes around it.
pub const LEASE: Duration = Duration::from_secs(120);

/// Delivers due notices until `shutdown` fires.
pub async fn deliver_due(notifier: Arc<Notifier>, notices: BudgetNotices, shutdown: CancellationToken) {
    loop {
        loop {
            let now = DateTime::now();
            match notices.claim_due(now, later(LEASE)).await {
                Ok(Some(mut notice)) => {
                    deliver(&notifier, &notices, &mut notice).await;
                    match notices.settle(&notice).await {
                        Ok(true) => {}
                        Ok(false) => {
                            tracing::warn!(notice = %notice.id, "budget notice's claim lost before it was settled; its holder settles it")
                        }
                        Err(e) => {
                            tracing::warn!(notice = %notice.id, error = %e, "budget notice not settled; delivered again after its lease")
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "budget notices unavailable; looking again later");
                    break;
                }
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(LOOK_EVERY) => {}
        }
    }
}

/// One round of attempts of `notice`: each receiver not yet delivered or given up, the claim
/// extended before each (a round ends early, its attempts so far kept, if the claim is lost);
/// then when the next round is due, or that the notice is done.
async fn deliver(notifier: &Notifier, notices: &BudgetNotices, notice: &mut BudgetNotice) {
    let secrets = match notifier.secrets.get(&notice.account_id).await {
        Ok(secrets) => secrets,
        Err(e) => {
            tracing::warn!(notice = %notice.id, error = format!("{e:#}"), "signing secret unavailable; trying later");
            notice.next_at = later(LOOK_EVERY);
            return;
        }
    };
    let body = serde_json::to_vec(&notice.body()).unwrap_or_default();
    let mut next: Option<Duration> = None;
    let waiting: Vec<usize> =
        (0..notice.targets.len()).filter(|&i| !notice.targets[i].delivered && !notice.targets[i].given_up).collect();
    for i in waiting {
        match notices.extend(notice, later(LEASE)).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(notice = %notice.id, "budget notice's claim lost mid-round; its new holder goes on");
                return;
            }
            Err(e) => {
                tracing::warn!(notice = %notice.id, error = %e, "budget notice's claim not extended; the round stops here");
                notice.next_at = later(LOOK_EVERY);
                return;
            }
        }
        let target = &mut notice.targets[i];
        target.attempts += 1;
        let hook = Webhook {
            id: &notice.id,
            event: WebhookEvent::AccountBudget,
            seq: i64::from(notice.threshold),
            url: &target.url,
            body: &body,
        };
        let signing = secrets.signing_at(DateTime::now());
        let (result, latency) = notifier.deliverer.send(&hook, &signing).await;
        let retry = notifier.schedule.delay_after(target.attempts);
        match &result {
            AttemptResult::Delivered { .. } => target.delivered = true,
            AttemptResult::Refused { reason } => {
                tracing::warn!(notice = %notice.id, url = %target.url, reason, "budget notice refused for its target; given up");
                target.given_up = true;
            }
            AttemptResult::Rejected { .. } | AttemptResult::Failed { .. } => match retry {
                Some(delay) => next = Some(next.map_or(delay, |n| n.min(delay))),
                None => target.given_up = true,
            },
        }
        tracing::info!(notice = %notice.id, url = %target.url, attempt = target.attempts, ?result, ?latency, "budget notice attempted");
    }
    notice.done = notice.targets.iter().all(|t| t.delivered || t.given_up);
    notice.next_at = later(next.unwrap_or(LOOK_EVERY));
}

/// Now plus `delay`.
fn later(delay: Duration) -> DateTime {
    DateTime::from_millis(DateTime::now().timestamp_millis() + i64::try_from(delay.as_millis()).unwrap_or(i64::MAX))
}
