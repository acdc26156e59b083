//! The models pages: the list of registered models (`/models`), and per model a "Run" form
//! generated from its input schema (`/models/{owner}/{name}`): a number field with its
//! minimum, maximum and default for `number`/`integer`, a checkbox for `boolean`, a list for an
//! `enum`, a file picker for a `format: uri` string (the file is uploaded with the form, then
//! its URL is the input), a text area for other strings. Submitting it (scope `write`) validates and creates
//! the prediction exactly as the API does ([`crate::ops::submit`]), then opens its page; a bad value
//! shows the form again with the field's error under it. The page lists the model's versions,
//! which of them are live (a runner serving it is alive) and which one the form runs (the
//! latest), and the model servers live runners start themselves for it: each one's state, its
//! latest boot (when, and how long it took) and how its latest server ended. An account's own model (`POST /v1/models`) has a page too: its trained versions,
//! each with what it was trained from, and a form that runs the newest. A version with a
//! trainer adds a Train form ([`TrainForm`]; it posts to [`super::trainings`]).

use std::{collections::HashMap, sync::Arc};

use askama::Template;
use axum::{
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use common::{
    domain::{ApiSurface, ModelRef, Scope},
    store::runners::InstanceReport,
};
use serde_json::{Map, Value, json};

use super::{
    csrf::ConsoleAction,
    error::ConsoleError,
    page::{Chrome, html, see_other},
    session::Signed,
};
use crate::{
    error::ApiError,
    ops::{
        self,
        owned::{self, VisibleModel},
        submit,
    },
    state::AppState,
    state::model_catalog::RegisteredModel,
    validate::{create_prediction::CreatePredictionBody, paging::Paging},
};

/// The most models the models page lists: one page of the API's list at its largest.
const SHOWN: u32 = crate::validate::paging::MAX_LIMIT;

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

/// `GET /models`: the registered models, then the account's own and the public ones (see
/// [`owned::visible_models`]).
pub async fn list(State(state): State<AppState>, signed: Signed) -> Result<Response, ConsoleError> {
    let (visible, _) =
        owned::visible_models(&state, &signed.key.account_id, Paging { limit: SHOWN, offset: 0 }).await?;
    let models = visible
        .into_iter()
        .map(|model| match model {
            VisibleModel::Registered(r) => {
                ModelRow { name: r.record.model.to_string(), capability: r.record.capability.clone() }
            }
            VisibleModel::Owned(o) => ModelRow {
                name: o.model.to_string(),
                capability: format!("{} model of {}", o.visibility.as_str(), o.model.owner()),
            },
        })
        .collect();
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
pub(super) struct RunPage {
    pub(super) chrome: Chrome,
    pub(super) name: String,
    pub(super) capability: String,
    pub(super) can_run: bool,
    /// Nothing to run yet: an account's model before its first training.
    pub(super) no_version: bool,
    pub(super) fields: Vec<Field>,
    pub(super) error: Option<String>,
    pub(super) versions: Vec<VersionRow>,
    /// The model servers live runners start themselves for it (Cog projects declared to them).
    pub(super) instances: Vec<InstanceRow>,
    /// The training form, when the version the page runs has a trainer.
    pub(super) train: Option<TrainForm>,
}

/// One version of the model on its page.
pub(super) struct VersionRow {
    id: String,
    created: String,
    /// A runner serving it is alive (for a trained version: one serving its base).
    live: bool,
    /// The model's route runs it.
    latest: bool,
    /// For a trained version: `owner/name:<version>` it was trained from, and the training.
    trained_from: Option<(String, String)>,
}

/// One model server of the model on its page, as its runner last reported it.
pub(super) struct InstanceRow {
    runner: String,
    version: String,
    /// `stopped`, `booting`, `ready`, `busy` or `stopping`.
    state: String,
    /// When its latest boot began, and how long it took to `READY` (`—` if never).
    last_boot: String,
    /// Why its latest server ended (`—` if none did).
    last_exit: String,
}

impl InstanceRow {
    fn of(runner: &str, report: &InstanceReport) -> Self {
        let last_boot = match (report.booted_at, report.boot_seconds) {
            (None, _) => "—".to_owned(),
            (Some(at), took) => {
                let at = at.to_chrono().format("%Y-%m-%d %H:%M:%S UTC");
                match took {
                    Some(took) if report.state != "booting" => format!("{at}, ready in {took:.1} s"),
                    _ => format!("{at}"),
                }
            }
        };
        Self {
            runner: runner.to_owned(),
            version: report.version.clone(),
            state: report.state.clone(),
            last_boot,
            last_exit: report.last_exit.clone().unwrap_or_else(|| "—".to_owned()),
        }
    }
}

/// The model servers of `model` that live runners start themselves, by runner.
async fn instances(state: &AppState, model: &ModelRef) -> Result<Vec<InstanceRow>, ConsoleError> {
    let snapshot = state.models.live().snapshot().await?;
    let mut rows: Vec<InstanceRow> = snapshot
        .instances
        .get(model)
        .map(|all| all.iter().map(|(runner, report)| InstanceRow::of(runner, report)).collect())
        .unwrap_or_default();
    rows.sort_by(|a, b| (&a.version, &a.runner).cmp(&(&b.version, &b.runner)));
    Ok(rows)
}

/// A model's page: its address, and what its form runs (`None`: an account's model that no
/// training has given a version yet).
pub(super) struct Shown {
    pub(super) model: ModelRef,
    pub(super) runs: Option<Arc<RegisteredModel>>,
}

/// The model's versions, newest first, with which are live and which is the latest.
async fn versions(state: &AppState, shown: &Shown) -> Result<Vec<VersionRow>, ConsoleError> {
    let records = ops::lists::versions(state, &shown.model).await?;
    let snapshot = state.models.live().snapshot().await?;
    let latest = shown.runs.as_ref().map(|m| m.trained.as_ref().map_or(&m.record.version, |t| &t.version));
    Ok(records
        .iter()
        .map(|v| {
            let (runs_on, version) = match &v.trained_from {
                Some(from) => (&from.model, &from.version),
                None => (&v.model, &v.id),
            };
            VersionRow {
                id: v.id.clone(),
                created: v.created_at.to_chrono().format("%Y-%m-%d %H:%M UTC").to_string(),
                live: snapshot.versions.get(runs_on).is_some_and(|l| l.contains(version)),
                latest: latest == Some(&v.id),
                trained_from: v
                    .trained_from
                    .as_ref()
                    .map(|from| (format!("{}:{}", from.model, from.version), from.training.to_string())),
            }
        })
        .collect())
}

/// The model at `owner/name` the signed-in account may see: a registered one, or an account's
/// own (its newest trained version runs).
pub(super) async fn model(state: &AppState, signed: &Signed, owner: &str, name: &str) -> Result<Shown, ConsoleError> {
    let account = &signed.key.account_id;
    match owned::visible_model(state, account, owner, name).await? {
        VisibleModel::Registered(registered) => {
            Ok(Shown { model: registered.record.model.clone(), runs: Some(registered) })
        }
        VisibleModel::Owned(o) => {
            let runs = crate::ops::trained::trained_model(state, account, &o.model, None).await?;
            Ok(Shown { model: o.model, runs })
        }
    }
}

/// The page of `shown`, its forms as `fields` and `train` say.
pub(super) async fn page(
    state: &AppState,
    chrome: Chrome,
    shown: &Shown,
    can_run: bool,
    run_fields: Option<Vec<Field>>,
    train: Option<TrainForm>,
) -> Result<RunPage, ConsoleError> {
    let capability = shown.runs.as_ref().map_or_else(String::new, |m| m.record.capability.clone());
    let fields = run_fields.unwrap_or_else(|| shown.runs.as_ref().map(|m| fields(&m.input_schema)).unwrap_or_default());
    Ok(RunPage {
        chrome,
        name: shown.model.to_string(),
        capability,
        can_run,
        no_version: shown.runs.is_none(),
        fields,
        error: None,
        versions: versions(state, shown).await?,
        instances: instances(state, &shown.model).await?,
        train,
    })
}

/// `GET /models/{owner}/{name}`
pub async fn form(
    State(state): State<AppState>,
    signed: Signed,
    Path((owner, name)): Path<(String, String)>,
) -> Result<Response, ConsoleError> {
    let shown = model(&state, &signed, &owner, &name).await?;
    let can_run = signed.key.has_scope(Scope::Write);
    let train = if can_run { form_for(&state, &signed, &shown).await? } else { None };
    Ok(html(&page(&state, signed.chrome("models"), &shown, can_run, None, train).await?))
}

/// `POST /models/{owner}/{name}` (scope `write`): creates the prediction and opens its page.
pub async fn run(
    State(state): State<AppState>,
    Path((owner, name)): Path<(String, String)>,
    action: ConsoleAction,
) -> Result<Response, ConsoleError> {
    action.signed.require(Scope::Write)?;
    let shown = model(&state, &action.signed, &owner, &name).await?;
    let missing = || ConsoleError::NotFound(format!("Model {owner}/{name} has no version to run yet."));
    let model = shown.runs.clone().ok_or_else(missing)?;
    let mut form_fields = fields(&model.input_schema);
    // Read as a body is (its fields cannot fail to deserialize, so there is no error to lose).
    let body: CreatePredictionBody =
        serde_json::from_value(json!({"input": input_of(&form_fields, &action.fields)})).unwrap_or_default();
    let caller = action.signed.caller();
    let mut prediction =
        match submit::validated(&state, &caller, &model, body, ApiSurface::Canonical, Default::default(), Vec::new())
            .await
        {
            Ok(p) => p,
            Err(ApiError::Problem(problem)) => {
                for field in &mut form_fields {
                    field.value = action.field(&field.name).to_owned();
                    let path = format!("input.{}", field.name);
                    field.error = problem.errors.iter().find(|e| e.field == path).map(|e| e.message.clone());
                }
                let train = form_for(&state, &action.signed, &shown).await?;
                let chrome = action.signed.chrome("models");
                let mut page = page(&state, chrome, &shown, true, Some(form_fields), train).await?;
                page.error = Some(problem.detail);
                return Ok((StatusCode::BAD_REQUEST, html(&page)).into_response());
            }
            Err(e) => return Err(e.into()),
        };
    submit::store_and_publish(&state, &caller.key.account_id, Default::default(), &mut prediction).await?;
    Ok(see_other(&format!("/predictions/{}", prediction.id)))
}

/// The Train form of a trainable version.
pub struct TrainForm {
    /// The version it trains.
    pub(super) version: String,
    /// The trainer's input fields.
    pub(super) fields: Vec<Field>,
    /// The account's own models, the destinations it may pick.
    pub(super) destinations: Vec<String>,
    /// The destination picked last.
    pub(super) destination: String,
    /// What went wrong with the last submission, besides its fields.
    pub(super) error: Option<String>,
}

/// The Train form of the version `shown` runs, if it is a registered version with a trainer
/// (`None` otherwise).
pub(super) async fn form_for(
    state: &AppState,
    signed: &Signed,
    shown: &Shown,
) -> Result<Option<TrainForm>, ConsoleError> {
    let Some(model) = shown.runs.as_ref().filter(|m| m.trained.is_none()) else { return Ok(None) };
    let version = ops::models::current_version(state, model).await?;
    let Some(schema) = version.training_input_schema().transpose()? else {
        return Ok(None);
    };
    let (owned, _) = ops::lists::owned_models(state, &signed.key.account_id, 0, 100).await?;
    let destinations: Vec<String> =
        owned.iter().filter(|o| o.account_id == signed.key.account_id).map(|o| o.model.to_string()).collect();
    Ok(Some(TrainForm {
        version: model.record.version.clone(),
        fields: fields(&schema),
        destination: destinations.first().cloned().unwrap_or_default(),
        destinations,
        error: None,
    }))
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
