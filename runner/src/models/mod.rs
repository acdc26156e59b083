//! What a model is to the runner: a descriptor (address, capability, input schema) and a
//! `run` that turns the validated input into an output, reporting logs and partial output
//! through a [`Progress`] as it goes. Cancellation is the executor's job: it drops the `run`
//! future, so a model needs no cancel handling of its own.
//!
//! Its modules:
//! - [`builtin`]: models compiled into the runner, so the system is useful and testable without external
//!   model servers.
//! - [`cog`]: models served by Cog HTTP servers.
//! - [`file_inputs`]: what a model receives for a file input.

pub mod builtin;
pub mod cog;
pub mod file_inputs;

use futures::future::BoxFuture;
use serde_json::{Map, Value};

use common::domain::ModelRef;

pub use crate::progress::Progress;

/// What a model declares about itself.
#[derive(Debug, Clone)]
pub struct ModelDescriptor {
    /// Its address.
    pub model: ModelRef,
    /// Its kind, e.g. `text-generation`.
    pub capability: String,
    /// Its input JSON Schema.
    pub input_schema: Value,
    /// Its output JSON Schema (a Cog model's `Output`, with `x-cog-array-type` and
    /// `x-cog-array-display`), which clients read to tell an iterator from a list.
    pub output_schema: Option<Value>,
}

impl ModelDescriptor {
    /// Its registration: under `version` when the operator names one
    /// (`RUNNER_MODEL_VERSIONS`), else under the digest of what it declares.
    pub fn record(&self, version: Option<&str>) -> common::store::ModelRecord {
        let record = common::store::ModelRecord::new(self.model.clone(), &self.capability, &self.input_schema)
            .with_output_schema(self.output_schema.as_ref());
        match version {
            Some(v) => record.with_version(v),
            None => record,
        }
    }
}

/// What a model produced.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelOutput {
    /// Text.
    Text(String),
    /// Any JSON value (an iterator's items, an object's fields, a number): each `data:` URI
    /// in it, at any depth, is stored as a file and becomes that file's URL.
    Json(Value),
    /// A file, stored in the file store; the output becomes its URL.
    File {
        /// Its media type, e.g. `image/png`.
        content_type: String,
        /// Its file extension, e.g. `png`.
        extension: String,
        /// Its contents.
        bytes: Vec<u8>,
    },
}

/// A model's failure: a code and a message, recorded on the prediction.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ModelError {
    /// Machine-readable, e.g. `MODEL_ERROR`.
    pub code: String,
    /// What went wrong.
    pub message: String,
}

impl ModelError {
    /// A failure of the model itself.
    pub fn model(message: impl Into<String>) -> Self {
        Self { code: "MODEL_ERROR".into(), message: message.into() }
    }

    /// The end of a job at its deadline.
    pub fn deadline(end: common::domain::DeadlineEnd) -> Self {
        let error = end.error();
        Self { code: error.code, message: error.message }
    }
}

/// A model the runner can serve.
pub trait Model: Send + Sync {
    /// What the model declares.
    fn descriptor(&self) -> &ModelDescriptor;

    /// How it reads file inputs (see [`file_inputs`]): built-in models are handed the bytes.
    fn file_access(&self) -> file_inputs::FileAccess {
        file_inputs::FileAccess::Bytes
    }

    /// What must happen before a job of it may start, if anything: a model whose server is not
    /// up boots it here (the prediction stays `starting` meanwhile; a failed boot fails it).
    /// `None` (every built-in model, a server that is up) costs nothing.
    fn prepare(&self) -> Option<BoxFuture<'_, Result<(), ModelError>>> {
        None
    }

    /// The output of the latest boot of its server (its start, its setup's lines, how it
    /// ended), for the head of the logs of a prediction that waited for it; `None` for a
    /// model that never boots.
    fn boot_log(&self) -> Option<String> {
        None
    }

    /// The version it is registered under when the operator names none
    /// (`RUNNER_MODEL_VERSIONS`): a Cog project's digest; else the digest of its descriptor.
    fn version(&self) -> Option<&str> {
        None
    }

    /// How many of its jobs may run at once here, when the model itself says (a Cog project's
    /// `concurrency.max`); else `RUNNER_MODEL_CONCURRENCY`.
    fn slots(&self) -> Option<usize> {
        None
    }

    /// Runs on `input` (validated by the api against the schema, defaults applied, file
    /// inputs resolved for its [`Model::file_access`]).
    fn run<'a>(
        &'a self,
        input: Map<String, Value>,
        progress: &'a Progress,
    ) -> BoxFuture<'a, Result<ModelOutput, ModelError>>;
}
