//! The answers this runner gives about the predictions it holds: on its own core-NATS subject
//! ([`common::subjects::Subjects::runner_inquiries`]) it answers each
//! [`common::messages::HolderQuery`] with whether the prediction runs here now. A runner that
//! got a job again while its prediction is `processing` here asks before it takes it over
//! (see [`crate::execute::holder`]); a stopped runner leaves no subscription, so the asker is
//! told no one responds. It answers until the runner's last job has ended (not only until
//! shutdown begins: jobs still run while the runner drains).

use std::sync::Arc;

use anyhow::Context;
use common::{
    bus::Bus,
    messages::{HolderAnswer, HolderQuery},
};
use futures::StreamExt;
use tokio::task::JoinHandle;

use crate::execute::Executor;

/// The answering task: it stops when this is dropped.
pub struct Answering(JoinHandle<()>);

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Subscribes as runner `runner_id` and answers from `executor` until the returned
/// [`Answering`] is dropped.
pub async fn serve(bus: &Bus, runner_id: &str, executor: Arc<Executor>) -> anyhow::Result<Answering> {
    let subject = bus.subjects().runner_inquiries(runner_id);
    let mut subscription =
        bus.client().subscribe(subject.clone()).await.with_context(|| format!("subscribing to {subject}"))?;
    let client = bus.client().clone();
    let task = tokio::spawn(async move {
        while let Some(message) = subscription.next().await {
            let Some(reply) = message.reply else { continue };
            let holds = match serde_json::from_slice::<HolderQuery>(&message.payload) {
                Ok(HolderQuery::HoldsPredictionV1 { prediction_id }) => executor.runs_here(&prediction_id),
                Err(e) => {
                    tracing::warn!(error = %e, "undecodable holder query ignored");
                    continue;
                }
            };
            let answer = HolderAnswer::HoldsPredictionAnswerV1 { holds };
            let Ok(body) = serde_json::to_vec(&answer) else { continue };
            if let Err(e) = client.publish(reply, body.into()).await {
                tracing::warn!(error = %e, "holder answer not sent");
            }
        }
    });
    Ok(Answering(task))
}
