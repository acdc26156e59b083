//! `demo/echo` (text-generation): the prompt repeated `repeat` times, joined by spaces, streamed
//! one repetition at a time.

use futures::{FutureExt, future::BoxFuture};
use serde_json::{Map, Value, json};

use crate::models::{Model, ModelDescriptor, ModelError, ModelOutput, Progress};

/// The echo model.
pub struct Echo {
    descriptor: ModelDescriptor,
}

impl Echo {
    /// The model with its descriptor.
    pub fn new() -> Self {
        Self {
            descriptor: ModelDescriptor {
                model: "demo/echo".parse().expect("a valid built-in model name"),
                capability: "text-generation".into(),
                input_schema: json!({
                    "type": "object",
                    "required": ["prompt"],
                    "properties": {
                        "prompt": {"type": "string", "description": "Text to echo back"},
                        "repeat": {"type": "integer", "default": 1, "minimum": 1, "maximum": 10,
                                   "description": "How many times to repeat it"},
                    }
                }),
            },
        }
    }
}

impl Default for Echo {
    fn default() -> Self {
        Self::new()
    }
}

/// The echo of `prompt`, `repeat` times.
pub fn echo(prompt: &str, repeat: u64) -> String {
    vec![prompt; repeat as usize].join(" ")
}

impl Model for Echo {
    fn descriptor(&self) -> &ModelDescriptor {
        &self.descriptor
    }

    fn run<'a>(
        &'a self,
        input: Map<String, Value>,
        progress: &'a Progress,
    ) -> BoxFuture<'a, Result<ModelOutput, ModelError>> {
        async move {
            let prompt = input
                .get("prompt")
                .and_then(Value::as_str)
                .ok_or_else(|| ModelError::model("prompt must be a string"))?;
            let repeat = input.get("repeat").and_then(Value::as_u64).unwrap_or(1).clamp(1, 10);
            for i in 0..repeat {
                progress.append_output(&if i == 0 { prompt.to_owned() } else { format!(" {prompt}") });
            }
            Ok(ModelOutput::Text(echo(prompt, repeat)))
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn echo_repeats_the_prompt_joined_by_spaces_and_streams_it() {
        let progress = Progress::default();
        let input = json!({"prompt": "hi there", "repeat": 3}).as_object().cloned().expect("object");
        let out = Echo::new().run(input, &progress).await;
        assert_eq!(out, Ok(ModelOutput::Text("hi there hi there hi there".into())));
        assert_eq!(progress.output().as_deref(), Some("hi there hi there hi there"));
    }

    #[test]
    fn one_repetition_is_the_prompt_itself() {
        assert_eq!(echo("x", 1), "x");
    }
}
