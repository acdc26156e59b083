//! The models pages: the list of registered models (`/models`), and per model a "Run" form
//! generated from its input schema (`/models/{owner}/{name}`): a number field with its
//! minimum, maximum and default for `number`/`integer`, a checkbox for `boolean`, a list for an
//! `enum`, a file picker for a `format: uri` string (the file is uploaded with the form, then
//! its URL is the input), a text area for other strings. Submitting it (scope `write`) validates and creates
//! the prediction exactly as the API does ([`crate::submit`]), then opens its page; a bad value
//! shows the form again with the field's error under it. The page lists the model's versions,
//! which of them are live (a runner serving it is alive) and which one the form runs (the
//! latest).

use std::collections::HashMap;

use askama::Template;
use axum::{
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use common::domain::{ApiSurface, ModelRef, Scope};
use serde_json::{Map, Value, json};

use super::{
    csrf::ConsoleAction,
    error::ConsoleError,
    page::{Chrome, html, see_other},
    session::Signed,
};
use crate::{error::ApiError, models::RegisteredModel, state::AppState, submit};

/// One registered model in the list.
struct ModelRow {
    name: String,
    capability: String,
}

#[derive(Template)]
#[template(path = "models.html")]
struct ListPage {
    chrome: Chrome,
    models: Vec<ModelRow>,
}

/// `GET /models`
pub async fn list(State(state): State<AppState>, signed: Signed) -> Result<Response, ConsoleError> {
    let (records, _) = state.store.models().list(0, 100).await.map_err(anyhow::Error::from)?;
    let models =
        records.iter().map(|r| ModelRow { name: r.model.to_string(), capability: r.capability.clone() }).collect();
    Ok(html(&ListPage { chrome: signed.chrome("models"), models }))
}

/// One input of the run form.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// The input's name.
    pub name: String,
    /// `number`, `integer`, `boolean`, `enum`, `file` or `text`.
    pub kind: &'static str,
    /// What the field shows: the value sent last, else the default.
    pub value: String,
    /// `min`/`max` for number fields.
    pub min: Option<String>,
    /// The largest value allowed.
    pub max: Option<String>,
    /// The choices of an enum.
    pub options: Vec<String>,
    /// The schema's description.
    pub description: String,
    /// Whether the schema requires it.
    pub required: bool,
    /// The error of the last submission for this field.
    pub error: Option<String>,
}

fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The form's fields, from a JSON Schema's `properties` (ordered by `x-order`, then name).
pub fn fields(schema: &Value) -> Vec<Field> {
    let required: Vec<&str> =
        schema["required"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let mut properties: Vec<(&String, &Value)> =
        schema["properties"].as_object().map(|p| p.iter().collect()).unwrap_or_default();
    properties.sort_by_key(|(name, p)| (p["x-order"].as_i64().unwrap_or(i64::MAX), (*name).clone()));
    properties
        .into_iter()
        .map(|(name, p)| {
            let options: Vec<String> =
                p["enum"].as_array().map(|e| e.iter().map(text_of).collect()).unwrap_or_default();
            let kind = match p["type"].as_str() {
                _ if !options.is_empty() => "enum",
                Some("number") => "number",
                Some("integer") => "integer",
                Some("boolean") => "boolean",
                Some("string") if p["format"].as_str() == Some("uri") => "file",
                _ => "text",
            };
            Field {
                name: name.clone(),
                kind,
                value: text_of(&p["default"]),
                min: p.get("minimum").map(text_of),
                max: p.get("maximum").map(text_of),
                options,
                description: p["description"].as_str().unwrap_or_default().to_owned(),
                required: required.contains(&name.as_str()),
                error: None,
            }
        })
        .collect()
}

/// The prediction input a submitted form means: numbers as numbers (a value that is not one is
/// passed on as text, so validation names the field), booleans from checkboxes, empty fields
/// left out (their defaults apply).
pub fn input_of(fields: &[Field], form: &HashMap<String, String>) -> Map<String, Value> {
    let mut input = Map::new();
    for field in fields {
        let raw = form.get(&field.name).map(|v| v.trim()).unwrap_or_default();
        let value = match field.kind {
            "boolean" => Value::Bool(!raw.is_empty()),
            _ if raw.is_empty() => continue,
            "integer" => raw.parse::<i64>().map(Value::from).unwrap_or_else(|_| json!(raw)),
            "number" => {
                raw.parse::<f64>().ok().and_then(serde_json::Number::from_f64).map_or_else(|| json!(raw), Value::Number)
            }
            _ => json!(raw),
        };
        input.insert(field.name.clone(), value);
    }
    input
}

#[derive(Template)]
#[template(path = "model.html")]
struct RunPage {
    chrome: Chrome,
    name: String,
    capability: String,
    can_run: bool,
    fields: Vec<Field>,
    error: Option<String>,
    versions: Vec<VersionRow>,
}

/// One version of the model on its page.
struct VersionRow {
    id: String,
    created: String,
    /// A runner serving it is alive.
    live: bool,
    /// The model's route runs it.
    latest: bool,
}

/// The model's versions, newest first, with which are live and which is the latest.
async fn versions(state: &AppState, model: &RegisteredModel) -> Result<Vec<VersionRow>, ConsoleError> {
    let records = state.store.model_versions().list_for(&model.record.model).await.map_err(anyhow::Error::from)?;
    let snapshot = state.models.live.snapshot().await?;
    let live = snapshot.versions.get(&model.record.model);
    Ok(records
        .iter()
        .map(|v| VersionRow {
            id: v.id.clone(),
            created: v.created_at.to_chrono().format("%Y-%m-%d %H:%M UTC").to_string(),
            live: live.is_some_and(|l| l.contains(&v.id)),
            latest: v.id == model.record.version,
        })
        .collect())
}

async fn model(state: &AppState, owner: &str, name: &str) -> Result<std::sync::Arc<RegisteredModel>, ConsoleError> {
    let missing = || ConsoleError::NotFound(format!("Model {owner}/{name} not found."));
    let model_ref = ModelRef::new(owner, name).map_err(|_| missing())?;
    state.models.get(&model_ref).await?.ok_or_else(missing)
}

/// `GET /models/{owner}/{name}`
pub async fn form(
    State(state): State<AppState>,
    signed: Signed,
    Path((owner, name)): Path<(String, String)>,
) -> Result<Response, ConsoleError> {
    let model = model(&state, &owner, &name).await?;
    Ok(html(&RunPage {
        chrome: signed.chrome("models"),
        name: model.record.model.to_string(),
        capability: model.record.capability.clone(),
        can_run: signed.key.has_scope(Scope::Write),
        fields: fields(&model.input_schema),
        error: None,
        versions: versions(&state, &model).await?,
    }))
}

/// `POST /models/{owner}/{name}` (scope `write`): creates the prediction and opens its page.
pub async fn run(
    State(state): State<AppState>,
    Path((owner, name)): Path<(String, String)>,
    action: ConsoleAction,
) -> Result<Response, ConsoleError> {
    action.signed.require(Scope::Write)?;
    let model = model(&state, &owner, &name).await?;
    let mut form_fields = fields(&model.input_schema);
    let body = json!({"input": input_of(&form_fields, &action.fields)});
    let body = body.as_object().cloned().unwrap_or_default();
    let caller = action.signed.caller();
    let mut prediction =
        match submit::validated(&state, &caller, &model, &body, ApiSurface::Canonical, Default::default()).await {
            Ok(p) => p,
            Err(ApiError::Problem(problem)) => {
                for field in &mut form_fields {
                    field.value = action.field(&field.name).to_owned();
                    let path = format!("input.{}", field.name);
                    field.error = problem.errors.iter().find(|e| e.field == path).map(|e| e.message.clone());
                }
                let page = RunPage {
                    chrome: action.signed.chrome("models"),
                    name: model.record.model.to_string(),
                    capability: model.record.capability.clone(),
                    can_run: true,
                    fields: form_fields,
                    error: Some(problem.detail),
                    versions: versions(&state, &model).await?,
                };
                return Ok((StatusCode::BAD_REQUEST, html(&page)).into_response());
            }
            Err(e) => return Err(e.into()),
        };
    submit::store_and_publish(&state, &caller.key.account_id, None, &mut prediction).await?;
    Ok(see_other(&format!("/predictions/{}", prediction.id)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "required": ["prompt"], "properties": {
            "prompt": {"type": "string", "x-order": 0, "description": "What to say"},
            "steps": {"type": "integer", "default": 4, "minimum": 1, "maximum": 50},
            "scale": {"type": "number", "default": 7.5},
            "quiet": {"type": "boolean", "default": false},
            "size": {"type": "string", "enum": ["small", "large"], "default": "small"},
        }})
    }

    #[test]
    fn fields_follow_the_schema_in_its_order() {
        let fields = fields(&schema());
        let names: Vec<(&str, &str)> = fields.iter().map(|f| (f.name.as_str(), f.kind)).collect();
        assert_eq!(
            names,
            [("prompt", "text"), ("quiet", "boolean"), ("scale", "number"), ("size", "enum"), ("steps", "integer")]
        );
        let steps = &fields[4];
        assert_eq!((steps.value.as_str(), steps.min.as_deref(), steps.max.as_deref()), ("4", Some("1"), Some("50")));
        assert!(fields[0].required && !steps.required);
        assert_eq!(fields[3].options, ["small", "large"]);
    }

    #[test]
    fn a_submitted_form_becomes_typed_input() {
        let fields = fields(&schema());
        let form: HashMap<String, String> =
            [("prompt", "hi"), ("steps", "12"), ("scale", ""), ("quiet", "on"), ("size", "large")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
        let input = input_of(&fields, &form);
        assert_eq!(Value::Object(input), json!({"prompt": "hi", "steps": 12, "quiet": true, "size": "large"}));
        let bad: HashMap<String, String> = [("steps".to_owned(), "many".to_owned())].into_iter().collect();
        assert_eq!(input_of(&fields, &bad)["steps"], "many", "left as text for validation to name");
        assert_eq!(input_of(&fields, &bad)["quiet"], false, "an unchecked box is false");
    }
}
