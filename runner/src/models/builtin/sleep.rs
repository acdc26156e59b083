//! `demo/sleep` (text-generation): sleeps `seconds` (0 to 300, default 2), logging a line each
//! second; outputs `slept N s`. Cancelable at any point (the executor drops the future).

use std::time::Duration;

use futures::{FutureExt, future::BoxFuture};
use serde_json::{Map, Value, json};

use crate::models::{Model, ModelDescriptor, ModelError, ModelOutput, Progress};

/// The sleep model.
pub struct Sleep {
    descriptor: ModelDescriptor,
}

impl Sleep {
    /// The model with its descriptor.
    pub fn new() -> Self {
        Self {
            descriptor: ModelDescriptor {
                model: "demo/sleep".parse().expect("a valid built-in model name"),
                capability: "text-generation".into(),
                input_schema: json!({
                    "type": "object",
                    "properties": {
                        "seconds": {"type": "number", "default": 2, "minimum": 0, "maximum": 300,
                                    "description": "How long to sleep"},
                    }
                }),
            },
        }
    }
}

impl Default for Sleep {
    fn default() -> Self {
        Self::new()
    }
}

impl Model for Sleep {
    fn descriptor(&self) -> &ModelDescriptor {
        &self.descriptor
    }

    fn run<'a>(
        &'a self,
        input: Map<String, Value>,
        progress: &'a Progress,
    ) -> BoxFuture<'a, Result<ModelOutput, ModelError>> {
        async move {
            let seconds = input.get("seconds").and_then(Value::as_f64).unwrap_or(2.0).clamp(0.0, 300.0);
            let whole = seconds.floor() as u64;
            for i in 1..=whole {
                tokio::time::sleep(Duration::from_secs(1)).await;
                progress.log(&format!("slept {i} of {} s", fmt_seconds(seconds)));
            }
            tokio::time::sleep(Duration::from_secs_f64(seconds - whole as f64)).await;
            Ok(ModelOutput::Text(format!("slept {} s", fmt_seconds(seconds))))
        }
        .boxed()
    }
}

fn fmt_seconds(s: f64) -> String {
    if s.fract() == 0.0 { format!("{}", s as u64) } else { format!("{s}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn sleep_logs_each_second_and_reports_the_duration() {
        let progress = Progress::default();
        let input = json!({"seconds": 2.5}).as_object().cloned().expect("object");
        let out = Sleep::new().run(input, &progress).await;
        assert_eq!(out, Ok(ModelOutput::Text("slept 2.5 s".into())));
        assert_eq!(progress.logs(), "slept 1 of 2.5 s\nslept 2 of 2.5 s\n");
    }

    #[tokio::test(start_paused = true)]
    async fn zero_seconds_returns_at_once_without_logs() {
        let progress = Progress::default();
        let input = json!({"seconds": 0}).as_object().cloned().expect("object");
        assert_eq!(Sleep::new().run(input, &progress).await, Ok(ModelOutput::Text("slept 0 s".into())));
        assert_eq!(progress.logs(), "");
    }
}
