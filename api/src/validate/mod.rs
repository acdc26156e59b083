//! Turning request bodies into typed requests, reporting every failing field at once.
//!
//! - [`body`]: the JSON body itself (content type, syntax, an object at the top).
//! - [`input`]: a prediction's `input` against the model's JSON Schema; [`file_inputs`]: the
//!   files of this service it names, checked against the caller's account.
//! - [`create_prediction`]: the create-prediction request as a whole; [`create_training`]: a
//!   training's, its `destination` beside the same fields.
//! - [`paging`]: `limit` and `offset` of every list; [`list_predictions`] adds `status`.

pub mod body;
pub mod create_api_key;
pub mod create_model;
pub mod create_prediction;
pub mod create_training;
pub mod deployment;
pub mod file_inputs;
pub mod input;
pub mod list_predictions;
pub mod paging;
pub mod usage_query;
