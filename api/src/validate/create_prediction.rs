//! The body of `POST /v1/models/{owner}/{name}/predictions`, parsed with every field error
//! collected: `input` (an object, required), `webhook` (an absolute http(s) URL) and
//! `webhook_events_filter` (event names) and `priority` (`high`, `normal` or `low`). Unknown
//! top-level fields are ignored.

use common::domain::{ModelRef, Priority, WebhookEvent, WebhookUrl};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::field::{Faults, Field, FieldValue, Read};
use crate::problem::FieldError;

/// The body of a create: the fields every create of a prediction or a training carries.
// As sent, every field read leniently (see `super::field`); `CreatePrediction` is it checked.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct CreatePredictionBody {
    /// Generation parameters, checked against the model's input schema. Parameters the model
    /// does not declare are kept in the stored `input` and not passed to the model. No name, at
    /// any depth, may contain the NUL character.
    #[schema(value_type = Object)]
    pub input: Option<Field<Input>>,
    /// An absolute http or https URL that receives the prediction's webhooks.
    #[schema(value_type = Option<String>, format = "uri", max_length = 2048)]
    pub webhook: Option<Field<WebhookUrl>>,
    /// The events to deliver; all of them when absent.
    #[schema(value_type = Option<Vec<WebhookEvent>>)]
    pub webhook_events_filter: Option<Field<Vec<WebhookEvent>>>,
    /// How urgent it is (default `normal`); at most the account's `max_priority`.
    #[schema(value_type = Option<Priority>)]
    pub priority: Option<Field<Priority>>,
}

/// The body of `POST /v1/predictions`: a create by version.
// As sent; `version` is resolved (`ops::versions::resolve`) before the rest is checked.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
pub struct CreateByVersionBody {
    /// `owner/name`, `owner/name:<version id>` or a bare version id (the `version` of a
    /// prediction, the `id` of a model's `latest_version`). `owner/name` runs the newest live
    /// version; a pinned version runs only on a runner of it, and waits until one is live.
    #[schema(
        value_type = String,
        pattern = r"^([a-z0-9][a-z0-9._-]{0,99}/[a-z0-9][a-z0-9._-]{0,99}(:[A-Za-z0-9]{1,128})?|[A-Za-z0-9]{1,128})$"
    )]
    pub version: Option<Field<VersionRef>>,
    /// The fields of every create.
    #[serde(flatten)]
    pub create: CreatePredictionBody,
}

/// A prediction's `input` as sent: a JSON object none of whose names, at any depth, holds the
/// NUL character (the input is stored as it came, and a stored document's names cannot).
#[derive(Debug, Clone, PartialEq)]
pub struct Input(pub Map<String, Value>);

impl FieldValue for Input {
    fn from_value(value: Value) -> Result<Self, Faults> {
        match value {
            Value::Object(map) if has_nul_key(&map) => {
                Err(Faults::new("Names of parameters may not contain the NUL character."))
            }
            Value::Object(map) => Ok(Self(map)),
            _ => Err(Faults::new("Must be a JSON object.")),
        }
    }
}

/// The longest version id accepted (ours are 64 hex digits).
const MAX_ID_LEN: usize = 128;

/// A parsed `version` of a create by version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionRef {
    /// `owner/name`: whatever version the model has now.
    Model(ModelRef),
    /// `owner/name:id`.
    ModelAt(ModelRef, String),
    /// A bare version id.
    Id(String),
}

fn is_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_ID_LEN && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

impl VersionRef {
    /// Parses `owner/name`, `owner/name:id` or `id`.
    pub fn parse(text: &str) -> Option<Self> {
        match text.split_once(':') {
            Some((model, id)) => Some(Self::ModelAt(model.parse().ok()?, is_id(id).then(|| id.to_owned())?)),
            None if text.contains('/') => text.parse().ok().map(Self::Model),
            None => is_id(text).then(|| Self::Id(text.to_owned())),
        }
    }
}

impl FieldValue for VersionRef {
    fn from_value(value: Value) -> Result<Self, Faults> {
        value
            .as_str()
            .and_then(Self::parse)
            .ok_or_else(|| Faults::new("Must be 'owner/name', 'owner/name:<version id>' or a version id."))
    }
}

/// A well-formed create request (the input is not yet checked against the model).
#[derive(Debug, Clone, PartialEq)]
pub struct CreatePrediction {
    /// The input as submitted.
    pub input: Map<String, Value>,
    /// Where webhooks go.
    pub webhook: Option<WebhookUrl>,
    /// Which events are delivered (absent = all).
    pub webhook_events_filter: Option<Vec<WebhookEvent>>,
    /// The priority asked for, if any.
    pub priority: Option<Priority>,
}

impl super::FromBody for CreatePrediction {
    type Sent = CreatePredictionBody;

    fn check(body: CreatePredictionBody) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        let input = body.input.required("input", &mut errors);
        let webhook = body.webhook.optional("webhook", &mut errors);
        let webhook_events_filter = body.webhook_events_filter.optional("webhook_events_filter", &mut errors);
        let priority = body.priority.optional("priority", &mut errors);
        match input {
            Some(Input(input)) if errors.is_empty() => Ok(Self { input, webhook, webhook_events_filter, priority }),
            _ => Err(errors),
        }
    }
}

/// Whether a name in `map`, at any depth, holds a NUL character.
fn has_nul_key(map: &Map<String, Value>) -> bool {
    fn nested(value: &Value) -> bool {
        match value {
            Value::Object(map) => has_nul_key(map),
            Value::Array(items) => items.iter().any(nested),
            _ => false,
        }
    }
    map.iter().any(|(k, v)| k.contains('\0') || nested(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::FieldErrorCode;
    use serde_json::json;

    fn parse_json(v: Value) -> Result<CreatePrediction, Vec<FieldError>> {
        let body = crate::validate::field::from_object(v.as_object().expect("object").clone())?;
        <CreatePrediction as crate::validate::FromBody>::check(body)
    }

    fn fields(errors: Vec<FieldError>) -> Vec<(String, FieldErrorCode)> {
        errors.into_iter().map(|e| (e.field, e.code)).collect()
    }

    #[test]
    fn a_complete_request_parses() {
        let req = parse_json(json!({
            "input": {"prompt": "hi"},
            "webhook": "https://example.com/h",
            "webhook_events_filter": ["completed", "start", "completed"],
        }))
        .expect("valid");
        assert_eq!(req.webhook.map(|w| w.to_string()).as_deref(), Some("https://example.com/h"));
        assert_eq!(req.webhook_events_filter, Some(vec![WebhookEvent::Completed, WebhookEvent::Start]));
    }

    #[test]
    fn a_nul_character_in_a_parameter_name_at_any_depth_is_refused() {
        for input in [json!({"a\0b": 1}), json!({"ok": [{"deep\0": 1}]}), json!({"ok": {"x": {"\0": 1}}})] {
            let errors = parse_json(json!({ "input": input })).expect_err("refused");
            assert_eq!(errors[0].field, "input");
        }
        assert!(parse_json(json!({"input": {"ok": "a\0b"}})).is_ok(), "in values it is fine");
    }

    #[test]
    fn a_missing_input_is_a_missing_field() {
        assert_eq!(
            fields(parse_json(json!({})).expect_err("invalid")),
            vec![("input".into(), FieldErrorCode::MissingField)]
        );
        assert_eq!(
            fields(parse_json(json!({"input": null})).expect_err("invalid")),
            vec![("input".into(), FieldErrorCode::MissingField)]
        );
    }

    #[test]
    fn every_bad_field_is_reported_with_its_path() {
        let errors = parse_json(json!({
            "input": "text",
            "webhook": "ftp://x",
            "webhook_events_filter": ["start", "bogus", 3],
        }))
        .expect_err("invalid");
        let names: Vec<String> = errors.into_iter().map(|e| e.field).collect();
        assert_eq!(names, vec!["input", "webhook", "webhook_events_filter[1]", "webhook_events_filter[2]"]);
    }

    #[test]
    fn wrong_types_of_webhook_fields_are_invalid() {
        let errors =
            parse_json(json!({"input": {}, "webhook": 5, "webhook_events_filter": "start"})).expect_err("invalid");
        let names: Vec<String> = errors.into_iter().map(|e| e.field).collect();
        assert_eq!(names, vec!["webhook", "webhook_events_filter"]);
    }

    #[test]
    fn the_three_forms_parse() {
        let m: ModelRef = "demo/echo".parse().expect("model");
        assert_eq!(VersionRef::parse("demo/echo"), Some(VersionRef::Model(m.clone())));
        assert_eq!(VersionRef::parse("demo/echo:abc123"), Some(VersionRef::ModelAt(m, "abc123".into())));
        assert_eq!(VersionRef::parse("abc123"), Some(VersionRef::Id("abc123".into())));
    }

    #[test]
    fn anything_else_is_refused() {
        for bad in ["", "demo/echo:", ":abc", "demo/ec*ho", "a b", "demo/echo:a:b", "Demo/echo", &"a".repeat(129)] {
            assert_eq!(VersionRef::parse(bad), None, "{bad:?}");
        }
    }
}
