//! `demo/fail` (text-generation): always fails, with the given `message`, after logging it.

use futures::{FutureExt, future::BoxFuture};
use serde_json::{Map, Value, json};

use crate::models::{Model, ModelDescriptor, ModelError, ModelOutput, Progress};

const DEFAULT_MESSAGE: &str = "demo/fail failed on purpose";

/// The failing model.
pub struct Fail {
    descriptor: ModelDescriptor,
}

impl Fail {
    /// The model with its descriptor.
    pub fn new() -> Self {
        Self {
            descriptor: ModelDescriptor {
                model: "demo/fail".parse().expect("a valid built-in model name"),
                capability: "text-generation".into(),
                input_schema: json!({
                    "type": "object",
                    "properties": {
                        "message": {"type": "string", "default": DEFAULT_MESSAGE, "maxLength": 1000,
                                    "description": "The error message to fail with"},
                    }
                }),
            },
        }
    }
}

impl Default for Fail {
    fn default() -> Self {
        Self::new()
    }
}

impl Model for Fail {
    fn descriptor(&self) -> &ModelDescriptor {
        &self.descriptor
    }

    fn run<'a>(
        &'a self,
        input: Map<String, Value>,
        progress: &'a Progress,
    ) -> BoxFuture<'a, Result<ModelOutput, ModelError>> {
        async move {
            let message = input.get("message").and_then(Value::as_str).unwrap_or(DEFAULT_MESSAGE);
            progress.log(&format!("about to fail: {message}"));
            Err(ModelError::model(message))
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn it_fails_with_the_given_message_and_logs_it() {
        let progress = Progress::default();
        let input = json!({"message": "boom"}).as_object().cloned().expect("object");
        assert_eq!(Fail::new().run(input, &progress).await, Err(ModelError::model("boom")));
        assert_eq!(progress.logs(), "about to fail: boom\n");
    }
}
