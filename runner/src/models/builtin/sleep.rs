//! `demo/sleep` (text-generation): sleeps `seconds` (0 to 300, default 2), logging a line each
//! second unless `quiet`; outputs `slept N s`. Cancelable at any point (the executor drops the
//! future). A quiet sleep is a model that says nothing while it runs, so the runner learns of a
//! cancel only through the broadcast or its status check.

use std::time::Duration;

use futures::FutureExt;
use serde_json::{Map, Value, json};

use super::Builtin;
use crate::models::{ModelError, ModelOutput, Progress};

/// The `demo/sleep` model.
pub fn model() -> Builtin {
    let schema = json!({
        "type": "object",
        "properties": {
            "seconds": {"type": "number", "default": 2, "minimum": 0, "maximum": 300,
                        "description": "How long to sleep"},
            "quiet": {"type": "boolean", "default": false, "description": "Log nothing while sleeping"},
        }
    });
    Builtin::new("demo/sleep", "text-generation", schema, |input, progress| run(input, progress).boxed())
}

async fn run(input: Map<String, Value>, progress: &Progress) -> Result<ModelOutput, ModelError> {
    let seconds = input.get("seconds").and_then(Value::as_f64).unwrap_or(2.0).clamp(0.0, 300.0);
    let quiet = input.get("quiet").and_then(Value::as_bool).unwrap_or(false);
    let whole = seconds.floor() as u64;
    for i in 1..=whole {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if !quiet {
            progress.log(&format!("slept {i} of {} s", fmt_seconds(seconds)));
        }
    }
    tokio::time::sleep(Duration::from_secs_f64(seconds - whole as f64)).await;
    Ok(ModelOutput::Text(format!("slept {} s", fmt_seconds(seconds))))
}

fn fmt_seconds(s: f64) -> String {
    if s.fract() == 0.0 { format!("{}", s as u64) } else { format!("{s}") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::Model;

    #[tokio::test(start_paused = true)]
    async fn sleep_logs_each_second_and_reports_the_duration() {
        let progress = Progress::default();
        let input = json!({"seconds": 2.5}).as_object().cloned().expect("object");
        let out = model().run(input, &progress).await;
        assert_eq!(out, Ok(ModelOutput::Text("slept 2.5 s".into())));
        assert_eq!(progress.logs(), "slept 1 of 2.5 s\nslept 2 of 2.5 s\n");
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_sleep_logs_nothing() {
        let progress = Progress::default();
        let input = json!({"seconds": 2, "quiet": true}).as_object().cloned().expect("object");
        assert_eq!(model().run(input, &progress).await, Ok(ModelOutput::Text("slept 2 s".into())));
        assert_eq!(progress.logs(), "");
    }

    #[tokio::test(start_paused = true)]
    async fn zero_seconds_returns_at_once_without_logs() {
        let progress = Progress::default();
        let input = json!({"seconds": 0}).as_object().cloned().expect("object");
        assert_eq!(model().run(input, &progress).await, Ok(ModelOutput::Text("slept 0 s".into())));
        assert_eq!(progress.logs(), "");
    }
}
