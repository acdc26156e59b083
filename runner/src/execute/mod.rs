//! One job through the status machine.
//!
//! 0. A model whose server is not up boots first, the prediction `starting` meanwhile with
//!    the boot's log stored in it as it grows (`boot`); a boot that fails fails it.
//! 1. `starting → processing` (conditional), recording the job message's stream sequence and
//!    this runner as its holder.
//!    When the job carries the prediction as created, the change is conditional on its `seq`
//!    too and reads nothing back (it goes beside other predictions' changes, see
//!    [`crate::group_update::GroupUpdate`]); the runner applies it to the job's copy. Otherwise, or
//!    if that copy is no longer current, the change returns the stored prediction. If that
//!    fails too the prediction is read: terminal → its `completed` event is republished
//!    (JetStream drops it if the first got through) and the job is done; `processing` with this
//!    message's sequence → this is a redelivery, and it is watched until it ends or its holder
//!    is known to have stopped, then taken over and run again ([`holder`]); `processing` under another message → a
//!    duplicate job, dropped; missing → the job is dropped.
//!    When the job message carries the model's input (small inputs do), the model starts at
//!    once, beside this write, and is dropped if the write finds nothing to run: the write is
//!    a MongoDB round trip the model need not wait for.
//! 2. The model runs, its `start` event published once step 1 is stored (acknowledged before
//!    step 3, so `completed` never overtakes it); logs and output are stored at most every [`FLUSH_INTERVAL`], each store
//!    followed by `output`/`logs` events. The run stops at once when a cancel broadcast names
//!    the prediction ([`Executor::cancel`]), and when a flush or a status check (every
//!    [`STATUS_CHECK_INTERVAL`] without a flush, in case a broadcast was missed) finds it no
//!    longer `processing`; the runner then publishes the ended prediction's `completed` event
//!    as well (the api's copy of it is deduplicated; this one covers an api publish that failed).
//! 3. `processing → succeeded | failed` with output, logs, error, metrics and `completed_at`,
//!    conditional on the change sequence this runner last wrote, so nothing is read back (and
//!    the write shares a command with other predictions' changes) and the event carries this
//!    runner's copy with the change applied (if the sequence moved,
//!    e.g. a cancel, the conditional change on the status decides and returns the stored
//!    prediction); then the `completed` event. If that event cannot be published the job is
//!    retried, which republishes it (step 1).
//!
//! 4. At the deadline the model call is dropped and the prediction ends as its deadline says
//!    ([`common::domain::deadline`]): the service's limit fails it with `PREDICTION_TIMEOUT`,
//!    the client's `Cancel-After` cancels it (charged for its run). A prediction already past
//!    its deadline ends as soon as it is taken: one whose client's deadline passed while it
//!    waited never runs (`PREDICTION_DEADLINE_BEFORE_START`, not charged).
//!
//! Every stored change is followed by its event, never the other way round.
//!
//! Also here:
//! - [`begin`]: step 1 of a job.
//! - [`finish`]: step 3 of a job.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicI64, Ordering},
    },
    time::Duration,
};

use anyhow::Context;
use bson::{DateTime, doc};
use common::{
    bus::Bus,
    config::Deadlines,
    domain::secret_inputs,
    domain::{
        DeadlineEnd, Pool, Prediction, PredictionId, PredictionStatus, Price, WebhookEvent, deadline,
        route::DEFAULT_POOL,
    },
    files::{Files, payloads::Payloads},
    lane::Lane,
    links::Links,
    messages::{Announcement, PredictionChanged},
    store::{Batching, Store, queue_lanes},
    usage::{self, UsageLedger},
};
use futures::{FutureExt, future::BoxFuture};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::{
    flush_clock::FlushClock,
    group_update::GroupUpdate,
    lane_marks::LaneMarks,
    metrics::RunnerMetrics,
    models::{
        Model, ModelError, ModelOutput, Progress,
        file_inputs::{self, FileAccess, FileInputs, NamedFiles},
    },
    price_board::PriceBoard,
    progress::{Changes, Limits, RunOwner},
    run_figures::RunFigures,
};

/// How often logs and output of a running model are stored at most.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(500);
/// How often a running prediction's status is read when nothing was flushed meanwhile.
pub const STATUS_CHECK_INTERVAL: Duration = Duration::from_secs(2);
/// How long a job waits before it is retried after a storage or messaging failure.
pub const RETRY_DELAY: Duration = Duration::from_secs(2);

/// A model's run on one input, as the executor drives it.
mod begin;
mod boot;
mod finish;
pub mod holder;
mod output_files;
mod training;

type ModelCall<'a> = BoxFuture<'a, Result<ModelOutput, ModelError>>;

/// The job message being executed.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// Its sequence in the jobs stream (the same on every redelivery).
    pub stream_seq: u64,
    /// The model input it carries, if any (see [`common::messages::JobMessage`]).
    pub model_input: Option<Map<String, Value>>,
    /// The prediction as its creator stored it, if the job carries it.
    pub created: Option<Box<Prediction>>,
    /// `Some(n)` when this is the job's last delivery (`RUNNER_MAX_DELIVER`), its `n`-th:
    /// see [`Delivery::numbered`].
    pub last: Option<i64>,
    /// Whether the job was delivered before (its prediction may be running elsewhere still).
    pub again: bool,
}

impl Delivery {
    /// The delivery of job `stream_seq` with what the job carries: the model input is taken
    /// from the prediction when the job carries that.
    pub fn new(stream_seq: u64, model_input: Option<Map<String, Value>>, created: Option<Box<Prediction>>) -> Self {
        let model_input = model_input.or_else(|| created.as_ref().and_then(|p| p.model_input.as_object().cloned()));
        Self { stream_seq, model_input, created, last: None, again: false }
    }

    /// This delivery is the job's `delivered`-th of at most `max_deliver`. The last one of a
    /// job found `processing` (its runner stopped while running it on every delivery before:
    /// a job that kills its runner, say) does not run it again: the prediction fails with
    /// [`deliveries_exhausted`] and the job is removed, where JetStream would otherwise keep
    /// it undelivered and the prediction `processing` until its deadline.
    pub fn numbered(self, delivered: i64, max_deliver: i64) -> Self {
        let last = (delivered > 1 && delivered >= max_deliver).then_some(delivered);
        Self { last, again: delivered > 1, ..self }
    }
}

/// The error of a prediction whose runner stopped while running it on every delivery of its
/// job but the last, `delivered` in all.
pub fn deliveries_exhausted(delivered: i64) -> ModelError {
    ModelError {
        code: "JOB_DELIVERIES_EXHAUSTED".into(),
        message: format!(
            "Its runner stopped while running it on {} deliveries of its job; it is not run again.",
            delivered - 1
        ),
    }
}

/// The first pause before a result that could not be stored is stored again, and the
/// longest (the pause doubles between tries).
const SAVE_PAUSE: Duration = Duration::from_millis(500);
const SAVE_PAUSE_MAX: Duration = Duration::from_secs(10);

/// What to do with the job message after executing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Finished (or nothing left to do): ack.
    Done,
    /// A dependency failed: deliver again after `after`.
    Retry {
        /// The delay.
        after: Duration,
    },
    /// The runner is shutting down: hand the job back for another runner now.
    HandBack,
}

/// Executes jobs; shared by every consumer of a runner.
pub struct Executor {
    store: Store,
    bus: Bus,
    /// Builds the links in status events and the URLs of output files.
    links: Links,
    /// The deadlines of jobs stored without one, by kind.
    default_deadlines: Deadlines,
    /// The predictions running here, each with the token that aborts it.
    running: Mutex<HashMap<PredictionId, CancellationToken>>,
    /// What `/metrics` shows of the runs.
    metrics: RunnerMetrics,
    /// When running predictions store their progress.
    flush_clock: FlushClock,
    /// Writes the state changes that need nothing read back (a start from the prediction the
    /// job carries, a result at the runner's last change), several per command under load.
    changes: GroupUpdate,
    /// Resolves file inputs before a model runs.
    file_inputs: FileInputs,
    /// Where output files go.
    files: Files,
    /// Predictions' values too large for their documents, in the file store.
    payloads: Payloads,
    /// Counts the predictions this runner ends in the usage totals.
    usage: UsageLedger,
    /// The most logs and text output a prediction keeps.
    limits: Limits,
    /// Gathers the marks of started tickets for their queue lanes.
    lane_marks: LaneMarks,
    /// What runs here of each model, and its recent run times (reported with the presence).
    figures: Arc<RunFigures>,
    /// This runner's pool and its price, recorded on each job it starts.
    prices: PriceBoard,
    /// This runner's presence id, recorded as the holder of each prediction it starts.
    runner_id: String,
}

/// How state changes that read nothing back are gathered: what is queued while two writes
/// run goes in the next command (a quiet runner writes each at once). Under load each
/// command carries several, and the driver's and the database's per-command work is paid
/// once for all of them.
const CHANGE_WRITES: Batching = Batching { linger: Duration::ZERO, max_batch: 64, max_in_flight: 2 };

/// Keeps a prediction in [`Executor::running`] while it runs.
struct Running<'a> {
    executor: &'a Executor,
    id: PredictionId,
    canceled: CancellationToken,
    /// Another execution of this process had registered it already (a redelivery of a job
    /// that runs here): that one stays registered, and this one leaves it so.
    duplicate: bool,
}

impl<'a> Running<'a> {
    fn register(executor: &'a Executor, id: &PredictionId) -> Self {
        let canceled = CancellationToken::new();
        let mut running = executor.running.lock().unwrap_or_else(|p| p.into_inner());
        let duplicate = running.contains_key(id);
        if !duplicate {
            running.insert(id.clone(), canceled.clone());
        }
        Self { executor, id: id.clone(), canceled, duplicate }
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if !self.duplicate {
            self.executor.running.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.id);
        }
    }
}

impl Executor {
    /// An executor writing to `store` and `files` and publishing on `bus`, with URLs from
    /// `links`.
    pub fn new(store: Store, bus: Bus, files: Files, links: Links, default_deadlines: Deadlines) -> Self {
        let running = Mutex::new(HashMap::new());
        let flush_clock = FlushClock::start(FLUSH_INTERVAL);
        let changes = GroupUpdate::start(store.predictions().collection(), CHANGE_WRITES);
        let lane_marks = LaneMarks::start(store.queue_lanes(), queue_lanes::START_MARK_INTERVAL);
        let file_inputs = FileInputs::new(files.clone(), links.clone());
        let usage = UsageLedger::start(&store);
        Self {
            store,
            bus,
            links,
            default_deadlines,
            running,
            metrics: RunnerMetrics::new(),
            flush_clock,
            changes,
            file_inputs,
            payloads: Payloads::new(files.clone()),
            files,
            usage,
            limits: Limits::default(),
            lane_marks,
            figures: Arc::default(),
            prices: PriceBoard::fixed(Pool::parse(DEFAULT_POOL).expect("the default pool is valid"), Price::FREE),
            runner_id: crate::presence::runner_id(),
        }
    }

    /// Records `runner_id` (this runner's presence id) as the holder of each prediction it
    /// starts.
    pub fn with_runner_id(mut self, runner_id: String) -> Self {
        self.runner_id = runner_id;
        self
    }

    /// Whether prediction `id` runs in this process now (what the holder's answer says, see
    /// [`holder`]).
    pub fn runs_here(&self, id: &PredictionId) -> bool {
        self.running.lock().unwrap_or_else(|p| p.into_inner()).contains_key(id)
    }

    /// Counts into `metrics` (shared with the Cog uploads' receiver).
    pub fn with_metrics(mut self, metrics: RunnerMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Records `prices` (this runner's pool and its price) on each job it starts.
    pub fn with_prices(mut self, prices: PriceBoard) -> Self {
        self.prices = prices;
        self
    }

    /// This runner's usage ledger (its sweep recovers what dead writers left).
    pub fn usage(&self) -> &UsageLedger {
        &self.usage
    }

    /// What runs here of each model, and its recent run times.
    pub fn run_figures(&self) -> Arc<RunFigures> {
        self.figures.clone()
    }

    /// Keeps each prediction's logs and text output within `limits`.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Its metrics.
    pub fn metrics(&self) -> &RunnerMetrics {
        &self.metrics
    }

    /// The links its events carry.
    pub fn links(&self) -> &Links {
        &self.links
    }

    /// The files `p`'s input names, signed for until its deadline (and a minute more).
    fn named_files(&self, p: &Prediction) -> NamedFiles {
        let until = DateTime::now().timestamp_millis() / 1000 + self.time_left(p).as_secs() as i64 + 60;
        let weights = p.trained_version.as_ref().and_then(|t| t.weights.clone());
        NamedFiles { account: p.account_id.clone(), files: p.input_files.clone(), until, weights }
    }

    /// `p`'s model input with its sealed secret inputs opened (once), their values kept out of
    /// the logs `progress` stores.
    fn opened_input(&self, p: &Prediction, progress: &Progress) -> anyhow::Result<Map<String, Value>> {
        let input = p.opened_model_input(self.links.master_key()).context("opening its secret inputs")?;
        progress.set_secrets(p.secret_values(&input));
        Ok(input)
    }

    /// Whether any string of `input` is the URL of a file of this service.
    fn names_files(&self, input: &Map<String, Value>) -> bool {
        let named = |v: &Value| v.as_str().is_some_and(|s| self.links.file_named_by(s).is_some());
        input.values().any(|v| named(v) || v.as_array().is_some_and(|items| items.iter().any(named)))
    }

    /// The time left before the prediction's deadline (zero when it has passed).
    fn time_left(&self, p: &Prediction) -> Duration {
        let default = self.default_deadlines.of(p.kind);
        let default_ms = i64::try_from(default.as_millis()).unwrap_or(i64::MAX);
        let deadline =
            p.deadline_at.map_or(p.created_at.timestamp_millis().saturating_add(default_ms), |d| d.timestamp_millis());
        let left = deadline - DateTime::now().timestamp_millis();
        Duration::from_millis(u64::try_from(left).unwrap_or(0))
    }

    /// Ends a prediction that has not ended with `error` (from the status it was read in):
    /// `failed`, or `canceled` for a client's deadline ([`common::domain::deadline`]); returns
    /// it after the change, or `None` if it changed meanwhile.
    pub async fn fail(&self, p: &Prediction, error: ModelError) -> anyhow::Result<Option<Prediction>> {
        let completed_at = self.store.clock().now();
        let metrics = p.metrics_at(completed_at);
        let status = deadline::status_of_error(&error.code);
        let mut changes = doc! {
            "completed_at": completed_at,
            "metrics": bson::to_bson(&metrics)?,
            "error": { "code": &error.code, "message": &error.message },
        };
        usage::mark_pending(&mut changes);
        let failed = self.store.predictions().transition_from(&p.id, p.status, status, changes).await?;
        if let Some(done) = &failed {
            self.usage.record(done);
            if p.status == PredictionStatus::Starting {
                self.store.queue_lanes().give_back(p).await;
            }
            tracing::info!(prediction_id = %p.id, code = %error.code, %status, "prediction ended");
            self.publish(done, WebhookEvent::Completed, Announcement::First).await?;
        }
        Ok(failed)
    }

    /// Marks `p`'s ticket started in its queue lane (written with the lane's other marks, see
    /// [`crate::lane_marks`]).
    fn mark_started(&self, p: &Prediction) {
        if let Some(ticket) = p.queue_ticket {
            self.lane_marks.started(Lane::of(p), ticket);
        }
    }

    /// Fails prediction `id` because its job will not be delivered again.
    pub async fn give_up(&self, id: &PredictionId, error: ModelError) -> anyhow::Result<()> {
        if let Some(p) = self.store.predictions().get(id).await?.filter(|p| !p.status.is_terminal()) {
            self.fail(&p, error).await?;
        }
        Ok(())
    }

    /// Aborts the model call of prediction `id` if it runs here; returns whether it did.
    pub fn cancel(&self, id: &PredictionId) -> bool {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.get(id).map(CancellationToken::cancel).is_some()
    }

    /// Runs the prediction `id` on `model`; `stop` fires when the job must be handed back.
    pub async fn execute(
        &self,
        model: &dyn Model,
        id: &PredictionId,
        delivery: Delivery,
        stop: &CancellationToken,
    ) -> Outcome {
        match self.try_execute(model, id, delivery, stop).await {
            Ok(outcome) => outcome,
            Err(e) => {
                tracing::warn!(error = format!("{e:#}"), "job failed on a dependency; it will be retried");
                Outcome::Retry { after: RETRY_DELAY }
            }
        }
    }

    async fn try_execute(
        &self,
        model: &dyn Model,
        id: &PredictionId,
        delivery: Delivery,
        stop: &CancellationToken,
    ) -> anyhow::Result<Outcome> {
        // The steps' futures are boxed (`Box::pin`): a job's future is moved whole when it is
        // spawned and polled, and unboxed they made it 36 KB, copied on every move (memmove
        // was 9 % of the runner's profile); boxed, each step costs one allocation instead.
        let progress = Progress::with_limits(self.limits);
        // Registered before the model may start, so a cancel broadcast finds it from then on.
        let running = Running::register(self, id);
        let model_name = model.descriptor().model.to_string();
        let uri_fields = file_inputs::uri_fields(&model.descriptor().input_schema);
        let call = |input: Map<String, Value>, named: NamedFiles| -> ModelCall<'_> {
            let (progress, uri_fields) = (&progress, &uri_fields);
            let run = async move {
                let input = if named.files.is_empty() && model.file_access() == FileAccess::Url {
                    input
                } else {
                    self.file_inputs.resolve(input, &named, model.file_access(), uri_fields).await?
                };
                model.run(input, progress).await
            };
            run.instrument(tracing::info_span!("model_call", model = %model_name)).boxed()
        };
        // A prediction whose client's deadline passed while it waited never runs, nor boots
        // its model: it is canceled as it stands (`PREDICTION_DEADLINE_BEFORE_START`).
        if let Some(created) = delivery.created.as_deref()
            && created.deadline_asked
            && self.time_left(created).is_zero()
        {
            let aborted = ModelError::deadline(DeadlineEnd::Aborted);
            if self.fail(created, aborted).await?.is_some() {
                tracing::info!("its client's deadline passed before it started; not run");
                return Ok(Outcome::Done);
            }
        }
        // A model whose server is not up boots first: its prediction stays `starting` while it
        // does, and one that cannot boot fails it (`MODEL_SETUP_FAILED`) instead of leaving it
        // waiting. A runner that stops meanwhile hands the job back.
        // Its logs then begin with the boot it waited for: its start and the setup's output.
        if let Some(preparing) = model.prepare() {
            tokio::select! {
                prepared = self.await_boot(id, model, preparing, &progress) => if let Err(e) = prepared {
                    tracing::warn!(error = %e, "the model did not boot; the prediction fails");
                    Box::pin(self.give_up(id, e)).await?;
                    return Ok(Outcome::Done);
                },
                () = stop.cancelled() => return Ok(Outcome::HandBack),
            }
            if let Some(boot) = model.boot_log() {
                progress.set_preamble(&boot);
            }
        }
        // A model starts beside step 1 only when the job says which files its input names, and
        // never on a job's last delivery (step 1 may decide not to run it).
        // Nor on a redelivery: its prediction may still run on the runner that had it.
        // A secret input is sealed in the prediction: only a job that carries the prediction
        // can open it for an early start.
        let masked = |input: &Map<String, Value>| input.values().any(|v| v.as_str() == Some(secret_inputs::MASK));
        let early_call = match (delivery.model_input, &delivery.created) {
            _ if delivery.last.is_some() || delivery.again => None,
            (Some(_), Some(created)) if !created.sealed_inputs.is_empty() => {
                Some(call(self.opened_input(created, &progress)?, self.named_files(created)))
            }
            (Some(input), Some(created)) => Some(call(input, self.named_files(created))),
            (Some(input), None) if !self.names_files(&input) && !masked(&input) => {
                Some(call(input, NamedFiles::none()))
            }
            _ => None,
        };
        // Nothing to run: a model started early is dropped in there, which aborts it.
        let begin = self.begin_beside(id, delivery.stream_seq, delivery.created, early_call);
        let (prediction, just_started, early_call) = match Box::pin(begin).await? {
            (begin::Begun::Run(p, just_started), early_call) => (p, just_started, early_call),
            (begin::Begun::Nothing, _) => return Ok(Outcome::Done),
            (begin::Begun::Held(p), _) => {
                let job_seq = i64::try_from(delivery.stream_seq).unwrap_or(i64::MAX);
                let settled = self.settle_holder(p, job_seq, delivery.last, running.duplicate, stop);
                match Box::pin(settled).await? {
                    holder::Watched::TakenOver(p) => (*p, false, None),
                    holder::Watched::Ended => return Ok(Outcome::Done),
                    holder::Watched::Stopped => return Ok(Outcome::HandBack),
                }
            }
        };
        // Its input read back from the file store, if it was too large for its document: the
        // model gets it, and every event shows it.
        let prediction = self.payloads.whole(prediction).await.context("reading the spilled input")?;
        // Whose job it is: the files the model sends belong to its account, and go with a
        // prediction's data (a training's weights stay while their version does).
        progress.set_owner(RunOwner {
            account_id: prediction.account_id.clone(),
            prediction_id: (!prediction.is_training()).then(|| prediction.id.clone()),
        });
        // Its secret inputs, opened for the model only, and kept out of the logs it stores.
        let model_call = match early_call {
            Some(started) => started,
            None if prediction.sealed_inputs.is_empty() => {
                call(prediction.model_input.as_object().cloned().unwrap_or_default(), self.named_files(&prediction))
            }
            None => call(self.opened_input(&prediction, &progress)?, self.named_files(&prediction)),
        };
        let flight = self.metrics.started(&model_name);
        let running_here = self.figures.started(&model.descriptor().model);
        if just_started && let Some(started_at) = prediction.started_at {
            let waited_ms = started_at.timestamp_millis() - prediction.created_at.timestamp_millis();
            self.metrics.waited(&model_name, waited_ms as f64 / 1000.0);
        }
        // The `start` event goes out while the model already runs: its stream acknowledgement
        // (about 0.35 ms here) need not delay the model. It is awaited before the result is
        // stored, so `completed` never overtakes it.
        let announce_start = async {
            if just_started
                && let Err(e) = Box::pin(self.publish(&prediction, WebhookEvent::Start, Announcement::First))
                    .instrument(tracing::info_span!("publish_start"))
                    .await
            {
                tracing::warn!(error = %e, "start event not published");
            }
        };
        let time_left = self.time_left(&prediction);
        // The prediction's change sequence as this runner last wrote it (its progress writes
        // move it): the last state change is written only if nothing else moved it since.
        let seq = AtomicI64::new(prediction.seq);
        let ran = |outcome: &str| self.metrics.ran(&model_name, outcome, flight.started);
        let result = tokio::select! {
            // The deadline first: a prediction taken past it fails even if a model started
            // beside step 1 has already answered.
            biased;
            () = tokio::time::sleep(time_left) => {
                tracing::info!("deadline reached; model call dropped");
                // Past it when taken: the model never ran for the client.
                let end = if time_left.is_zero() && just_started { DeadlineEnd::of(prediction.deadline_asked, false) } else { prediction.deadline_end() };
                Err(ModelError::deadline(end))
            }
            (result, ()) = async { tokio::join!(model_call, announce_start) } => result,
            () = running.canceled.cancelled() => {
                tracing::info!("prediction canceled; model call aborted");
                ran("canceled");
                Box::pin(self.announce_ended_elsewhere(id)).await?;
                return Ok(Outcome::Done);
            }
            () = Box::pin(self.flush_while_running(id, &progress, &seq)) => {
                tracing::info!("prediction left processing while running (canceled); model stopped");
                ran("canceled");
                Box::pin(self.announce_ended_elsewhere(id)).await?;
                return Ok(Outcome::Done);
            }
            () = stop.cancelled() => {
                tracing::info!("shutting down; job handed back");
                ran("handed_back");
                return Ok(Outcome::HandBack);
            }
        };
        ran(match &result {
            Ok(_) => "succeeded",
            Err(e) if DeadlineEnd::from_code(&e.code).is_some() => "timeout",
            Err(_) => "failed",
        });
        if result.is_ok() {
            self.figures.succeeded(&model.descriptor().model, flight.started.elapsed().as_secs_f64());
        }
        drop(running_here);
        // A result is stored until it is: the model never runs again because storing failed.
        // Only a shutdown hands the job back unstored (another runner then runs it again).
        let completed_at = self.store.clock().now();
        let mut pause = SAVE_PAUSE;
        loop {
            let at = seq.load(Ordering::Acquire);
            match Box::pin(self.finish(&prediction, at, result.clone(), &progress, completed_at)).await {
                Ok(()) => break,
                Err(e) => tracing::warn!(
                    error = format!("{e:#}"),
                    retry_in_ms = pause.as_millis() as u64,
                    "the result was not stored; storing it again (the model does not run again)"
                ),
            }
            tokio::select! {
                () = stop.cancelled() => {
                    tracing::warn!("shutting down with the result unstored; job handed back");
                    return Ok(Outcome::HandBack);
                }
                () = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(SAVE_PAUSE_MAX);
        }
        drop(flight);
        Ok(Outcome::Done)
    }

    /// Step 2: stores progress on each tick of the runner's [`FlushClock`] (every
    /// [`FLUSH_INTERVAL`]), and reads the status when nothing was stored for
    /// [`STATUS_CHECK_INTERVAL`] (a model that stays silent still notices a cancel whose
    /// broadcast it missed); returns when the prediction is no longer `processing`.
    async fn flush_while_running(&self, id: &PredictionId, progress: &Progress, seq: &AtomicI64) {
        let mut ticks = self.flush_clock.ticks();
        let mut known_processing = tokio::time::Instant::now();
        loop {
            ticks.next().await;
            let still_processing = match progress.take_changes() {
                Some(changes) => self.store_progress(id, changes, seq).await,
                None if known_processing.elapsed() >= STATUS_CHECK_INTERVAL => self.is_processing(id).await,
                None => continue,
            };
            match still_processing {
                Ok(true) => known_processing = tokio::time::Instant::now(),
                Ok(false) => return,
                Err(e) => tracing::warn!(error = format!("{e:#}"), "progress or status not read; trying again"),
            }
        }
    }

    /// Whether the prediction is still `processing` (the status check).
    async fn is_processing(&self, id: &PredictionId) -> anyhow::Result<bool> {
        let status = self.store.predictions().status(id).await.context("reading the status")?;
        Ok(status == Some(PredictionStatus::Processing))
    }

    /// Stores one batch of progress; `false` when the prediction is no longer `processing`.
    async fn store_progress(&self, id: &PredictionId, changes: Changes, seq: &AtomicI64) -> anyhow::Result<bool> {
        let mut set = doc! {};
        if let Some(logs) = &changes.logs {
            set.insert("logs", logs);
        }
        if let Some(output) = &changes.output {
            set.insert("output", bson::to_bson(output).context("the output as BSON")?);
        }
        let Some(p) = self.store.predictions().update_while_processing(id, set).await? else {
            return Ok(false);
        };
        seq.store(p.seq, Ordering::Release);
        if changes.output.is_some() {
            self.publish(&p, WebhookEvent::Output, Announcement::First).await?;
        }
        if changes.logs.is_some() {
            self.publish(&p, WebhookEvent::Logs, Announcement::First).await?;
        }
        Ok(true)
    }

    /// Publishes the `completed` event of a prediction that ended while this runner held it
    /// (canceled through the api). The api publishes the same event; both copies carry one
    /// message id, so the stream keeps one, and this copy covers an api whose publish failed.
    /// If it cannot be published the error hands the job back, and its redelivery publishes
    /// it from [`Self::begin`].
    async fn announce_ended_elsewhere(&self, id: &PredictionId) -> anyhow::Result<()> {
        match self.store.predictions().get(id).await.context("reading the ended prediction")? {
            Some(p) if p.status.is_terminal() => self.publish(&p, WebhookEvent::Completed, Announcement::Again).await,
            _ => Ok(()),
        }
    }

    async fn publish(&self, p: &Prediction, event: WebhookEvent, announcement: Announcement) -> anyhow::Result<()> {
        self.bus
            .publish_event(PredictionChanged::of(p, event, &self.links), announcement)
            .await
            .with_context(|| format!("publishing the {event} event"))
    }
}
