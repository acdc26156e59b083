//! Submitting a prediction, shared by the API's create routes and the console's run form:
//! [`validated`] checks a create body against the model's input schema and builds the
//! `starting` prediction; [`store_and_publish`] claims the idempotency key (if any), stores
//! the prediction and sends its job.
//!
//! Nothing is written before everything is validated. The job is sent without waiting for the
//! stream's confirmation, which a background task awaits: if the publish fails the prediction
//! is still accepted, and its job waits in the [`crate::state::job_outbox`], published again as soon
//! as NATS takes it (the runners' reconciler covers an api that dies meanwhile).

use std::time::Duration;

use bson::DateTime;
use common::{
    bus::BusError,
    domain::{
        AccountId, ApiSurface, NewPrediction, Prediction, PredictionId, Priority, TrainedVersionRef, WebhookEvent,
        WebhookUrl, training,
    },
    store::GroupCommitError,
};
use serde_json::Value;
use tracing::Instrument;

use crate::store::{ApiCollections, Claim, ClaimRaced};
use crate::{
    error::ApiError,
    http::{auth::Caller, extract::JobOptions},
    ops::file_inputs,
    problem::{FieldError, Problem, ProblemKind},
    state::AppState,
    state::job_outbox,
    state::model_catalog::RegisteredModel,
    validate::{
        FromBody,
        create_prediction::{CreatePrediction, CreatePredictionBody},
        input,
    },
};

/// The longest a create waits for NATS to take its job before leaving it to the outbox.
const PUBLISH_TIME_LIMIT: Duration = Duration::from_secs(5);

/// The `starting` prediction a create body asks for, or every field error of the body and of
/// its input against `model`'s schema; then the files of this service its input names, each
/// checked to be the caller's (see [`file_inputs`]). A body that asks for no priority gets
/// `default_priority` (a deployment's, else `normal`); either must be within the account's
/// `max_priority`. An account whose monthly budget is spent is refused first (402). `more`
/// are field errors of fields the caller read itself (a training's
/// `destination`), reported with the body's own.
pub async fn validated(
    state: &AppState,
    caller: &Caller,
    model: &RegisteredModel,
    body: CreatePredictionBody,
    surface: ApiSurface,
    default_priority: Priority,
    more: Vec<FieldError>,
) -> Result<Prediction, ApiError> {
    let request = CreatePrediction::check(body);
    let model_input = match &request {
        Ok(req) => input::validate(&model.input_schema, &req.input),
        Err(_) => Ok(Default::default()),
    };
    let priority = request.as_ref().ok().and_then(|r| r.priority).unwrap_or(default_priority);
    let standing = state.account_limits.standing(&caller.key.account_id).await?;
    if let Some(budget) = standing.exhausted_budget() {
        return Err(ApiError::budget_exhausted(budget, standing.spent_this_month, standing.resets_at));
    }
    let max = standing.limits.max_priority;
    let priority_error = priority.above(max).then(|| {
        FieldError::invalid(
            "priority",
            format!(
                "This account may ask for at most {max} priority; the operator sets it with api admin set-priority."
            ),
        )
    });
    let (request, model_input) = match (request, model_input, priority_error) {
        (Ok(r), Ok(i), None) if more.is_empty() => (r, i),
        (r, i, p) => {
            let mut errors = more;
            errors.extend(r.err().unwrap_or_default());
            errors.extend(i.err().unwrap_or_default());
            errors.extend(p);
            return Err(ApiError::invalid_fields(errors));
        }
    };
    let uris = input::uri_values(&model.input_schema, &model_input);
    let input_files = file_inputs::check(state, &caller.key.account_id, &uris).await?;
    let mut prediction = Prediction::new_starting(NewPrediction {
        account_id: caller.key.account_id.clone(),
        model: model.record.model.clone(),
        version: model.record.version.clone(),
        capability: model.record.capability.clone(),
        input: Value::Object(request.input),
        model_input: Value::Object(model_input),
        webhook: request.webhook,
        webhook_events_filter: request.webhook_events_filter,
        surface,
    });
    prediction.input_files = input_files;
    prediction.api_key_id = Some(caller.key.id.clone());
    prediction.priority = priority;
    if let Some(trained) = &model.trained {
        hand_weights(state, &mut prediction, trained);
    }
    // A secret input (Cog's `Secret`) is sealed for the model and masked wherever it is shown.
    prediction.seal_secrets(&state.config.common.master_key, &input::secret_fields(&model.input_schema));
    Ok(prediction)
}

/// A prediction of a trained version: it shows that version, and its model receives the
/// version's weights (a file of this service, signed for the model when it runs).
fn hand_weights(state: &AppState, prediction: &mut Prediction, trained: &crate::state::model_catalog::TrainedVersion) {
    prediction.trained_version = Some(TrainedVersionRef {
        model: trained.model.clone(),
        version: trained.version.clone(),
        weights: trained.weights.clone(),
    });
    let Some(weights) = &trained.weights else { return };
    if let Value::Object(input) = &mut prediction.model_input {
        let url = state.links.file(weights, ApiSurface::Canonical);
        input.insert(training::WEIGHTS_FIELD.to_owned(), Value::String(url));
        if let Err(at) = prediction.input_files.binary_search_by(|f| f.as_str().cmp(weights.as_str())) {
            prediction.input_files.insert(at, weights.clone());
        }
    }
}

/// The prediction's webhook when it asked for `account.budget`.
fn budget_receiver(prediction: &Prediction) -> Option<&WebhookUrl> {
    let asked = prediction.webhook_events_filter.as_ref().is_some_and(|f| f.contains(&WebhookEvent::AccountBudget));
    prediction.webhook.as_ref().filter(|_| asked)
}

/// A prediction whose webhook asked for `account.budget` ([`budget_receiver`]) makes `url`
/// one of the account's budget notices' receivers (see `common::store::budget_notices`). A
/// failure to note it is logged, and the create stands: the next such create notes it.
async fn remember_budget_receiver(state: &AppState, account: &AccountId, url: &WebhookUrl) {
    if let Err(e) = state.store.budget_notices().add_receiver(account, url).await {
        tracing::warn!(error = %e, "the receiver of the account's budget notices was not noted");
    }
}

/// Sets the prediction's deadline (its kind's, or the sooner one `options` ask for), claims
/// the idempotency key (if any), gives the prediction its ticket in its queue lane, stores it
/// and sends its job; returns the claim (an existing one means nothing was written). The client is answered once the job is
/// sent; the stream's confirmation is awaited in the background (a job the stream did not
/// store is republished by the runner's reconciler, as after any failed publish).
pub async fn store_and_publish(
    state: &AppState,
    account: &AccountId,
    options: JobOptions,
    prediction: &mut Prediction,
) -> Result<Claim, ApiError> {
    let JobOptions { idempotency_key, cancel_after } = options;
    // Every job gets its deadline here: its kind's, or sooner when the create asked.
    let limit = state.config.common.deadlines.of(prediction.kind);
    prediction.set_deadline_asked(cancel_after, limit);
    // The steps taken only sometimes are awaited boxed (see `routes::predictions`).
    if let Some(key) = &idempotency_key
        && let Claim::Existing(first) = Box::pin(claim_key(state, account, key, &prediction.id)).await?
    {
        return Ok(Claim::Existing(first));
    }
    let release = async |state: &AppState, prediction: &Prediction| {
        if let Some(key) = &idempotency_key {
            Box::pin(release_key(state, account, key, &prediction.id)).await;
        }
    };
    if let Some(bound) = state.config.max_queue_wait
        && let Err(refused) = Box::pin(admitted(state, prediction, bound)).await
    {
        release(state, prediction).await;
        return Err(refused);
    }
    // An input too large for the document goes to the file store first (see
    // `common::files::payloads`); the document names it.
    let stored_form = match state.payloads.stored_form(prediction).await {
        Ok(form) => form,
        Err(e) => {
            release(state, prediction).await;
            return Err(e.into());
        }
    };
    let stored = async {
        prediction.queue_ticket = Some(state.tickets.take(prediction).await.map_err(|e| (e, false))?);
        // Refused or dropped unwritten: certainly not stored. A failed write may have stored it,
        // and a duplicate of its `_id` (random) is its own first write, retried by the driver.
        state.new_predictions.insert(stored_document(prediction, stored_form.as_ref())).await.map_err(|e| {
            let unwritten =
                matches!(e, GroupCommitError::Refused { .. } | GroupCommitError::Abandoned) && !e.is_duplicate_key();
            (e, !unwritten)
        })
    };
    if let Err((e, maybe_stored)) = stored.instrument(tracing::info_span!("store_prediction")).await {
        let outcome = match maybe_stored {
            false => Stored::No,
            true => Box::pin(settle(state, &stored_document(prediction, stored_form.as_ref()))).await,
        };
        match outcome {
            // The write applied though its answer was lost: the prediction is created.
            Stored::Yes => tracing::warn!(error = %e, "the prediction's write answered an error but it is stored"),
            Stored::No => {
                tracing::warn!(error = %e, "the prediction was not stored");
                Box::pin(state.store.queue_lanes().give_back(prediction)).await;
                release(state, prediction).await;
                if let Some(file) = stored_form.as_ref().and_then(|form| form.spilled.input.as_ref()) {
                    Box::pin(state.payloads.discard(file)).await;
                }
                return Err(e.into());
            }
            // It may yet be stored: the key stays claimed (a retry replays the prediction if it
            // appears, and takes the key over once the claim is stale if it never does), the
            // ticket stays taken (given back, a stored prediction's ticket could be handed out
            // twice; kept, one never stored counts as waiting only until the lane's next start
            // moves past it), the input file stays, and its job is sent once NATS takes it (a
            // runner drops a job whose prediction does not exist).
            Stored::Unknown => {
                state.job_outbox.hold(state.bus.job_of(prediction));
                return Err(e.into());
            }
        }
    }
    prediction.spilled = stored_form.map(|form| form.spilled).unwrap_or_default();
    state.metrics.created(&prediction.model.to_string());
    if let Some(url) = budget_receiver(prediction) {
        Box::pin(remember_budget_receiver(state, account, url)).await;
    }
    let job = state.bus.job_of(prediction);
    // A publish waits no longer than the request's deadline; a job not sent by then is sent by
    // the outbox, like one NATS refused.
    let left = common::deadline::remaining().unwrap_or(PUBLISH_TIME_LIMIT).min(PUBLISH_TIME_LIMIT);
    let sent =
        tokio::time::timeout(left, state.bus.send_job(&job)).instrument(tracing::info_span!("publish_job")).await;
    match sent.unwrap_or_else(|_| Err(BusError::Unreachable("the request's deadline passed while publishing".into()))) {
        Ok(stored) => {
            let outbox = state.job_outbox.clone();
            let confirm = async move {
                if let Err(error) = job_outbox::confirmed(stored).await {
                    tracing::warn!(%error, "job not stored; publishing it again as soon as NATS takes it");
                    outbox.hold(job);
                }
            };
            state.background.spawn(confirm.instrument(tracing::Span::current()));
        }
        Err(e) => {
            tracing::warn!(error = %e, "job not published; publishing it again as soon as NATS takes it");
            state.job_outbox.hold(job);
        }
    }
    Ok(Claim::New)
}

/// The document that stores `prediction` (with its ticket): its `stored_form` when its input
/// went to a payload file, else itself.
fn stored_document(prediction: &Prediction, stored_form: Option<&Prediction>) -> Prediction {
    let mut document = stored_form.unwrap_or(prediction).clone();
    document.queue_ticket = prediction.queue_ticket;
    document
}

/// Claims `key` for `prediction`; a live claim whose prediction was never stored (its create
/// could not tell) is taken over once it is stale (see [`crate::store::idempotency`]).
async fn claim_key(
    state: &AppState,
    account: &AccountId,
    key: &str,
    prediction: &PredictionId,
) -> Result<Claim, ApiError> {
    let keys = state.store.idempotency_keys();
    let now = DateTime::now();
    let claimed = keys.claim(account, key, prediction, now).await.map_err(|e| match e.get_custom::<ClaimRaced>() {
        Some(_) => ApiError::Problem(Problem::new(
            ProblemKind::Conflict,
            "Other requests with this Idempotency-Key claimed and released it meanwhile; retry shortly.",
        )),
        None => e.into(),
    })?;
    let first = match claimed {
        Claim::Existing(first) => first,
        claim => {
            tracing::debug!(idempotency_key = key, "the Idempotency-Key is claimed");
            return Ok(claim);
        }
    };
    tracing::debug!(idempotency_key = key, %first, "the Idempotency-Key was claimed before");
    // The request that claimed it goes on no longer than its deadline (a `Prefer: wait`
    // stores before it waits); past that and a margin it stores nothing any more.
    // Whether its prediction is stored is read on the primary: a create whose majority
    // acknowledgment timed out stored it there, and a majority read may not see it yet.
    let stale_after = state.config.request_deadline + STALE_MARGIN;
    if state.store.predictions().get_settled(&first).await?.is_none()
        && keys.take_over_stale(account, key, &first, prediction, now, stale_after).await?
    {
        tracing::warn!(idempotency_key = key, stale = %first, "an Idempotency-Key whose prediction was never stored is taken over");
        return Ok(Claim::New);
    }
    Ok(Claim::Existing(first))
}

/// How long past the request deadline a claim whose prediction never appeared is kept.
const STALE_MARGIN: Duration = Duration::from_secs(5);

/// Releases `key`'s claim for `prediction`, whose create failed, trying again while the
/// request's deadline lasts (a claim left behind answers 409 until it is stale).
async fn release_key(state: &AppState, account: &AccountId, key: &str, prediction: &PredictionId) {
    let keys = state.store.idempotency_keys();
    if until_settled("releasing the idempotency key", || keys.release(account, key, prediction)).await.is_none() {
        tracing::warn!("idempotency key not released; a retry of it is taken over once the claim is stale");
    }
}

/// `step` until it succeeds, pausing [`SETTLE_PAUSE`] between failures, for up to
/// [`SETTLE_TIME`] within the request's deadline; `None` if it never did.
async fn until_settled<T, F, Fut>(what: &str, mut step: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, common::store::StoreError>>,
{
    let left = common::deadline::remaining().unwrap_or(SETTLE_TIME).min(SETTLE_TIME);
    let tries = async {
        loop {
            match step().await {
                Ok(value) => return value,
                Err(e) => tracing::warn!(error = %e, "{what} failed; trying again"),
            }
            tokio::time::sleep(SETTLE_PAUSE).await;
        }
    };
    tokio::time::timeout(left, tries).await.ok()
}

/// Whether a prediction whose write failed is stored.
enum Stored {
    /// It is (the write applied, or its second did).
    Yes,
    /// It is not, and cannot be: its write was refused or never sent.
    No,
    /// Not settled in time.
    Unknown,
}

/// How long a create spends settling a failed write (within its deadline), and the pause
/// between tries.
const SETTLE_TIME: Duration = Duration::from_secs(2);
const SETTLE_PAUSE: Duration = Duration::from_millis(200);

/// Settles whether `document`, whose write failed, is stored, by writing it again on its own
/// (a read alone could not tell a write still on its way from one that never came): the
/// insert stores it now, or is refused as a duplicate of its `_id` (random, this document's
/// alone), which only its first write can hold, so a read of it then tells it is stored. A
/// duplicate not yet readable is tried again (the first write may still be applying). Not
/// settled within [`SETTLE_TIME`] or the request's deadline: unknown. Never `No`: a write
/// that may have reached the server may be stored.
async fn settle(state: &AppState, document: &Prediction) -> Stored {
    let predictions = state.store.predictions();
    let again = || async {
        match predictions.insert(document).await {
            Ok(()) => Ok(Stored::Yes),
            Err(e) if common::store::is_duplicate_key(&e) => match predictions.get_settled(&document.id).await? {
                Some(_) => Ok(Stored::Yes),
                None => Err(e),
            },
            Err(e) => Err(e),
        }
    };
    until_settled("settling whether the prediction is stored", again).await.unwrap_or(Stored::Unknown)
}

/// Refuses a prediction that would wait longer than `bound` (`API_MAX_QUEUE_SECONDS`) to
/// start (503, `Retry-After` the excess, rounded up), before anything of it is written.
/// Trainings take everything, as replicas without the bound do.
async fn admitted(state: &AppState, prediction: &Prediction, bound: Duration) -> Result<(), ApiError> {
    if prediction.is_training() {
        return Ok(());
    }
    match state.queue_places.admit(prediction, bound).await? {
        Err(wait) => {
            let retry_after = u32::try_from((wait - bound).as_secs_f64().ceil() as u64).unwrap_or(u32::MAX);
            Err(ApiError::busy(
                format!(
                    "{} has more waiting than it starts within {} s; retry in {retry_after} s.",
                    prediction.model,
                    bound.as_secs_f64()
                ),
                retry_after,
            ))
        }
        Ok(()) => Ok(()),
    }
}
