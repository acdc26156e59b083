//! `demo/text-to-video` (text-to-video): an animated GIF of `frames` frames (1 to 60, default
//! 12) of `width` × `height` (16 to 256, default 128) at `fps` (1 to 25, default 8), the
//! prompt's pattern moving (see [`super::pattern`]).

use futures::FutureExt;
use serde_json::{Map, Value, json};

use super::{Builtin, encode_file, pattern::Pattern};
use crate::models::{ModelError, ModelOutput, Progress};

/// The `demo/text-to-video` model.
pub fn model() -> Builtin {
    let schema = json!({
        "type": "object",
        "required": ["prompt"],
        "properties": {
            "prompt": {"type": "string", "minLength": 1, "description": "What to animate"},
            "frames": {"type": "integer", "default": 12, "minimum": 1, "maximum": 60},
            "width": {"type": "integer", "default": 128, "minimum": 16, "maximum": 256},
            "height": {"type": "integer", "default": 128, "minimum": 16, "maximum": 256},
            "fps": {"type": "integer", "default": 8, "minimum": 1, "maximum": 25},
        }
    });
    Builtin::new("demo/text-to-video", "text-to-video", schema, |input, progress| run(input, progress).boxed())
}

/// An endlessly looping GIF of `prompt`'s pattern.
pub fn gif(prompt: &str, width: u16, height: u16, frames: u32, fps: u32) -> Result<Vec<u8>, gif::EncodingError> {
    let pattern = Pattern::of(prompt);
    let mut bytes = Vec::new();
    {
        let mut encoder = gif::Encoder::new(&mut bytes, width, height, &[])?;
        encoder.set_repeat(gif::Repeat::Infinite)?;
        for i in 0..frames {
            let rgb = pattern.frame(u32::from(width), u32::from(height), f64::from(i) / f64::from(frames));
            let mut frame = gif::Frame::from_rgb_speed(width, height, &rgb, 10);
            frame.delay = (100 / fps.max(1)) as u16;
            encoder.write_frame(&frame)?;
        }
    }
    Ok(bytes)
}

fn number(input: &Map<String, Value>, key: &str, default: u64, min: u64, max: u64) -> u64 {
    input.get(key).and_then(Value::as_u64).unwrap_or(default).clamp(min, max)
}

async fn run(input: Map<String, Value>, progress: &Progress) -> Result<ModelOutput, ModelError> {
    let prompt = input.get("prompt").and_then(Value::as_str).unwrap_or_default().to_owned();
    let frames = number(&input, "frames", 12, 1, 60) as u32;
    let width = number(&input, "width", 128, 16, 256) as u16;
    let height = number(&input, "height", 128, 16, 256) as u16;
    let fps = number(&input, "fps", 8, 1, 25) as u32;
    progress.log(&format!("rendering {frames} frames of {width}x{height} at {fps} fps"));
    encode_file("image/gif", "gif", move || gif(&prompt, width, height, frames, fps)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gif_has_the_requested_frames_and_size() {
        let bytes = gif("waves", 32, 20, 5, 10).expect("encodes");
        let mut options = gif::DecodeOptions::new();
        options.set_color_output(gif::ColorOutput::RGBA);
        let mut decoder = options.read_info(std::io::Cursor::new(bytes)).expect("a valid GIF");
        assert_eq!((decoder.width(), decoder.height()), (32, 20));
        let mut frames = 0;
        while let Some(frame) = decoder.read_next_frame().expect("a frame") {
            assert_eq!(frame.delay, 10);
            frames += 1;
        }
        assert_eq!(frames, 5);
    }
}
