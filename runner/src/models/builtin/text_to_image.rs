//! `demo/text-to-image` (text-to-image): a real PNG of `width` × `height` (16 to 1024, default
//! 256) drawn from the prompt (see [`super::pattern`]).

use futures::FutureExt;
use serde_json::{Map, Value, json};

use super::{Builtin, encode_file, pattern::Pattern};
use crate::models::{ModelError, ModelOutput, Progress};

/// The `demo/text-to-image` model.
pub fn model() -> Builtin {
    let schema = json!({
        "type": "object",
        "required": ["prompt"],
        "properties": {
            "prompt": {"type": "string", "minLength": 1, "description": "What to draw"},
            "width": {"type": "integer", "default": 256, "minimum": 16, "maximum": 1024},
            "height": {"type": "integer", "default": 256, "minimum": 16, "maximum": 1024},
        }
    });
    Builtin::new("demo/text-to-image", "text-to-image", schema, |input, progress| run(input, progress).boxed())
}

/// A PNG of `prompt`'s pattern.
pub fn png(prompt: &str, width: u32, height: u32) -> Result<Vec<u8>, png::EncodingError> {
    let mut bytes = Vec::new();
    let mut encoder = png::Encoder::new(&mut bytes, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(&Pattern::of(prompt).frame(width, height, 0.0))?;
    writer.finish()?;
    Ok(bytes)
}

fn dimension(input: &Map<String, Value>, key: &str) -> u32 {
    input.get(key).and_then(Value::as_u64).unwrap_or(256).clamp(16, 1024) as u32
}

async fn run(input: Map<String, Value>, progress: &Progress) -> Result<ModelOutput, ModelError> {
    let prompt = input.get("prompt").and_then(Value::as_str).unwrap_or_default().to_owned();
    let (width, height) = (dimension(&input, "width"), dimension(&input, "height"));
    progress.log(&format!("drawing {width}x{height}"));
    encode_file("image/png", "png", move || png(&prompt, width, height)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_png_decodes_to_the_requested_size() {
        let bytes = png("a red fox", 40, 24).expect("encodes");
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let reader = decoder.read_info().expect("a valid PNG");
        assert_eq!((reader.info().width, reader.info().height), (40, 24));
    }
}
