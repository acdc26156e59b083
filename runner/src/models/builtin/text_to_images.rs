//! `demo/text-to-images` (text-to-image): `num_outputs` PNGs (1 to 4, default 2) drawn from
//! the prompt, each with its own seed: a list of files, as image models with `num_outputs`
//! answer (Cog's `List[Path]`). Each image reaches the executor as a `data:` URI in the list
//! and is stored as a file of its own.

use futures::FutureExt;
use serde_json::{Map, Value, json};

use super::{Builtin, text_to_image::png};
use crate::models::{ModelError, ModelOutput, Progress, file_inputs::data_uri};

/// The `demo/text-to-images` model.
pub fn model() -> Builtin {
    let schema = json!({
        "type": "object",
        "required": ["prompt"],
        "properties": {
            "prompt": {"type": "string", "minLength": 1, "description": "What to draw", "x-order": 0},
            "num_outputs": {"type": "integer", "default": 2, "minimum": 1, "maximum": 4,
                            "description": "How many images", "x-order": 1},
            "size": {"type": "integer", "default": 128, "minimum": 16, "maximum": 512,
                     "description": "Width and height in pixels", "x-order": 2},
        }
    });
    let output = json!({"title": "Output", "type": "array", "items": {"type": "string", "format": "uri"}});
    Builtin::new("demo/text-to-images", "text-to-image", schema, |input, progress| run(input, progress).boxed())
        .with_output_schema(output)
}

async fn run(input: Map<String, Value>, progress: &Progress) -> Result<ModelOutput, ModelError> {
    let prompt = input.get("prompt").and_then(Value::as_str).unwrap_or_default().to_owned();
    let count = input.get("num_outputs").and_then(Value::as_u64).unwrap_or(2).clamp(1, 4);
    let size = input.get("size").and_then(Value::as_u64).unwrap_or(128).clamp(16, 512) as u32;
    let images = tokio::task::spawn_blocking(move || {
        (0..count).map(|seed| png(&format!("{prompt} #{seed}"), size, size)).collect::<Result<Vec<_>, _>>()
    })
    .await
    .map_err(|e| ModelError::model(format!("the png encoder stopped: {e}")))?
    .map_err(|e| ModelError::model(format!("png encoding failed: {e}")))?;
    progress.log(&format!("drew {count} images of {size}x{size}"));
    Ok(ModelOutput::Json(Value::Array(images.iter().map(|png| Value::String(data_uri("image/png", png))).collect())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{Model, file_inputs::data_uri_bytes};

    #[tokio::test]
    async fn it_answers_as_many_distinct_pngs_as_asked() {
        let input = json!({"prompt": "fox", "num_outputs": 3, "size": 16}).as_object().cloned().expect("an object");
        let out = model().run(input, &Progress::default()).await.expect("runs");
        let ModelOutput::Json(Value::Array(items)) = out else { panic!("a list: {out:?}") };
        let pngs: Vec<Vec<u8>> = items
            .iter()
            .filter_map(Value::as_str)
            .filter_map(data_uri_bytes)
            .map(|(t, b)| {
                assert_eq!(t, "image/png");
                b
            })
            .collect();
        assert_eq!(pngs.len(), 3);
        assert!(pngs[0] != pngs[1] && pngs[1] != pngs[2], "each image has its own seed");
    }
}
