//! `demo/fail` (text-generation): always fails, with the given `message`, after logging it.

use futures::FutureExt;
use serde_json::{Map, Value, json};

use super::Builtin;
use crate::models::{ModelError, ModelOutput, Progress};

const DEFAULT_MESSAGE: &str = "demo/fail failed on purpose";

/// The `demo/fail` model.
pub fn model() -> Builtin {
    let schema = json!({
        "type": "object",
        "properties": {
            "message": {"type": "string", "default": DEFAULT_MESSAGE, "maxLength": 1000,
                        "description": "The error message to fail with"},
        }
    });
    Builtin::new("demo/fail", "text-generation", schema, |input, progress| run(input, progress).boxed())
}

async fn run(input: Map<String, Value>, progress: &Progress) -> Result<ModelOutput, ModelError> {
    let message = input.get("message").and_then(Value::as_str).unwrap_or(DEFAULT_MESSAGE);
    progress.log(&format!("about to fail: {message}"));
    Err(ModelError::model(message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::Model;

    #[tokio::test]
    async fn it_fails_with_the_given_message_and_logs_it() {
        let progress = Progress::default();
        let input = json!({"message": "boom"}).as_object().cloned().expect("object");
        assert_eq!(model().run(input, &progress).await, Err(ModelError::model("boom")));
        assert_eq!(progress.logs(), "about to fail: boom\n");
    }
}
