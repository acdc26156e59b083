//! Models compiled into the runner, so the system is useful and testable without external
//! model servers. They are served and registered like any other model; nothing outside the
//! runner knows they are built in.

pub mod checksum;
pub mod echo;
pub mod fail;
pub mod pattern;
pub mod sleep;
pub mod text_to_image;
pub mod text_to_video;

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
        Self { descriptor: ModelDescriptor { model, capability: capability.to_owned(), input_schema }, run }
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

/// Every built-in model.
pub fn all() -> Vec<Arc<dyn Model>> {
    vec![
        Arc::new(echo::model()),
        Arc::new(sleep::model()),
        Arc::new(fail::model()),
        Arc::new(text_to_image::model()),
        Arc::new(text_to_video::model()),
        Arc::new(checksum::model()),
    ]
}
