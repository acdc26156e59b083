//! A prediction's output as its console page shows it, from the stored value
//! ([`common::domain::output`]): text as text (an iterator's items joined), each image of a
//! list inline, an object's fields one by one (`<dd data-field="name">`) with their files as
//! links or images, anything else as pretty JSON. Files go through the console's own
//! `/files/{id}` route, which the session opens. Outputs stored as strings before values
//! render as they did (JSON text as pretty JSON).

use common::domain::FileId;
use serde_json::Value;

use super::error::ConsoleError;
use crate::state::AppState;

/// A file as the page shows it.
pub(super) struct FileView {
    pub url: String,
    pub kind: &'static str,
    pub name: String,
}

/// One field of an object output.
pub(super) struct FieldView {
    pub name: String,
    pub text: Option<String>,
    pub files: Vec<FileView>,
}

/// The output, split for the page.
#[derive(Default)]
pub(super) struct OutputView {
    pub text: Option<String>,
    pub json: Option<String>,
    pub files: Vec<FileView>,
    pub fields: Vec<FieldView>,
}

impl OutputView {
    /// Whether there is nothing to show.
    pub fn is_empty(&self) -> bool {
        self.text.is_none() && self.json.is_none() && self.files.is_empty() && self.fields.is_empty()
    }
}

/// What one value of the output is to the page.
enum Part {
    Text(String),
    Files(Vec<FileId>),
    Json(String),
}

fn part(state: &AppState, value: &Value) -> Part {
    let file = |v: &Value| v.as_str().and_then(|s| state.links.stored_file(s));
    match value {
        Value::String(s) => match state.links.stored_file(s) {
            Some(id) => Part::Files(vec![id]),
            // Stored before outputs were values: compact JSON text.
            None => match serde_json::from_str::<Value>(s) {
                Ok(json @ (Value::Array(_) | Value::Object(_))) => part(state, &json),
                _ => Part::Text(s.clone()),
            },
        },
        Value::Array(items) if !items.is_empty() && items.iter().all(|i| file(i).is_some()) => {
            Part::Files(items.iter().filter_map(file).collect())
        }
        Value::Array(items) if items.iter().all(Value::is_string) => {
            Part::Text(items.iter().filter_map(Value::as_str).collect())
        }
        Value::Number(_) | Value::Bool(_) => Part::Text(value.to_string()),
        other => Part::Json(serde_json::to_string_pretty(other).unwrap_or_default()),
    }
}

/// `stored` as the page shows it.
pub(super) async fn output_view(state: &AppState, stored: Option<&Value>) -> Result<OutputView, ConsoleError> {
    let Some(stored) = stored else { return Ok(OutputView::default()) };
    if let Value::Object(fields) = stored {
        let mut shown = Vec::new();
        for (name, value) in fields {
            let (text, files) = match part(state, value) {
                Part::Text(t) | Part::Json(t) => (Some(t), Vec::new()),
                Part::Files(ids) => (None, file_views(state, &ids).await?),
            };
            shown.push(FieldView { name: name.clone(), text, files });
        }
        return Ok(OutputView { fields: shown, ..OutputView::default() });
    }
    Ok(match part(state, stored) {
        Part::Text(text) => OutputView { text: Some(text), ..OutputView::default() },
        Part::Json(json) => OutputView { json: Some(json), ..OutputView::default() },
        Part::Files(ids) => OutputView { files: file_views(state, &ids).await?, ..OutputView::default() },
    })
}

/// How the page shows files `ids`: images and videos inline, others as links, each through the
/// console's own `/files/{id}` (loaded with the session).
pub(super) async fn file_views(state: &AppState, ids: &[FileId]) -> Result<Vec<FileView>, ConsoleError> {
    let mut files = Vec::new();
    for id in ids {
        let info = state.files.get(id).await?;
        let (kind, name) = match &info {
            Some(f) if f.content_type.starts_with("image/") => ("image", f.name.clone()),
            Some(f) if f.content_type.starts_with("video/") => ("video", f.name.clone()),
            Some(f) => ("other", f.name.clone()),
            None => ("other", format!("{id} (removed)")),
        };
        files.push(FileView { url: format!("/files/{id}"), kind, name });
    }
    Ok(files)
}
