//! Consuming jobs: every lane (one durable consumer per model and account, see
//! [`crate::lanes`]) of every served model, shared by every runner serving that model, so
//! operators scale a model by starting more runners for it.
//!
//! Which job starts when is the [`Scheduler`]'s choice: `RUNNER_CONCURRENCY` slots in this
//! process, `RUNNER_MODEL_CONCURRENCY` per model, shared fairly between busy models and the
//! accounts of a model, and taken only for a job that is there.
//!
//! A job is held as a [`HeldMessage`]: while it runs it sends in-progress acks every third of
//! `ack_wait` (a runner that dies stops them and the job is redelivered after `ack_wait`), it is
//! settled only once its outcome is stored, and a message that does not decode is recorded and
//! terminated at once (never redelivered).
//!
//! On shutdown the loops stop pulling; running jobs get `RUNNER_SHUTDOWN_GRACE_SECONDS` to
//! finish, then the rest are handed back (nak) for another runner.

use std::{collections::HashMap, sync::Arc};

use anyhow::Context;
use async_nats::jetstream::{AckKind, Message};
use common::{
    bus::{Bus, heartbeat::Heartbeat, held::HeldMessage},
    domain::{JobKind, ModelRef},
    messages::JobMessage,
    store::{Store, dead_letters::DeadLetters},
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::Instrument;

use crate::{
    config::RunnerConfig,
    doorbell,
    execute::{Delivery, Executor, Outcome},
    lanes::Lanes,
    models::{Model, ModelError},
    scheduler::{
        Scheduler, Slots,
        account_slots::{self, AccountSlots},
    },
};

/// What every job of this runner shares.
struct Shared {
    executor: Arc<Executor>,
    tracker: TaskTracker,
    handback: CancellationToken,
    heartbeat: Heartbeat,
    max_deliver: i64,
    dead_letters: DeadLetters,
}

/// What a runner runs: its models, and the trainers of some of them (`RUNNER_COG_TRAIN`).
pub struct Runs {
    /// The served models.
    pub models: Vec<Arc<dyn Model>>,
    /// The trainers: of a served model, or alone (a runner of trainings only).
    pub trainers: Vec<Arc<dyn Model>>,
}

/// Consumes the jobs of every served model (and the trainings of its trainers) until
/// `shutdown` fires, then drains.
pub async fn consume(
    config: &RunnerConfig,
    bus: &Bus,
    runs: Runs,
    versions: &[common::store::runners::Served],
    executor: Arc<Executor>,
    store: &Store,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let (dead_letters, accounts) = (store.dead_letters(), store.accounts());
    let subjects = bus.subjects();
    let stream = bus.jetstream().get_stream(subjects.jobs_stream()).await.context("opening the jobs stream")?;
    let shared = Arc::new(Shared {
        executor,
        tracker: TaskTracker::new(),
        handback: CancellationToken::new(),
        heartbeat: Heartbeat::start(config.ack_wait / 3),
        max_deliver: config.max_deliver,
        dead_letters,
    });
    let Runs { models, trainers } = runs;
    let served: HashMap<ModelRef, Arc<dyn Model>> =
        models.into_iter().map(|m| (m.descriptor().model.clone(), m)).collect();
    let trainers: HashMap<ModelRef, Arc<dyn Model>> =
        trainers.into_iter().map(|m| (m.descriptor().model.clone(), m)).collect();
    let names: Vec<ModelRef> = served.keys().cloned().collect();
    let trained: Vec<ModelRef> = trainers.keys().cloned().collect();
    let lanes = Arc::new(Lanes::new(stream, subjects.clone(), config.ack_wait, config.max_deliver));
    let model_concurrency = config.model_concurrency.unwrap_or(config.concurrency);
    // A Cog project says how many of its jobs run at once (`concurrency.max`): its slots here.
    let own_slots: HashMap<ModelRef, usize> =
        served.iter().filter_map(|(name, model)| model.slots().map(|n| (name.clone(), n))).collect();
    let routes = versions.iter().map(|s| (s.model.clone(), s.version.clone())).collect();
    let scheduler = Scheduler::new(config.concurrency, &names, model_concurrency, &config.model_weights, lanes.clone())
        .with_model_slots(&own_slots)
        .with_routes(routes, config.hardware.clone())
        .with_trainers(&trained)
        .with_aging(config.priority_aging)
        .with_reconnects(bus.reconnects());
    let lease = account_slots::lease_for(config.ack_wait);
    let slots_bucket = bus.account_slots(lease).await.context("opening the account slots")?;
    let holder = format!("{}:{}", std::env::var("HOSTNAME").unwrap_or_else(|_| "runner".into()), std::process::id());
    let (account_slots, slots_kept) =
        AccountSlots::start(slots_bucket, accounts, lease, &holder, scheduler.waker(), shutdown.clone());
    let scheduler = Arc::new(scheduler.with_account_slots(account_slots));
    for model in &names {
        tracing::info!(%model, trainer = trainers.contains_key(model), "consuming jobs");
    }
    let metrics = shared.executor.metrics().clone();
    // The doorbells of every model whose jobs run here: its predictions, its trainings, or both.
    let mut rung = names;
    rung.extend(trained.iter().filter(|m| !served.contains_key(*m)).cloned());
    let mut announcers = doorbell::announce(bus, rung, scheduler.clone(), lanes, metrics, shutdown.clone()).await?;
    scheduler
        .run(shutdown.clone(), |message, lane, slots| {
            // The scheduler takes only lanes of served models, and trainings only of models
            // with a trainer here.
            let model = match lane.kind() {
                JobKind::Prediction => served[&lane.model].clone(),
                JobKind::Training => trainers[&lane.model].clone(),
            };
            shared.tracker.spawn(handle(message, model, shared.clone(), slots));
        })
        .await;
    // The doorbells and the scan stop with `shutdown` too.
    while announcers.join_next().await.is_some() {}

    shared.tracker.close();
    if tokio::time::timeout(config.shutdown_grace, shared.tracker.wait()).await.is_err() {
        tracing::warn!("running predictions did not finish within the grace period; handing them back");
        shared.handback.cancel();
        shared.tracker.wait().await;
    }
    // The account slots of the jobs that ran are freed by the keeper, which stops once the
    // scheduler (and with it every slot) is gone.
    drop(scheduler);
    if tokio::time::timeout(std::time::Duration::from_secs(2), slots_kept).await.is_err() {
        tracing::warn!("account slots not freed in time; they age out within the ack wait");
    }
    tracing::info!("runner stopped");
    Ok(())
}

async fn handle(message: Message, model: Arc<dyn Model>, shared: Arc<Shared>, _slots: Slots) {
    let Some(mut job) =
        HeldMessage::<JobMessage>::take(message, "runner", &shared.dead_letters, &shared.heartbeat).await
    else {
        return;
    };
    let JobMessage::RunPredictionV1 { prediction_id, model: job_model, model_input, prediction } = job.payload_mut();
    let (prediction_id, job_model) = (prediction_id.clone(), job_model.clone());
    let (model_input, prediction) = (model_input.take(), prediction.take());
    let (delivered, stream_seq) = job.delivery();
    let span = tracing::info_span!("job", prediction_id = %prediction_id, model = %job_model);
    common::trace_context::continue_trace(&span, job.trace_context());
    async {
        if job_model != model.descriptor().model {
            tracing::error!(served = %model.descriptor().model, "job for another model terminated");
            return job.settle(AckKind::Term).await;
        }
        let delivery = Delivery::new(stream_seq, model_input, prediction).numbered(delivered, shared.max_deliver);
        let execute = Box::pin(shared.executor.execute(model.as_ref(), &prediction_id, delivery, &shared.handback));
        let settle = match execute.await {
            Outcome::Done => AckKind::Ack,
            Outcome::Retry { .. } if delivered >= shared.max_deliver => {
                let error = ModelError {
                    code: "JOB_RETRIES_EXHAUSTED".into(),
                    message: format!("The job failed {delivered} times on storage or messaging errors."),
                };
                if let Err(e) = Box::pin(shared.executor.give_up(&prediction_id, error)).await {
                    tracing::error!(
                        error = format!("{e:#}"),
                        "could not record the failure; the reconciler will time it out"
                    );
                }
                AckKind::Term
            }
            Outcome::Retry { after } => AckKind::Nak(Some(after)),
            Outcome::HandBack => AckKind::Nak(None),
        };
        job.settle(settle).await;
    }
    .instrument(span)
    .await;
}
