//! Consuming jobs: one durable pull consumer per served model (`<P>_runner_<model>`, filter
//! `jobs.<owner>.<model>.*`), shared by every runner serving that model, so operators scale a
//! model by starting more runners for it.
//!
//! Which job starts when is the [`Scheduler`]'s choice: `RUNNER_CONCURRENCY` slots in this
//! process, `RUNNER_MODEL_CONCURRENCY` per model, shared fairly between busy models, and taken
//! only for a job that is there. Each consumer's job subjects are also subscribed to on core
//! NATS, as the doorbell that tells the scheduler a model has new work.
//!
//! While a job runs it sends in-progress acks every third of `ack_wait`; a runner that dies
//! stops them and the job is redelivered after `ack_wait`. A message that does not decode is
//! terminated at once (never redelivered) and logged.
//!
//! On shutdown the loops stop pulling; running jobs get `RUNNER_SHUTDOWN_GRACE_SECONDS` to
//! finish, then the rest are handed back (nak) for another runner.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use async_nats::jetstream::{
    AckKind, Message,
    consumer::{AckPolicy, PullConsumer, pull},
};
use common::{
    bus::{Bus, pull::acknowledge as ack},
    domain::ModelRef,
    messages::JobMessage,
    store::dead_letters::DeadLetters,
};
use futures::StreamExt;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::Instrument;

use crate::{
    config::RunnerConfig,
    execute::{Delivery, Executor, Outcome},
    models::{Model, ModelError},
    scheduler::{Lane, Scheduler, Slots},
};

/// What every job of this runner shares.
struct Shared {
    executor: Arc<Executor>,
    tracker: TaskTracker,
    handback: CancellationToken,
    ack_wait: Duration,
    max_deliver: i64,
    dead_letters: DeadLetters,
}

/// Consumes the jobs of every served model until `shutdown` fires, then drains.
pub async fn consume(
    config: &RunnerConfig,
    bus: &Bus,
    models: Vec<Arc<dyn Model>>,
    executor: Arc<Executor>,
    dead_letters: DeadLetters,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let subjects = bus.subjects();
    let stream = bus.jetstream().get_stream(subjects.jobs_stream()).await.context("opening the jobs stream")?;
    let shared = Arc::new(Shared {
        executor,
        tracker: TaskTracker::new(),
        handback: CancellationToken::new(),
        ack_wait: config.ack_wait,
        max_deliver: config.max_deliver,
        dead_letters,
    });
    let mut lanes = Vec::with_capacity(models.len());
    let mut served = std::collections::HashMap::new();
    for model in models {
        let name = subjects.runner_consumer(&model.descriptor().model);
        let consumer: PullConsumer = stream
            .create_consumer(pull::Config {
                durable_name: Some(name.clone()),
                filter_subject: subjects.model_jobs(&model.descriptor().model),
                ack_policy: AckPolicy::Explicit,
                ack_wait: config.ack_wait,
                max_deliver: config.max_deliver,
                ..Default::default()
            })
            .await
            .with_context(|| format!("creating consumer {name}"))?;
        tracing::info!(consumer = %name, model = %model.descriptor().model, "consuming jobs");
        lanes.push(Lane { model: model.descriptor().model.clone(), consumer });
        served.insert(model.descriptor().model.clone(), model);
    }
    let model_concurrency = config.model_concurrency.unwrap_or(config.concurrency);
    let scheduler = Arc::new(Scheduler::new(config.concurrency, model_concurrency, &config.model_weights, lanes));
    let mut doorbells =
        ring_doorbells(bus, served.keys().cloned().collect(), scheduler.clone(), shutdown.clone()).await?;
    scheduler
        .run(shutdown.clone(), |message, model, slots| {
            let model = served[model].clone();
            shared.tracker.spawn(handle(message, model, shared.clone(), slots));
        })
        .await;
    // The doorbells stop with `shutdown` too.
    while doorbells.join_next().await.is_some() {}

    shared.tracker.close();
    if tokio::time::timeout(config.shutdown_grace, shared.tracker.wait()).await.is_err() {
        tracing::warn!("running predictions did not finish within the grace period; handing them back");
        shared.handback.cancel();
        shared.tracker.wait().await;
    }
    tracing::info!("runner stopped");
    Ok(())
}

/// Subscribes to the job subjects of `models` (core NATS) and rings each model's lane in the
/// scheduler when a job is published, until `shutdown` fires.
async fn ring_doorbells(
    bus: &Bus,
    models: Vec<ModelRef>,
    scheduler: Arc<Scheduler>,
    shutdown: CancellationToken,
) -> anyhow::Result<tokio::task::JoinSet<()>> {
    let mut doorbells = tokio::task::JoinSet::new();
    for model in models {
        let mut jobs = bus
            .client()
            .subscribe(bus.subjects().model_jobs(&model))
            .await
            .with_context(|| format!("subscribing to the jobs of {model}"))?;
        let (scheduler, shutdown) = (scheduler.clone(), shutdown.clone());
        doorbells.spawn(async move {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    job = jobs.next() => match job {
                        Some(_) => scheduler.ring(&model),
                        None => return,
                    },
                }
            }
        });
    }
    Ok(doorbells)
}

async fn handle(message: Message, model: Arc<dyn Model>, shared: Arc<Shared>, _slots: Slots) {
    let job: JobMessage = match serde_json::from_slice(&message.payload) {
        Ok(job) => job,
        Err(e) => {
            tracing::error!(subject = %message.subject, error = %e, "undecodable job terminated and recorded");
            let recorded =
                shared.dead_letters.record("runner", &message.subject, &message.payload, &e.to_string()).await;
            if let Err(e) = recorded {
                tracing::warn!(error = %e, "dead letter not recorded");
            }
            ack(&message, AckKind::Term).await;
            return;
        }
    };
    let JobMessage::RunPredictionV1 { prediction_id, model: job_model } = job;
    let (stream_seq, delivered) = message.info().map(|i| (i.stream_sequence, i.delivered)).unwrap_or((0, 1));
    let span = tracing::info_span!("job", prediction_id = %prediction_id, model = %job_model);
    async {
        if job_model != model.descriptor().model {
            tracing::error!(served = %model.descriptor().model, "job for another model terminated");
            ack(&message, AckKind::Term).await;
            return;
        }
        let heartbeat = async {
            let mut tick = tokio::time::interval(shared.ack_wait / 3);
            tick.tick().await;
            loop {
                tick.tick().await;
                ack(&message, AckKind::Progress).await;
            }
        };
        let outcome = tokio::select! {
            outcome = shared.executor.execute(model.as_ref(), &prediction_id, Delivery { stream_seq }, &shared.handback) => outcome,
            () = heartbeat => unreachable!("the heartbeat never ends"),
        };
        match outcome {
            Outcome::Done => ack(&message, AckKind::Ack).await,
            Outcome::Retry { .. } if delivered >= shared.max_deliver => {
                let error = ModelError {
                    code: "JOB_RETRIES_EXHAUSTED".into(),
                    message: format!("The job failed {delivered} times on storage or messaging errors."),
                };
                if let Err(e) = shared.executor.give_up(&prediction_id, error).await {
                    tracing::error!(error = format!("{e:#}"), "could not record the failure; the reconciler will time it out");
                }
                ack(&message, AckKind::Term).await
            }
            Outcome::Retry { after } => ack(&message, AckKind::Nak(Some(after))).await,
            Outcome::HandBack => ack(&message, AckKind::Nak(None)).await,
        }
    }
    .instrument(span)
    .await;
}
