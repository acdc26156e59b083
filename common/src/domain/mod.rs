//! Domain types. Each is parsed once at the edge ("parse, don't validate"): a value of one of
//! these types is valid by construction, so code further in never re-checks it.
//!
//! Its modules:
//! - [`api_key`]: API key values and scopes.
//! - [`deadline`]: how a job ends at its deadline, which depends on who set it and whether it had started.
//! - [`file_store`]: which store holds a file's bytes.
//! - [`ids`]: the identifiers, random, unguessable and URL-safe.
//! - [`model`]: a model's address, `<owner>/<name>`.
//! - [`output`]: a model's output as stored.
//! - [`prediction`]: the prediction.
//! - [`priority`]: a prediction's priority.
//! - [`route`]: where a job may run.
//! - [`secret_inputs`]: secret inputs.
//! - [`status`]: a prediction's status and the transitions allowed between statuses.
//! - [`surface`]: the two API surfaces a prediction can be seen through.
//! - [`training`]: trainings (fine-tunes).
//! - [`webhook_secret`]: the account's webhook signing secret.
//! - [`webhook_url`]: a webhook target.

pub mod api_key;
pub mod deadline;
pub mod events;
pub mod file_store;
pub mod ids;
pub mod model;
pub mod money;
pub mod output;
pub mod prediction;
pub mod priority;
pub mod route;
pub mod secret_inputs;
pub mod status;
pub mod surface;
pub mod training;
pub mod webhook_secret;
pub mod webhook_url;

pub use api_key::{ApiKeyValue, KeyHash, Scope};
pub use deadline::DeadlineEnd;
pub use events::WebhookEvent;
pub use file_store::FileStoreKind;
pub use ids::{AccountId, ApiKeyId, FileId, PredictionId};
pub use model::ModelRef;
pub use money::{Micros, Price};
pub use prediction::{Metrics, NewPrediction, Prediction, PredictionError, Spilled, StartedOn};
pub use priority::Priority;
pub use route::{Pool, Route};
pub use status::PredictionStatus;
pub use surface::ApiSurface;
pub use training::{JobKind, TrainedVersionRef};
pub use webhook_secret::WebhookSecret;
pub use webhook_url::WebhookUrl;
