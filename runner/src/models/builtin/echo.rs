//! `demo/echo` (text-generation): the prompt repeated `repeat` times, joined by spaces, streamed
//! one repetition at a time.

use futures::FutureExt;
use serde_json::{Map, Value, json};

use super::Builtin;
use crate::models::{ModelError, ModelOutput, Progress};

/// The `demo/echo` model.
pub fn model() -> Builtin {
    let schema = json!({
        "type": "object",
        "required": ["prompt"],
        "properties": {
            "prompt": {"type": "string", "description": "Text to echo back"},
            "repeat": {"type": "integer", "default": 1, "minimum": 1, "maximum": 10,
                       "description": "How many times to repeat it"},
        }
    });
    Builtin::new("demo/echo", "text-generation", schema, |input, progress| run(input, progress).boxed())
}

/// The echo of `prompt`, `repeat` times.
pub fn echo(prompt: &str, repeat: u64) -> String {
    vec![prompt; repeat as usize].join(" ")
}

async fn run(input: Map<String, Value>, progress: &Progress) -> Result<ModelOutput, ModelError> {
    let prompt =
        input.get("prompt").and_then(Value::as_str).ok_or_else(|| ModelError::model("prompt must be a string"))?;
    let repeat = input.get("repeat").and_then(Value::as_u64).unwrap_or(1).clamp(1, 10);
    for i in 0..repeat {
        progress.append_output(&if i == 0 { prompt.to_owned() } else { format!(" {prompt}") });
    }
    Ok(ModelOutput::Text(echo(prompt, repeat)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::Model;

    #[tokio::test]
    async fn echo_repeats_the_prompt_joined_by_spaces_and_streams_it() {
        let progress = Progress::default();
        let input = json!({"prompt": "hi there", "repeat": 3}).as_object().cloned().expect("object");
        let out = model().run(input, &progress).await;
        assert_eq!(out, Ok(ModelOutput::Text("hi there hi there hi there".into())));
        assert_eq!(progress.output(), Some(Value::from("hi there hi there hi there")));
    }

    #[test]
    fn one_repetition_is_the_prompt_itself() {
        assert_eq!(echo("x", 1), "x");
    }
}
