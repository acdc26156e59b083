//! `demo/annotate` (image-to-text, in spirit): an object of fields, as transcription and
//! detection models answer (a Cog `BaseModel` output): `image`, a PNG drawn from the prompt
//! (a file), `caption`, a text, and `scores`, a list of numbers. The image reaches the
//! executor as a `data:` URI inside the object and is stored as a file.

use futures::FutureExt;
use serde_json::{Map, Value, json};

use super::{Builtin, text_to_image::png};
use crate::models::{ModelError, ModelOutput, Progress, file_inputs::data_uri};

/// The `demo/annotate` model.
pub fn model() -> Builtin {
    let schema = json!({
        "type": "object",
        "required": ["prompt"],
        "properties": {
            "prompt": {"type": "string", "minLength": 1, "description": "What to annotate"},
        }
    });
    let output = json!({
        "title": "Output",
        "type": "object",
        "required": ["image", "caption", "scores"],
        "properties": {
            "image": {"title": "Image", "type": "string", "format": "uri"},
            "caption": {"title": "Caption", "type": "string"},
            "scores": {"title": "Scores", "type": "array", "items": {"type": "number"}},
        }
    });
    Builtin::new("demo/annotate", "image-to-text", schema, |input, progress| run(input, progress).boxed())
        .with_output_schema(output)
}

/// One score per word of `prompt`: its length over the longest word's, so they are known.
pub fn scores(prompt: &str) -> Vec<f64> {
    let words: Vec<&str> = prompt.split_whitespace().collect();
    let longest = words.iter().map(|w| w.chars().count()).max().unwrap_or(1).max(1) as f64;
    words.iter().map(|w| w.chars().count() as f64 / longest).collect()
}

async fn run(input: Map<String, Value>, progress: &Progress) -> Result<ModelOutput, ModelError> {
    let prompt = input.get("prompt").and_then(Value::as_str).unwrap_or_default().to_owned();
    let drawn = prompt.clone();
    let image = tokio::task::spawn_blocking(move || png(&drawn, 64, 64))
        .await
        .map_err(|e| ModelError::model(format!("the png encoder stopped: {e}")))?
        .map_err(|e| ModelError::model(format!("png encoding failed: {e}")))?;
    progress.log("annotated");
    Ok(ModelOutput::Json(json!({
        "image": data_uri("image/png", &image),
        "caption": format!("a picture of {prompt}"),
        "scores": scores(&prompt),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::Model;

    #[tokio::test]
    async fn it_answers_an_object_with_a_file_a_text_and_numbers() {
        let input = json!({"prompt": "red fox"}).as_object().cloned().expect("an object");
        let out = model().run(input, &Progress::default()).await.expect("runs");
        let ModelOutput::Json(Value::Object(fields)) = out else { panic!("an object: {out:?}") };
        assert!(fields["image"].as_str().is_some_and(|s| s.starts_with("data:image/png;base64,")));
        assert_eq!(fields["caption"], "a picture of red fox");
        assert_eq!(fields["scores"], json!([1.0, 1.0]));
        assert_eq!(scores("a bb"), vec![0.5, 1.0]);
    }
}
