//! Wire messages on NATS. Each is a tagged enum whose tag names its version (`"kind"`): a new
//! shape is a new variant, and a variant that may still sit in a stream is never changed, except
//! to add an optional field that readers of the version before ignore (serde skips unknown
//! fields) and that its own readers may find missing.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{
    domain::{AccountId, ApiKeyId, ModelRef, Prediction, PredictionId, WebhookEvent, WebhookUrl},
    links::Links,
    views::PredictionView,
};

/// A job on the jobs stream: run this prediction. Published by the api (and by the runner's
/// reconciler) with `Nats-Msg-Id` = the prediction id, so republishing is harmless. Decoded
/// through [`FlatJob`], not as serde's internally tagged enum.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", from = "FlatJob")]
pub enum JobMessage {
    /// Version 1: the prediction is in MongoDB; the runner reads it through its status update.
    #[serde(rename = "run_prediction.v1")]
    RunPredictionV1 {
        /// The prediction to run.
        prediction_id: PredictionId,
        /// Its model (also the subject it was published on).
        model: ModelRef,
        /// The input its model receives (the prediction's `model_input`), when it is at most
        /// [`JOB_INPUT_INLINE_LIMIT`] bytes of JSON and the job does not carry the whole
        /// `prediction`: the runner then starts the model beside its `processing` write
        /// instead of after it. Missing for larger inputs and in jobs of earlier versions; the
        /// runner then takes the input from that write. An optional field of v1 rather than a
        /// v2: runners of the version before ignore it, where they would dead-letter a new
        /// variant during a rolling upgrade.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model_input: Option<Map<String, Value>>,
        /// The prediction as its creator stored it (status `starting`), when the job stays
        /// within [`JOB_INPUT_INLINE_LIMIT`] bytes: the runner then moves it to `processing`
        /// with a conditional change at its `seq` that reads nothing back (several runners'
        /// changes share one command), and starts the model beside it. If the stored
        /// prediction moved meanwhile, the change does not apply and the runner reads it as
        /// for a job without it. Optional, as `model_input`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prediction: Option<Box<Prediction>>,
    },
}

/// A [`JobMessage`] as it is decoded: its tag and fields side by side in one struct. serde
/// reads an internally tagged enum by first copying the whole object into a buffer of its own
/// values (to find the tag wherever it stands) and then decoding the variant from that copy:
/// for a job that carries its prediction, that doubled the runner's largest JSON step (8.6 %
/// of its CPU in the bench's profile). A struct reads each field once, in any order. A
/// round-trip test keeps the fields in step with the variant's.
#[derive(Deserialize)]
struct FlatJob {
    kind: JobKind,
    prediction_id: PredictionId,
    model: ModelRef,
    #[serde(default)]
    model_input: Option<Map<String, Value>>,
    #[serde(default)]
    prediction: Option<Box<Prediction>>,
}

/// The tags of [`JobMessage`] this version reads.
#[derive(Deserialize)]
enum JobKind {
    #[serde(rename = "run_prediction.v1")]
    RunPredictionV1,
}

impl From<FlatJob> for JobMessage {
    fn from(job: FlatJob) -> Self {
        let FlatJob { kind: JobKind::RunPredictionV1, prediction_id, model, model_input, prediction } = job;
        Self::RunPredictionV1 { prediction_id, model, model_input, prediction }
    }
}

/// The largest job message (bytes of JSON) that carries its prediction, or failing that its
/// model input: jobs stay far below the NATS payload limit (1 MiB by default), and a larger
/// prediction is read from MongoDB.
pub const JOB_INPUT_INLINE_LIMIT: usize = 64 * 1024;

/// A job message as it is encoded, borrowing from the prediction (the same JSON as a
/// [`JobMessage::RunPredictionV1`]).
#[derive(Serialize)]
#[serde(tag = "kind", rename = "run_prediction.v1")]
struct OutgoingJob<'a> {
    prediction_id: &'a PredictionId,
    model: &'a ModelRef,
    #[serde(skip_serializing_if = "Option::is_none")]
    model_input: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prediction: Option<&'a Prediction>,
}

impl JobMessage {
    /// The job of `prediction`, as its encoded message: with the whole prediction when that
    /// is within [`JOB_INPUT_INLINE_LIMIT`], else with its model input when that is.
    pub fn encode_for(prediction: &Prediction) -> Vec<u8> {
        let bare = OutgoingJob {
            prediction_id: &prediction.id,
            model: &prediction.model,
            model_input: None,
            prediction: None,
        };
        let whole = encode(&OutgoingJob { prediction: Some(prediction), ..bare });
        if whole.len() <= JOB_INPUT_INLINE_LIMIT {
            return whole;
        }
        let model_input = Some(&prediction.model_input).filter(|input| input.is_object());
        let with_input = encode(&OutgoingJob { model_input, ..bare });
        if with_input.len() <= JOB_INPUT_INLINE_LIMIT {
            return with_input;
        }
        encode(&bare)
    }
}

fn encode(job: &OutgoingJob<'_>) -> Vec<u8> {
    // Ids, a model reference, JSON and dates: serializing cannot fail.
    serde_json::to_vec(job).expect("a job message always serializes")
}

/// A status event on the events stream, published after every stored change of a prediction.
/// Decoded through [`FlatEvent`], not as serde's internally tagged enum (see [`FlatJob`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", from = "FlatEvent")]
pub enum StatusEvent {
    /// Version 1.
    #[serde(rename = "prediction_changed.v1")]
    PredictionChangedV1(PredictionChanged),
    /// A person asked for one more attempt of an event's webhook (a resend): the notifier
    /// makes exactly one attempt, with the event's own `webhook-id`, whatever came before.
    /// Published by the api on [`crate::subjects::Subjects::resends`], never on a
    /// prediction's own events subject, so streams and waits never see it.
    #[serde(rename = "webhook_resend.v1")]
    WebhookResendV1(PredictionChanged),
    /// [`Self::PredictionChangedV1`] of a prediction not carried: one with an input or output
    /// kept in the file store, or too large for the server's message limit (NATS's
    /// `max_payload`, 1 MiB by default). The same fields without `prediction`, which readers
    /// take from MongoDB (see [`PredictionChanged::of`] and [`PredictionChanged::encode_within`]).
    #[serde(rename = "prediction_changed_ref.v1")]
    PredictionChangedRefV1(PredictionChanged),
    /// [`Self::WebhookResendV1`] of a prediction not carried, likewise.
    #[serde(rename = "webhook_resend_ref.v1")]
    WebhookResendRefV1(PredictionChanged),
}

impl StatusEvent {
    /// The change of a prediction's own event (a resend is not one).
    pub fn prediction_change(self) -> Option<PredictionChanged> {
        match self {
            Self::PredictionChangedV1(change) | Self::PredictionChangedRefV1(change) => Some(change),
            Self::WebhookResendV1(_) | Self::WebhookResendRefV1(_) => None,
        }
    }
}

/// The NATS header of a status event that says who announces the change (see [`Announcement`]).
pub const ANNOUNCEMENT_HEADER: &str = "Prediction-Announcement";

/// Who publishes a status event, carried in its [`ANNOUNCEMENT_HEADER`]. The notifier looks up
/// earlier attempts of a first-delivered `completed` event only when it may be a copy, so the
/// common case costs no database read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Announcement {
    /// The writer of the change, right after its conditional write succeeded: only it can
    /// announce this change first. (Another publisher of the same change uses the same
    /// `Nats-Msg-Id`, so within the stream's duplicate window the stream keeps one.)
    First,
    /// A change stored earlier, announced again (a redelivered job finding its prediction
    /// ended, the reconciler, a runner covering for the api's publish): it may be a copy of an
    /// event already delivered. A missing or unknown header counts as this.
    Again,
}

impl Announcement {
    /// The header's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::First => "first",
            Self::Again => "again",
        }
    }

    /// Reads the header's value; anything but `first` (or none) is [`Announcement::Again`].
    pub fn from_header(value: Option<&str>) -> Self {
        if value == Some("first") { Self::First } else { Self::Again }
    }
}

/// What changed, and the prediction as clients see it right after the change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictionChanged {
    /// The prediction that changed.
    pub prediction_id: PredictionId,
    /// The account that owns the prediction (whose secret signs its webhooks).
    pub account_id: AccountId,
    /// The webhook event this change is.
    pub event: WebhookEvent,
    /// The prediction's change sequence after this change.
    pub seq: i64,
    /// Where its webhooks go, if anywhere.
    pub webhook: Option<WebhookUrl>,
    /// Which events are delivered (absent = all).
    pub webhook_events_filter: Option<Vec<WebhookEvent>>,
    /// The prediction as `GET` on the surface that created it shows it right after the change;
    /// `None` in an event by reference (one with a value kept in the file store, or too large
    /// to carry), whose readers take the stored prediction from MongoDB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prediction: Option<PredictionView>,
}

impl PredictionChanged {
    /// The `event` of a stored change, with the prediction rendered for the surface that
    /// created it; by reference when an input or output of it is kept in the file store (a
    /// payload, past 64 KiB): the event stays small however large the values, and the values
    /// are read back only by a reader that shows them (a webhook, a `Prefer: wait` answer),
    /// not by every publisher of every event (a stream's every token).
    pub fn of(prediction: &Prediction, event: WebhookEvent, links: &Links) -> Self {
        let carried = prediction.spilled.is_empty().then(|| prediction.view(links, prediction.surface));
        Self {
            prediction_id: prediction.id.clone(),
            account_id: prediction.account_id.clone(),
            event,
            seq: prediction.seq,
            webhook: prediction.webhook.clone(),
            webhook_events_filter: prediction.webhook_events_filter.clone(),
            prediction: carried,
        }
    }

    /// This change as a message of at most `limit` bytes: as `kind` with its prediction when
    /// it carries one that fits (the usual case), else by reference (the `_ref` kind of the
    /// same event, without the prediction). `kind` is [`StatusEvent::PredictionChangedV1`] or
    /// [`StatusEvent::WebhookResendV1`]. Only a message that does not fit is encoded twice.
    pub fn encode_within(mut self, kind: fn(Self) -> StatusEvent, limit: usize) -> Vec<u8> {
        if self.prediction.is_some() {
            let whole = serde_json::to_vec(&kind(self.clone())).expect("status events always serialize");
            if whole.len() <= limit {
                return whole;
            }
            self.prediction = None;
        }
        let by_reference = match kind(self) {
            StatusEvent::PredictionChangedV1(change) => StatusEvent::PredictionChangedRefV1(change),
            StatusEvent::WebhookResendV1(change) => StatusEvent::WebhookResendRefV1(change),
            other => other,
        };
        serde_json::to_vec(&by_reference).expect("status events always serialize")
    }

    /// The id of this event, one per prediction, change and event (one stored change can be
    /// both an `output` and a `logs` event). It is the `Nats-Msg-Id`, so a republished event
    /// is dropped by JetStream's duplicate window, and the notifier's `webhook-id`.
    pub fn message_id(&self) -> String {
        event_message_id(&self.prediction_id, self.seq, self.event)
    }
}

/// The id of the event `event` of prediction `id` at change `seq` (see
/// [`PredictionChanged::message_id`]).
fn event_message_id(id: &PredictionId, seq: i64, event: WebhookEvent) -> String {
    format!("{id}.{seq}.{event}")
}

/// A [`StatusEvent`] as it is decoded: its tag and [`PredictionChanged`]'s fields side by
/// side, read once (see [`FlatJob`]). A round-trip test keeps the fields in step.
#[derive(Deserialize)]
struct FlatEvent {
    kind: StatusEventKind,
    prediction_id: PredictionId,
    account_id: AccountId,
    event: WebhookEvent,
    seq: i64,
    webhook: Option<WebhookUrl>,
    webhook_events_filter: Option<Vec<WebhookEvent>>,
    #[serde(default)]
    prediction: Option<PredictionView>,
}

impl From<FlatEvent> for StatusEvent {
    fn from(e: FlatEvent) -> Self {
        let change = PredictionChanged {
            prediction_id: e.prediction_id,
            account_id: e.account_id,
            event: e.event,
            seq: e.seq,
            webhook: e.webhook,
            webhook_events_filter: e.webhook_events_filter,
            prediction: e.prediction,
        };
        match e.kind {
            StatusEventKind::PredictionChangedV1 => Self::PredictionChangedV1(change),
            StatusEventKind::WebhookResendV1 => Self::WebhookResendV1(change),
            StatusEventKind::PredictionChangedRefV1 => Self::PredictionChangedRefV1(change),
            StatusEventKind::WebhookResendRefV1 => Self::WebhookResendRefV1(change),
        }
    }
}

/// Which [`StatusEvent`] a [`DeliverableEvent`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum StatusEventKind {
    /// [`StatusEvent::PredictionChangedV1`].
    #[serde(rename = "prediction_changed.v1")]
    PredictionChangedV1,
    /// [`StatusEvent::WebhookResendV1`].
    #[serde(rename = "webhook_resend.v1")]
    WebhookResendV1,
    /// [`StatusEvent::PredictionChangedRefV1`].
    #[serde(rename = "prediction_changed_ref.v1")]
    PredictionChangedRefV1,
    /// [`StatusEvent::WebhookResendRefV1`].
    #[serde(rename = "webhook_resend_ref.v1")]
    WebhookResendRefV1,
}

impl StatusEventKind {
    /// Whether this is a resend request rather than a prediction's own event.
    pub fn is_resend(self) -> bool {
        matches!(self, Self::WebhookResendV1 | Self::WebhookResendRefV1)
    }
}

/// A [`StatusEvent`] as the notifier reads it: the same wire format, decoded without the
/// prediction, which stays the exact JSON text the publisher wrote. That text is the webhook
/// body (the event's `prediction` is the prediction as clients see it), so the notifier never
/// decodes and re-encodes it: two of the largest JSON steps of a prediction's way, saved on
/// every event. A kind this version does not know does not decode.
///
/// It repeats the fields of [`PredictionChanged`] instead of sharing them through a flattened
/// struct: serde buffers the whole object of a struct with a flattened field (and of an
/// internally tagged enum), and a `RawValue` cannot be read back from that buffer. A
/// round-trip test keeps the two in step.
#[derive(Debug, Clone, Deserialize)]
pub struct DeliverableEvent {
    /// Which event this is.
    pub kind: StatusEventKind,
    /// See [`PredictionChanged::prediction_id`].
    pub prediction_id: PredictionId,
    /// See [`PredictionChanged::account_id`].
    pub account_id: AccountId,
    /// See [`PredictionChanged::event`].
    pub event: WebhookEvent,
    /// See [`PredictionChanged::seq`].
    pub seq: i64,
    /// See [`PredictionChanged::webhook`].
    pub webhook: Option<WebhookUrl>,
    /// See [`PredictionChanged::webhook_events_filter`].
    pub webhook_events_filter: Option<Vec<WebhookEvent>>,
    /// The prediction's JSON, byte for byte as published; `None` in an event by reference,
    /// whose body is read from MongoDB.
    #[serde(default)]
    pub prediction: Option<Box<serde_json::value::RawValue>>,
}

impl DeliverableEvent {
    /// See [`PredictionChanged::message_id`].
    pub fn message_id(&self) -> String {
        event_message_id(&self.prediction_id, self.seq, self.event)
    }

    /// The webhook body: the prediction's JSON as published (`None` by reference).
    pub fn body(&self) -> Option<&[u8]> {
        self.prediction.as_deref().map(|p| p.get().as_bytes())
    }
}

/// A cancel broadcast to every runner: whoever holds this prediction aborts it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum CancelMessage {
    /// Version 1.
    #[serde(rename = "cancel_prediction.v1")]
    CancelPredictionV1 {
        /// The prediction to abort.
        prediction_id: PredictionId,
    },
}

/// A runner's question to the runner a `processing` prediction names as its holder (a core
/// NATS request on [`crate::subjects::Subjects::runner_inquiries`], asked when a job is
/// delivered again while its prediction runs): does it still run it? Answered with a
/// [`HolderAnswer`]; no answer at all (no responders) is what a stopped runner leaves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum HolderQuery {
    /// Version 1.
    #[serde(rename = "holds_prediction.v1")]
    HoldsPredictionV1 {
        /// The prediction asked about.
        prediction_id: PredictionId,
    },
}

/// The answer to a [`HolderQuery`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum HolderAnswer {
    /// Version 1.
    #[serde(rename = "holds_prediction_answer.v1")]
    HoldsPredictionAnswerV1 {
        /// Whether the prediction runs in the answering runner now.
        holds: bool,
    },
}

/// An account's signing secret was rotated: whoever caches it drops it (core NATS, sent by
/// the api before it answers the rotation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum SecretMessage {
    /// Version 1.
    #[serde(rename = "secret_rotated.v1")]
    SecretRotatedV1 {
        /// The account whose secret changed.
        account_id: AccountId,
    },
}

/// An API key was deactivated: every api replica drops its cached key look-ups (core NATS,
/// sent by the api before it answers the deactivation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum KeyMessage {
    /// Version 1.
    #[serde(rename = "key_deactivated.v1")]
    KeyDeactivatedV1 {
        /// The key's account.
        account_id: AccountId,
        /// The key.
        key_id: ApiKeyId,
    },
}

/// A price change announced to every runner on core NATS (sent by `api admin set-price` once
/// the price is stored).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum PriceMessage {
    /// Version 1.
    #[serde(rename = "price_set.v1")]
    PriceSetV1 {
        /// The hardware pool.
        pool: crate::domain::Pool,
        /// Its new price per second.
        price_nanos: crate::domain::Price,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        crypto::MasterKey,
        domain::{ApiSurface, FileId, NewPrediction, PredictionError, Spilled},
    };
    use serde_json::json;

    #[test]
    fn only_a_first_announcement_reads_as_first() {
        assert_eq!(Announcement::from_header(Some(Announcement::First.as_str())), Announcement::First);
        assert_eq!(Announcement::from_header(Some(Announcement::Again.as_str())), Announcement::Again);
        assert_eq!(Announcement::from_header(None), Announcement::Again, "an older publisher's event may be a copy");
        assert_eq!(Announcement::from_header(Some("FIRST ")), Announcement::Again);
    }

    /// A `starting` prediction of demo/echo with `model_input`.
    fn a_prediction(model_input: Value) -> Prediction {
        Prediction::new_starting(NewPrediction {
            account_id: AccountId::generate(),
            model: "demo/echo".parse().expect("valid"),
            version: "v".into(),
            capability: "text-generation".into(),
            input: model_input.clone(),
            model_input,
            webhook: None,
            webhook_events_filter: None,
            surface: ApiSurface::Canonical,
        })
    }

    #[test]
    fn a_job_round_trips_and_names_its_version() {
        let job = JobMessage::RunPredictionV1 {
            prediction_id: PredictionId::generate(),
            model: "demo/echo".parse().expect("valid"),
            model_input: json!({"prompt": "hi"}).as_object().cloned(),
            prediction: None,
        };
        let text = serde_json::to_value(&job).expect("serializes");
        assert_eq!(text["kind"], "run_prediction.v1");
        assert_eq!(text["model"], "demo/echo");
        assert_eq!(text["model_input"]["prompt"], "hi");
        assert_eq!(serde_json::from_value::<JobMessage>(text).ok(), Some(job));
    }

    #[test]
    fn a_job_of_an_earlier_version_decodes_without_its_input() {
        let id = PredictionId::generate();
        let earlier = json!({"kind": "run_prediction.v1", "prediction_id": id, "model": "demo/echo"});
        let Ok(JobMessage::RunPredictionV1 { prediction_id, model_input, .. }) = serde_json::from_value(earlier) else {
            panic!("a job without model_input decodes");
        };
        assert_eq!((prediction_id, model_input), (id, None));
    }

    #[test]
    fn a_reader_of_the_earlier_version_reads_a_job_that_carries_its_input() {
        /// The job message as the version before this field knew it.
        #[derive(Deserialize)]
        #[serde(tag = "kind")]
        enum EarlierJob {
            #[serde(rename = "run_prediction.v1")]
            RunPredictionV1 { prediction_id: PredictionId },
        }
        let p = a_prediction(json!({"prompt": "hi"}));
        let read: EarlierJob = serde_json::from_slice(&JobMessage::encode_for(&p)).expect("an older runner reads it");
        let EarlierJob::RunPredictionV1 { prediction_id } = read;
        assert_eq!(prediction_id, p.id);
    }

    #[test]
    fn a_job_carries_its_whole_prediction_as_stored() {
        let p = a_prediction(json!({"prompt": "hi", "repeat": 2}));
        let job: JobMessage = serde_json::from_slice(&JobMessage::encode_for(&p)).expect("decodes");
        let JobMessage::RunPredictionV1 { prediction_id, model, model_input, prediction } = job;
        assert_eq!((prediction_id, model, model_input), (p.id.clone(), p.model.clone(), None));
        assert_eq!(prediction.map(|carried| *carried), Some(p), "dates, ids and input survive the trip");
    }

    #[test]
    fn a_job_carries_its_prediction_or_its_input_only_up_to_the_inline_limit() {
        // The prediction holds the input twice (as submitted, and as the model receives it).
        let mut p = a_prediction(json!({"prompt": "x".repeat(JOB_INPUT_INLINE_LIMIT * 2 / 3)}));
        let medium: JobMessage = serde_json::from_slice(&JobMessage::encode_for(&p)).expect("decodes");
        let JobMessage::RunPredictionV1 { model_input, prediction, .. } = medium;
        assert!(prediction.is_none(), "too large to carry whole");
        assert_eq!(model_input.map(Value::Object), Some(p.model_input.clone()));

        p.model_input = json!({"prompt": "x".repeat(JOB_INPUT_INLINE_LIMIT)});
        let encoded = JobMessage::encode_for(&p);
        assert!(encoded.len() < 1024, "a large input stays out of the job ({} bytes)", encoded.len());
        let large: JobMessage = serde_json::from_slice(&encoded).expect("decodes");
        let JobMessage::RunPredictionV1 { prediction_id, model_input, prediction, .. } = large;
        assert_eq!((prediction_id, model_input, prediction), (p.id, None, None));
    }

    #[test]
    fn a_status_event_round_trips() {
        let links = Links::new("http://h", MasterKey::from_base64(&MasterKey::generate_base64()).expect("key"));
        for surface in [ApiSurface::Canonical, ApiSurface::Replicate] {
            let mut p = Prediction::new_starting(NewPrediction {
                account_id: AccountId::generate(),
                model: "demo/echo".parse().expect("valid"),
                version: "v".into(),
                capability: "text-generation".into(),
                input: json!({}),
                model_input: json!({}),
                webhook: Some(WebhookUrl::parse("https://example.com/h").expect("valid")),
                webhook_events_filter: Some(vec![WebhookEvent::Completed]),
                surface,
            });
            p.error = Some(PredictionError { code: "MODEL_ERROR".into(), message: "boom".into() });
            let change = PredictionChanged::of(&p, WebhookEvent::Start, &links);
            let view = change.prediction.as_ref().expect("carried");
            assert!(view.urls.get.starts_with(&links.api(surface)), "rendered for its creator's surface");
            let by_reference = PredictionChanged { prediction: None, ..change.clone() };
            for event in [
                StatusEvent::PredictionChangedV1(change.clone()),
                StatusEvent::WebhookResendV1(change),
                StatusEvent::PredictionChangedRefV1(by_reference.clone()),
                StatusEvent::WebhookResendRefV1(by_reference),
            ] {
                let bytes = serde_json::to_vec(&event).expect("serializes");
                assert_eq!(serde_json::from_slice::<StatusEvent>(&bytes).ok(), Some(event));
            }
        }
    }

    #[test]
    fn the_notifier_reads_a_status_event_with_the_prediction_as_published() {
        let links = Links::new("http://h", MasterKey::from_base64(&MasterKey::generate_base64()).expect("key"));
        let p = Prediction::new_starting(NewPrediction {
            account_id: AccountId::generate(),
            model: "demo/echo".parse().expect("valid"),
            version: "v".into(),
            capability: "text-generation".into(),
            input: json!({"prompt": "é \"quoted\" \u{1F600}", "n": 1.5}),
            model_input: json!({}),
            webhook: Some(WebhookUrl::parse("https://example.com/h").expect("valid")),
            webhook_events_filter: Some(vec![WebhookEvent::Start, WebhookEvent::Completed]),
            surface: ApiSurface::Replicate,
        });
        let change = PredictionChanged::of(&p, WebhookEvent::Completed, &links);
        for (event, kind) in [
            (StatusEvent::PredictionChangedV1(change.clone()), StatusEventKind::PredictionChangedV1),
            (StatusEvent::WebhookResendV1(change.clone()), StatusEventKind::WebhookResendV1),
        ] {
            let bytes = serde_json::to_vec(&event).expect("serializes");
            let read: DeliverableEvent = serde_json::from_slice(&bytes).expect("decodes");
            assert_eq!(read.kind, kind);
            assert_eq!(read.message_id(), change.message_id());
            assert_eq!(
                (&read.prediction_id, &read.account_id, read.seq),
                (&change.prediction_id, &change.account_id, change.seq)
            );
            assert_eq!(read.webhook, change.webhook);
            assert_eq!(read.webhook_events_filter, change.webhook_events_filter);
            assert_eq!(
                read.body().map(<[u8]>::to_vec),
                Some(serde_json::to_vec(&change.prediction).expect("serializes")),
                "the body is what encoding the prediction gives"
            );
        }
        for (kind, read_kind) in [
            (
                StatusEvent::PredictionChangedV1 as fn(PredictionChanged) -> StatusEvent,
                StatusEventKind::PredictionChangedRefV1,
            ),
            (StatusEvent::WebhookResendV1, StatusEventKind::WebhookResendRefV1),
        ] {
            let by_reference = change.clone().encode_within(kind, 100);
            let read: DeliverableEvent = serde_json::from_slice(&by_reference).expect("decodes");
            assert_eq!((read.kind, read.body(), read.message_id()), (read_kind, None, change.message_id()));
            assert_eq!(read.webhook, change.webhook, "everything but the prediction");
        }
        let unknown = json!({"kind": "prediction_changed.v9", "prediction_id": "x"});
        assert!(serde_json::from_value::<DeliverableEvent>(unknown).is_err());
    }

    #[test]
    fn a_change_is_carried_whole_when_it_fits_and_by_reference_when_it_does_not() {
        let links = Links::new("http://h", MasterKey::from_base64(&MasterKey::generate_base64()).expect("key"));
        let p = Prediction::new_starting(NewPrediction {
            account_id: AccountId::generate(),
            model: "demo/echo".parse().expect("valid"),
            version: "v".into(),
            capability: "text-generation".into(),
            input: json!({"prompt": "x".repeat(2000)}),
            model_input: json!({}),
            webhook: None,
            webhook_events_filter: None,
            surface: ApiSurface::Canonical,
        });
        let change = PredictionChanged::of(&p, WebhookEvent::Completed, &links);
        let whole = change.clone().encode_within(StatusEvent::PredictionChangedV1, 1 << 20);
        assert_eq!(
            serde_json::from_slice::<StatusEvent>(&whole).ok(),
            Some(StatusEvent::PredictionChangedV1(change.clone()))
        );
        let small = change.clone().encode_within(StatusEvent::PredictionChangedV1, 1000);
        assert!(small.len() <= 1000, "{}", small.len());
        let read = serde_json::from_slice::<StatusEvent>(&small).expect("decodes");
        let expected = PredictionChanged { prediction: None, ..change };
        assert_eq!(read, StatusEvent::PredictionChangedRefV1(expected.clone()));
        assert_eq!(read.prediction_change(), Some(expected));
    }

    #[test]
    fn a_change_of_a_prediction_with_a_payload_goes_by_reference_however_small() {
        let links = Links::new("http://h", MasterKey::from_base64(&MasterKey::generate_base64()).expect("key"));
        let mut p = Prediction::new_starting(NewPrediction {
            account_id: AccountId::generate(),
            model: "demo/echo".parse().expect("valid"),
            version: "v".into(),
            capability: "text-generation".into(),
            input: json!({"prompt": "short"}),
            model_input: json!({}),
            webhook: None,
            webhook_events_filter: None,
            surface: ApiSurface::Replicate,
        });
        assert!(PredictionChanged::of(&p, WebhookEvent::Output, &links).prediction.is_some(), "nothing spilled");
        for spilled in [
            Spilled { input: Some(FileId::generate()), output: None },
            Spilled { input: None, output: Some(FileId::generate()) },
        ] {
            p.spilled = spilled;
            let change = PredictionChanged::of(&p, WebhookEvent::Output, &links);
            assert_eq!(change.prediction, None, "its values are read back only by who shows them");
            let encoded = change.clone().encode_within(StatusEvent::PredictionChangedV1, 1 << 20);
            assert_eq!(
                serde_json::from_slice::<StatusEvent>(&encoded).ok(),
                Some(StatusEvent::PredictionChangedRefV1(change.clone()))
            );
            let resend = change.clone().encode_within(StatusEvent::WebhookResendV1, 1 << 20);
            assert_eq!(
                serde_json::from_slice::<StatusEvent>(&resend).ok(),
                Some(StatusEvent::WebhookResendRefV1(change))
            );
        }
    }

    #[test]
    fn an_unknown_message_kind_does_not_decode() {
        let bad = json!({"kind": "run_prediction.v9", "prediction_id": "x"});
        assert!(serde_json::from_value::<JobMessage>(bad).is_err());
        let bad = json!({"kind": "prediction_changed.v9", "prediction_id": "x"});
        assert!(serde_json::from_value::<StatusEvent>(bad).is_err());
        let untagged = json!({"prediction_id": PredictionId::generate(), "model": "demo/echo"});
        assert!(serde_json::from_value::<JobMessage>(untagged).is_err(), "the tag is required");
    }

    #[test]
    fn a_secret_rotation_round_trips() {
        let msg = SecretMessage::SecretRotatedV1 { account_id: AccountId::generate() };
        let bytes = serde_json::to_vec(&msg).expect("serializes");
        assert_eq!(serde_json::from_slice::<SecretMessage>(&bytes).ok(), Some(msg));
    }

    #[test]
    fn a_price_change_round_trips() {
        let pool = crate::domain::Pool::parse("gpu").expect("a pool");
        let msg = PriceMessage::PriceSetV1 { pool, price_nanos: crate::domain::Price(225_000) };
        let text = serde_json::to_value(&msg).expect("serializes");
        assert_eq!(text, serde_json::json!({"kind": "price_set.v1", "pool": "gpu", "price_nanos": 225_000}));
        assert_eq!(serde_json::from_value::<PriceMessage>(text).ok(), Some(msg));
    }

    #[test]
    fn a_key_deactivation_round_trips() {
        let msg = KeyMessage::KeyDeactivatedV1 { account_id: AccountId::generate(), key_id: ApiKeyId::generate() };
        let text = serde_json::to_value(&msg).expect("serializes");
        assert_eq!(text["kind"], "key_deactivated.v1");
        assert_eq!(serde_json::from_value::<KeyMessage>(text).ok(), Some(msg));
    }

    #[test]
    fn a_holder_query_and_its_answer_round_trip() {
        let query = HolderQuery::HoldsPredictionV1 { prediction_id: PredictionId::generate() };
        let text = serde_json::to_value(&query).expect("serializes");
        assert_eq!(text["kind"], "holds_prediction.v1");
        assert_eq!(serde_json::from_value::<HolderQuery>(text).ok(), Some(query));
        let answer = HolderAnswer::HoldsPredictionAnswerV1 { holds: true };
        let text = serde_json::to_value(&answer).expect("serializes");
        assert_eq!(text, serde_json::json!({"kind": "holds_prediction_answer.v1", "holds": true}));
        assert_eq!(serde_json::from_value::<HolderAnswer>(text).ok(), Some(answer));
    }

    #[test]
    fn a_cancel_round_trips() {
        let msg = CancelMessage::CancelPredictionV1 { prediction_id: PredictionId::generate() };
        let bytes = serde_json::to_vec(&msg).expect("serializes");
        assert_eq!(serde_json::from_slice::<CancelMessage>(&bytes).ok(), Some(msg));
    }
}
