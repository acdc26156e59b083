//! The files of a model's output, stored: each `data:` URI in the output's JSON value, at any
//! depth (the top level, array items, object fields), becomes a file of the prediction's
//! account in the file store (same store, rules and retention as every file output: removed
//! with the prediction's data) and is replaced by that file's canonical URL, which each API
//! surface renders as its link ([`common::views::output`]). A built-in model's one file is
//! stored the same way.
//!
//! Files a Cog server uploaded while it ran ([`crate::models::cog::uploads`]) are stored
//! already; their URLs stay as they are.

use anyhow::Context;
use common::{
    domain::{ApiSurface, Prediction, output::strings_mut},
    files::NewFile,
};
use futures::StreamExt;
use serde_json::Value;

use super::Executor;
use crate::models::{ModelError, ModelOutput, file_inputs::data_uri_bytes};

/// The file extension for a media type (`bin` for one not known).
pub fn extension_of(content_type: &str) -> &'static str {
    match content_type {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "video/mp4" => "mp4",
        "audio/wav" | "audio/x-wav" => "wav",
        "audio/mpeg" => "mp3",
        "text/plain" => "txt",
        "application/json" => "json",
        _ => "bin",
    }
}

impl Executor {
    /// The stored form of `output` (see the module's doc): an `Err` of the inner result is a
    /// model's mistake (a malformed `data:` URI) that fails the prediction; an `Err` of the
    /// outer one is a storage failure.
    pub(super) async fn store_output(
        &self,
        p: &Prediction,
        output: ModelOutput,
    ) -> anyhow::Result<Result<Value, ModelError>> {
        let mut value = match output {
            ModelOutput::Text(text) => return Ok(Ok(Value::String(text))),
            ModelOutput::File { content_type, extension, bytes } => {
                return Ok(Ok(Value::String(self.store_output_file(p, 0, &content_type, &extension, bytes).await?)));
            }
            ModelOutput::Json(value) => value,
        };
        let mut index = 0;
        for s in strings_mut(&mut value) {
            if !s.starts_with("data:") {
                continue;
            }
            let Some((content_type, bytes)) = data_uri_bytes(s) else {
                return Ok(Err(ModelError::model("the model returned a malformed data: URI")));
            };
            let extension = extension_of(&content_type);
            *s = self.store_output_file(p, index, &content_type, extension, bytes).await?;
            index += 1;
        }
        Ok(Ok(value))
    }

    /// Stores file `index` of `p`'s output; returns its canonical URL.
    async fn store_output_file(
        &self,
        p: &Prediction,
        index: usize,
        content_type: &str,
        extension: &str,
        bytes: Vec<u8>,
    ) -> anyhow::Result<String> {
        let name = match index {
            0 => format!("{}.{extension}", p.id),
            n => format!("{}-{n}.{extension}", p.id),
        };
        let new = NewFile {
            account_id: p.account_id.clone(),
            name,
            content_type: content_type.to_owned(),
            metadata: String::new(),
            expires_at: None,
            prediction_id: Some(p.id.clone()),
        };
        let body = futures::stream::once(async move { Ok(bytes::Bytes::from(bytes)) }).boxed();
        let record = self.files.create(new, body, u64::MAX).await.context("storing an output file")?;
        Ok(self.links.file(&record.id, ApiSurface::Canonical))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types_name_their_extension() {
        assert_eq!(extension_of("image/png"), "png");
        assert_eq!(extension_of("audio/x-wav"), "wav");
        assert_eq!(extension_of("application/x-unknown"), "bin");
    }
}
