//! `demo/checksum` (file-analysis): the SHA-256, size and media type of its `file` input, a
//! file of this service, a `data:` URI or an `http(s)` URL; the runner hands it the bytes (see
//! [`crate::models::file_inputs`]). The smallest model with a file input: what it answers
//! proves which bytes it saw.

use futures::FutureExt;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::Builtin;
use crate::models::{ModelError, ModelOutput, Progress, file_inputs::data_uri_bytes};

/// The `demo/checksum` model.
pub fn model() -> Builtin {
    let schema = json!({
        "type": "object",
        "required": ["file"],
        "properties": {
            "file": {"type": "string", "format": "uri",
                     "description": "The file to hash: a file of this service, a data: URI or an http(s) URL"},
        }
    });
    let output = json!({
        "title": "Output",
        "type": "object",
        "properties": {
            "sha256": {"type": "string"},
            "size": {"type": "integer"},
            "content_type": {"type": "string"},
        }
    });
    Builtin::new("demo/checksum", "file-analysis", schema, |input, progress| run(input, progress).boxed())
        .with_output_schema(output)
}

async fn run(input: Map<String, Value>, progress: &Progress) -> Result<ModelOutput, ModelError> {
    let file = input.get("file").and_then(Value::as_str).ok_or_else(|| ModelError::model("file must be a string"))?;
    let (content_type, bytes) =
        data_uri_bytes(file).ok_or_else(|| ModelError::model("file did not reach the model as bytes"))?;
    let sha256: String = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
    progress.log(&format!("read {} bytes of {content_type}", bytes.len()));
    Ok(ModelOutput::Json(json!({"sha256": sha256, "size": bytes.len(), "content_type": content_type})))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{Model, file_inputs::data_uri};

    #[tokio::test]
    async fn it_answers_the_digest_size_and_type_of_the_bytes_it_is_handed() {
        let progress = Progress::default();
        let input = json!({"file": data_uri("text/plain", b"hello world")}).as_object().cloned().expect("object");
        let out = model().run(input, &progress).await;
        let expected = json!({
            "sha256": "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9",
            "size": 11,
            "content_type": "text/plain",
        });
        assert_eq!(out, Ok(ModelOutput::Json(expected)));
    }

    #[tokio::test]
    async fn a_url_that_was_not_resolved_to_bytes_fails_plainly() {
        let input = json!({"file": "https://example.invalid/x"}).as_object().cloned().expect("object");
        let out = model().run(input, &Progress::default()).await;
        assert_eq!(out.map_err(|e| e.code), Err("MODEL_ERROR".to_owned()));
    }
}
