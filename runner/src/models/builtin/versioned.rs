//! `demo/versioned` (text-generation): sleeps `seconds` (0 to 60, default 0) and outputs
//! `version <id>`, the version this runner serves it as (`RUNNER_MODEL_VERSIONS`, or the digest
//! of its registration). Two runners serving two versions of it side by side show which runner
//! ran a prediction: the rollout tests check that each ran on the version it names.

use std::time::Duration;

use futures::{FutureExt, future::BoxFuture};
use serde_json::{Map, Value, json};

use crate::models::{Model, ModelDescriptor, ModelError, ModelOutput, Progress};

/// The `demo/versioned` model as one version.
pub struct Versioned {
    descriptor: ModelDescriptor,
    version: String,
}

/// The model, served as `version` (the derived one when `None`).
pub fn model(version: Option<&str>) -> Versioned {
    let input_schema = json!({
        "type": "object",
        "properties": {
            "seconds": {"type": "number", "default": 0, "minimum": 0, "maximum": 60,
                        "description": "How long to run before answering"},
        }
    });
    let descriptor = ModelDescriptor {
        model: "demo/versioned".parse().expect("a valid name"),
        capability: "text-generation".into(),
        input_schema,
        output_schema: None,
    };
    let version = version.map_or_else(|| descriptor.record(None).version, str::to_owned);
    Versioned { descriptor, version }
}

impl Model for Versioned {
    fn descriptor(&self) -> &ModelDescriptor {
        &self.descriptor
    }

    fn run<'a>(
        &'a self,
        input: Map<String, Value>,
        _progress: &'a Progress,
    ) -> BoxFuture<'a, Result<ModelOutput, ModelError>> {
        let seconds = input.get("seconds").and_then(Value::as_f64).unwrap_or(0.0).clamp(0.0, 60.0);
        async move {
            tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
            Ok(ModelOutput::Text(format!("version {}", self.version)))
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn it_answers_with_the_version_it_is_served_as() {
        let progress = Progress::default();
        let named = model(Some("v2")).run(Map::new(), &progress).await;
        assert_eq!(named, Ok(ModelOutput::Text("version v2".into())));
        let derived = model(None);
        let expected = format!("version {}", derived.descriptor().record(None).version);
        assert_eq!(derived.run(Map::new(), &progress).await, Ok(ModelOutput::Text(expected)));
    }
}
