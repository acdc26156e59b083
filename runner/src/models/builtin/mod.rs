//! Models compiled into the runner, so the system is useful and testable without external
//! model servers. They are served and registered like any other model; nothing outside the
//! runner knows they are built in.
//!
//! Its modules:
//! - [`annotate`]: `demo/annotate` (image-to-text): an object of fields, as transcription models answer.
//! - [`chatty`]: `demo/chatty` (text-generation): as many logs and as much text as asked.
//! - [`checksum`]: `demo/checksum` (file-analysis): the SHA-256, size and media type of its `file` input.
//! - [`echo`]: `demo/echo` (text-generation).
//! - [`fail`]: `demo/fail` (text-generation).
//! - [`pattern`]: the pictures the demo image and video models draw.
//! - [`sleep`]: `demo/sleep` (text-generation): sleeps, logging each second; cancelable at any point.
//! - [`text_to_image`]: `demo/text-to-image` (text-to-image): a PNG drawn from the prompt.
//! - [`text_to_images`]: `demo/text-to-images` (text-to-image): a list of PNGs, each with its own seed.
//! - [`text_to_video`]: `demo/text-to-video` (text-to-video): an animated GIF drawn from the prompt.
//! - [`versioned`]: `demo/versioned` (text-generation): outputs the version this runner serves it as.

pub mod annotate;
pub mod chatty;
pub mod checksum;
pub mod echo;
pub mod fail;
pub mod pattern;
pub mod sleep;
pub mod text_to_image;
pub mod text_to_images;
pub mod text_to_video;
pub mod versioned;

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Map, Value};

use super::{Model, ModelDescriptor, ModelError, ModelOutput, Progress};

/// The function that runs a built-in model.
pub type RunFn = for<'a> fn(Map<String, Value>, &'a Progress) -> BoxFuture<'a, Result<ModelOutput, ModelError>>;

/// A built-in model: what it declares, and the function that runs it.
pub struct Builtin {
    descriptor: ModelDescriptor,
    run: RunFn,
}

impl Builtin {
    /// The model `name` (`owner/name`) of kind `capability` with its input schema.
    pub fn new(name: &str, capability: &str, input_schema: Value, run: RunFn) -> Self {
        let model = name.parse().expect("built-in model names are valid");
        let descriptor =
            ModelDescriptor { model, capability: capability.to_owned(), input_schema, output_schema: None };
        Self { descriptor, run }
    }

    /// The same model, declaring its output schema.
    pub fn with_output_schema(mut self, schema: Value) -> Self {
        self.descriptor.output_schema = Some(schema);
        self
    }
}

impl Model for Builtin {
    fn descriptor(&self) -> &ModelDescriptor {
        &self.descriptor
    }

    fn run<'a>(
        &'a self,
        input: Map<String, Value>,
        progress: &'a Progress,
    ) -> BoxFuture<'a, Result<ModelOutput, ModelError>> {
        (self.run)(input, progress)
    }
}

/// Runs `encode` on a blocking thread (encoding images is CPU work that must not stall the
/// async workers) and returns its bytes as a file output.
pub async fn encode_file<E: std::fmt::Display + Send + 'static>(
    content_type: &str,
    extension: &str,
    encode: impl FnOnce() -> Result<Vec<u8>, E> + Send + 'static,
) -> Result<ModelOutput, ModelError> {
    let bytes = tokio::task::spawn_blocking(encode)
        .await
        .map_err(|e| ModelError::model(format!("the {extension} encoder stopped: {e}")))?
        .map_err(|e| ModelError::model(format!("{extension} encoding failed: {e}")))?;
    Ok(ModelOutput::File { content_type: content_type.into(), extension: extension.into(), bytes })
}

/// Every built-in model, each under its derived version.
pub fn all() -> Vec<Arc<dyn Model>> {
    all_with_versions(&std::collections::HashMap::new())
}

/// Every built-in model; `demo/versioned` answers with its version in `versions` (the
/// operator's `RUNNER_MODEL_VERSIONS`) when named there.
pub fn all_with_versions(
    versions: &std::collections::HashMap<common::domain::ModelRef, String>,
) -> Vec<Arc<dyn Model>> {
    let versioned = versioned::model(None);
    let named = versions.get(&versioned.descriptor().model).map(String::as_str);
    vec![
        Arc::new(versioned::model(named)),
        Arc::new(echo::model()),
        Arc::new(sleep::model()),
        Arc::new(fail::model()),
        Arc::new(text_to_image::model()),
        Arc::new(text_to_images::model()),
        Arc::new(annotate::model()),
        Arc::new(text_to_video::model()),
        Arc::new(checksum::model()),
        Arc::new(chatty::model()),
    ]
}
