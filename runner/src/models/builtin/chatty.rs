//! `demo/chatty` (text-generation): logs `log_kib` KiB in lines of 1 KiB, then answers
//! `output_kib` KiB of text. It shows what a prediction keeps of a model that says too much
//! (`PREDICTION_MAX_LOG_BYTES`, `PREDICTION_MAX_OUTPUT_BYTES`).

use futures::FutureExt;
use serde_json::{Map, Value, json};

use super::Builtin;
use crate::models::{ModelError, ModelOutput, Progress};

/// The `demo/chatty` model.
pub fn model() -> Builtin {
    let schema = json!({
        "type": "object",
        "properties": {
            "log_kib": {"type": "integer", "default": 4, "minimum": 0, "maximum": 65536,
                        "description": "KiB of logs to write, in lines of 1 KiB"},
            "output_kib": {"type": "integer", "default": 1, "minimum": 0, "maximum": 16384,
                           "description": "KiB of text to answer"},
        }
    });
    Builtin::new("demo/chatty", "text-generation", schema, |input, progress| run(input, progress).boxed())
}

/// One line of exactly 1 KiB with its newline: its number, then filler.
fn line(n: u64) -> String {
    let head = format!("line {n:08} ");
    format!("{head}{}", "-".repeat(1023 - head.len()))
}

async fn run(input: Map<String, Value>, progress: &Progress) -> Result<ModelOutput, ModelError> {
    let kib = |name: &str, default: u64| input.get(name).and_then(Value::as_u64).unwrap_or(default);
    for n in 0..kib("log_kib", 4) {
        progress.log(&line(n));
        if n % 1024 == 1023 {
            // Let the executor store progress while the model talks, as a real one would.
            tokio::task::yield_now().await;
        }
    }
    Ok(ModelOutput::Text("x".repeat(usize::try_from(kib("output_kib", 1) * 1024).unwrap_or(usize::MAX))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::Model;

    #[tokio::test]
    async fn chatty_logs_lines_of_one_kib_and_answers_the_size_asked() {
        let progress = Progress::default();
        let input = json!({"log_kib": 3, "output_kib": 2}).as_object().cloned().expect("object");
        let out = model().run(input, &progress).await;
        assert_eq!(out.map(|o| matches!(o, ModelOutput::Text(t) if t.len() == 2048)), Ok(true));
        assert_eq!(progress.logs().len(), 3 * 1024);
        assert!(progress.logs().starts_with("line 00000000 ---"));
    }
}
