//! Cog outputs as the service stores them: a string stays text, a `data:` URI becomes a file,
//! an iterator's chunks (an array of strings) are joined, anything else is compact JSON.

use base64::{Engine, engine::general_purpose::STANDARD};
use serde_json::Value;

use crate::models::{ModelError, ModelOutput};

/// The text to show while the model runs: a string, or the chunks so far joined.
pub fn progress_text(output: &Value) -> Option<String> {
    match output {
        Value::String(s) if !s.starts_with("data:") => Some(s.clone()),
        Value::Array(items) if items.iter().all(Value::is_string) => {
            Some(items.iter().filter_map(Value::as_str).collect::<String>())
        }
        _ => None,
    }
}

/// The final output.
pub fn convert(output: Value) -> Result<ModelOutput, ModelError> {
    match output {
        Value::String(s) if s.starts_with("data:") => data_uri(&s),
        Value::String(s) => Ok(ModelOutput::Text(s)),
        Value::Array(items) if items.iter().all(Value::is_string) => {
            Ok(ModelOutput::Text(items.iter().filter_map(Value::as_str).collect()))
        }
        other => Ok(ModelOutput::Json(other)),
    }
}

fn data_uri(uri: &str) -> Result<ModelOutput, ModelError> {
    let bad = || ModelError::model("the model returned a malformed data: URI");
    let (meta, data) = uri.strip_prefix("data:").and_then(|r| r.split_once(',')).ok_or_else(bad)?;
    let content_type = meta.strip_suffix(";base64").ok_or_else(bad)?;
    let content_type = if content_type.is_empty() { "application/octet-stream" } else { content_type };
    let bytes = STANDARD.decode(data).map_err(|_| bad())?;
    let extension = match content_type {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "video/mp4" => "mp4",
        "audio/wav" | "audio/x-wav" => "wav",
        "text/plain" => "txt",
        _ => "bin",
    };
    Ok(ModelOutput::File { content_type: content_type.to_owned(), extension: extension.into(), bytes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strings_chunks_and_json_convert() {
        assert_eq!(convert(json!("hi")).ok(), Some(ModelOutput::Text("hi".into())));
        assert_eq!(convert(json!(["a ", "b"])).ok(), Some(ModelOutput::Text("a b".into())));
        assert_eq!(convert(json!({"x": 1})).ok(), Some(ModelOutput::Json(json!({"x": 1}))));
        assert_eq!(progress_text(&json!(["tick0 ", "tick1 "])).as_deref(), Some("tick0 tick1 "));
    }

    #[test]
    fn a_data_uri_becomes_a_file() {
        let out = convert(json!("data:text/plain;base64,aGVsbG8=")).expect("valid");
        assert_eq!(
            out,
            ModelOutput::File { content_type: "text/plain".into(), extension: "txt".into(), bytes: b"hello".to_vec() }
        );
        assert!(convert(json!("data:image/png,notbase64")).is_err());
    }
}
