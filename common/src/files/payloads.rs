//! A prediction's values too large for its document: an input (as submitted and as the model
//! gets it) or an output whose compact JSON passes [`INLINE_MAX_BYTES`] (as
//! [`estimated_json_len`] counts it: escapes aside) is kept as a file of
//! JSON in the file store (GridFS or S3, wherever new files go), and the document holds `null`
//! in its place and the file's id in `spilled` ([`crate::domain::prediction::Spilled`]). So a prediction document stays
//! small whatever the payload: MongoDB's 16 MiB cap on a document no longer bounds a
//! prediction, and the database (the embedded stand-in above all) keeps small documents.
//!
//! Whatever shows a prediction shows it whole: [`Payloads::fill`] reads the spilled values back
//! into a prediction read from the store (the API, webhooks, `Prefer: wait`, streams, the
//! console, the runner's model input). A payload file is a file of the prediction's account
//! whose record says `payload` and names the prediction: never listed, never taken for one of
//! its output files, and deleted with the prediction's data by the retention sweep. Its
//! bytes are written without checksums (no client downloads it; the api answers 404 for it).
//!
//! A payload file never changes once written (a new output is a new file), so each process
//! keeps the payloads it last wrote or read, up to [`CACHE_BYTES`] of JSON: the read that
//! follows a create, and a notifier's body of each event of one prediction, read the store
//! once, not once each.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};

use super::{FileBody, Files, FilesError, NewFile};
use crate::domain::{FileId, Prediction};

/// The largest compact JSON kept in a prediction's document (64 KiB): past it, into the file
/// store.
pub const INLINE_MAX_BYTES: usize = 64 * 1024;

/// The largest payload file read back (a payload is at most the input's or the output's own
/// limit; this only stops a damaged record from being read whole).
const READ_MAX_BYTES: u64 = 1 << 30;

/// The most payload JSON a process keeps in memory (as [`estimated_json_len`] counts it).
pub const CACHE_BYTES: u64 = 32 * 1024 * 1024;

/// About the length of `value`'s compact JSON, from its shape alone: each string's bytes and
/// quotes, each number's digits, the punctuation. It leaves out escapes, so it is at most the
/// real length (a string of quotes or control characters grows when written). Its cost is per
/// value, not per byte: it decides whether a value is kept inline without writing it.
pub fn estimated_json_len(value: &Value) -> usize {
    match value {
        Value::Null => 4,
        Value::Bool(b) => {
            if *b {
                4
            } else {
                5
            }
        }
        Value::Number(n) => n.to_string().len(),
        Value::String(s) => s.len() + 2,
        Value::Array(items) => 2 + items.len().saturating_sub(1) + items.iter().map(estimated_json_len).sum::<usize>(),
        Value::Object(fields) => {
            2 + fields.len().saturating_sub(1)
                + fields.iter().map(|(name, v)| name.len() + 3 + estimated_json_len(v)).sum::<usize>()
        }
    }
}

/// The length of `value`'s compact JSON, counted without building it.
pub fn json_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

/// Keeps and reads back the spilled values of predictions. Clones share one cache.
#[derive(Clone)]
pub struct Payloads {
    files: Files,
    /// Payloads last written or read, by file ([`CACHE_BYTES`]).
    cache: moka::sync::Cache<FileId, Arc<Value>>,
}

impl std::fmt::Debug for Payloads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Payloads").field("files", &self.files).field("cached", &self.cache.entry_count()).finish()
    }
}

impl Payloads {
    /// Payloads in `files`' store.
    pub fn new(files: Files) -> Self {
        let cache = moka::sync::Cache::builder()
            .max_capacity(CACHE_BYTES)
            .weigher(|_, value: &Arc<Value>| u32::try_from(estimated_json_len(value)).unwrap_or(u32::MAX))
            .build();
        Self { files, cache }
    }

    /// The form in which new prediction `p` is stored: `p` itself when its input is small;
    /// else a copy whose `input` and `model_input` are `null`, with both written first to a
    /// payload file named in `spilled.input`. `p` stays whole (it answers the create).
    pub async fn stored_form(&self, p: &Prediction) -> Result<Option<Prediction>, FilesError> {
        let size = estimated_json_len(&p.input).saturating_add(estimated_json_len(&p.model_input));
        if size <= INLINE_MAX_BYTES {
            return Ok(None);
        }
        // Boxed: the write's future is large, and most predictions never take this step.
        Box::pin(self.spill_input(p)).await.map(Some)
    }

    /// `p`'s stored form with its input in a payload file (see [`Self::stored_form`]).
    async fn spill_input(&self, p: &Prediction) -> Result<Prediction, FilesError> {
        // The model's input is most often the input itself: then it is kept once.
        let both = match p.model_input == p.input {
            true => json!({ "input": &p.input }),
            false => json!({ "input": &p.input, "model_input": &p.model_input }),
        };
        let file = self.put(p, "input.json", &both).await?;
        self.cache.insert(file.clone(), Arc::new(both));
        let mut stored = p.clone();
        stored.input = Value::Null;
        stored.model_input = Value::Null;
        stored.spilled.input = Some(file);
        Ok(stored)
    }

    /// Writes `output` of prediction `p` to a payload file when it is too large for the
    /// document; the file, or `None` when the output stays inline.
    pub async fn spill_output(&self, p: &Prediction, output: &Value) -> Result<Option<FileId>, FilesError> {
        if estimated_json_len(output) <= INLINE_MAX_BYTES {
            return Ok(None);
        }
        Box::pin(self.put(p, "output.json", output)).await.map(Some)
    }

    /// Reads the spilled values of `p` back into it: each field that is `null` as stored and
    /// whose value `spilled` names. A prediction with nothing spilled is left as it is, at no
    /// cost.
    pub async fn fill(&self, p: &mut Prediction) -> Result<(), FilesError> {
        if let Some(file) = &p.spilled.input
            && p.input.is_null()
            && let Some(both) = self.read(file).await?
        {
            p.input = both.get("input").cloned().unwrap_or(Value::Null);
            p.model_input = match both.get("model_input") {
                Some(model_input) => model_input.clone(),
                None => p.input.clone(),
            };
        }
        self.fill_output(p).await
    }

    /// Reads the spilled output of `p` back into it, not its input: what a stream shows.
    pub async fn fill_output(&self, p: &mut Prediction) -> Result<(), FilesError> {
        if let Some(file) = &p.spilled.output
            && p.output.is_none()
        {
            p.output = self.read(file).await?.map(Arc::unwrap_or_clone);
        }
        Ok(())
    }

    /// `p` with its spilled values read back ([`Self::fill`]).
    pub async fn whole(&self, mut p: Prediction) -> Result<Prediction, FilesError> {
        self.fill(&mut p).await?;
        Ok(p)
    }

    /// Deletes payload file `file` (an output replaced, or a create whose prediction was not
    /// stored); a failure is logged (the retention sweep removes it with the prediction's
    /// data).
    pub async fn discard(&self, file: &FileId) {
        if let Err(e) = self.files.delete(file).await {
            tracing::warn!(file_id = %file, error = %e, "a payload file stays until the retention sweep");
        }
    }

    async fn put(&self, p: &Prediction, name: &str, value: &Value) -> Result<FileId, FilesError> {
        let bytes = Bytes::from(serde_json::to_vec(value).map_err(|e| FilesError::Payload(e.to_string()))?);
        let new = NewFile {
            account_id: p.account_id.clone(),
            name: name.to_owned(),
            content_type: "application/json".to_owned(),
            metadata: String::new(),
            expires_at: None,
            prediction_id: Some(p.id.clone()),
        };
        let length = bytes.len() as u64;
        let body = FileBody::sized(Box::pin(futures::stream::once(async move { Ok(bytes) })), length);
        let body = body.without_checksums();
        let stored = self.files.put_bytes(name, body, u64::MAX).await?;
        Ok(self.files.add_record_as(stored, new, true).await?.id)
    }

    /// Payload `file`, from the cache if there; `None` when it is gone (the retention sweep
    /// deletes a prediction's files just before it removes its data: the value shows as
    /// removed).
    async fn read(&self, file: &FileId) -> Result<Option<Arc<Value>>, FilesError> {
        if let Some(value) = self.cache.get(file) {
            return Ok(Some(value));
        }
        let Some(record) = self.files.get(file).await? else {
            tracing::warn!(file_id = %file, "a payload file is gone; its value shows as removed");
            return Ok(None);
        };
        if u64::try_from(record.size).unwrap_or(u64::MAX) > READ_MAX_BYTES {
            return Err(FilesError::Payload(format!("payload file {file} is larger than any payload")));
        }
        let bytes = self.files.read_all(&record).await?;
        let value: Value =
            serde_json::from_slice(&bytes).map_err(|e| FilesError::Payload(format!("payload file {file}: {e}")))?;
        let value = Arc::new(value);
        self.cache.insert(file.clone(), value.clone());
        Ok(Some(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_is_the_compact_length_of_values_without_escapes_and_never_more() {
        let plain = json!({"prompt": "a cat", "n": [1, 2.5, -3], "ok": true, "no": false, "none": null, "o": {}});
        assert_eq!(estimated_json_len(&plain), json_len(&plain));
        let escaped = json!({"q": "say \"hi\"\n"});
        assert!(estimated_json_len(&escaped) < json_len(&escaped));
        let big = json!({"prompt": "p".repeat(INLINE_MAX_BYTES)});
        assert!(estimated_json_len(&big) > INLINE_MAX_BYTES);
    }
}
