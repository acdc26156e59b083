//! The body of `POST /v1/models/{owner}/{name}/predictions`, parsed with every field error
//! collected: `input` (an object, required), `webhook` (an absolute http(s) URL) and
//! `webhook_events_filter` (event names) and `priority` (`high`, `normal` or `low`). Unknown
//! top-level fields are ignored.

use crate::problem::FieldError;
use common::domain::{Priority, WebhookEvent, WebhookUrl};
use serde_json::{Map, Value};

/// The request body as the OpenAPI description shows it; [`parse`] reads it.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct CreatePredictionBody {
    /// Generation parameters, checked against the model's input schema. Parameters the model
    /// does not declare are kept in the stored `input` and not passed to the model. No name, at
    /// any depth, may contain the NUL character.
    #[schema(value_type = Object)]
    input: Value,
    /// An absolute http or https URL that receives the prediction's webhooks.
    #[schema(format = "uri", max_length = 2048)]
    webhook: Option<String>,
    /// The events to deliver; all of them when absent.
    webhook_events_filter: Option<Vec<WebhookEvent>>,
    /// How urgent it is (default `normal`); at most the account's `max_priority`.
    priority: Option<Priority>,
}

/// The body of `POST /v1/predictions` as the OpenAPI description shows it: a create by version.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct CreateByVersionBody {
    /// `owner/name`, `owner/name:<version id>` or a bare version id (the `version` of a
    /// prediction, the `id` of a model's `latest_version`). `owner/name` runs the newest live
    /// version; a pinned version runs only on a runner of it, and waits until one is live.
    #[schema(
        pattern = r"^([a-z0-9][a-z0-9_-]{0,63}/[a-z0-9][a-z0-9_-]{0,63}(:[A-Za-z0-9]{1,128})?|[A-Za-z0-9]{1,128})$"
    )]
    version: String,
    /// Generation parameters, checked against the model's input schema. No name, at any
    /// depth, may contain the NUL character.
    #[schema(value_type = Object)]
    input: Value,
    /// An absolute http or https URL that receives the prediction's webhooks.
    #[schema(format = "uri", max_length = 2048)]
    webhook: Option<String>,
    /// The events to deliver; all of them when absent.
    webhook_events_filter: Option<Vec<WebhookEvent>>,
    /// How urgent it is (default `normal`); at most the account's `max_priority`.
    priority: Option<Priority>,
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

/// Parses the body; on failure returns every field error.
pub fn parse(body: &Map<String, Value>) -> Result<CreatePrediction, Vec<FieldError>> {
    let mut errors = Vec::new();
    let input = match body.get("input") {
        None | Some(Value::Null) => {
            errors.push(FieldError::missing("input"));
            None
        }
        Some(Value::Object(map)) if has_nul_key(map) => {
            errors.push(FieldError::invalid("input", "Names of parameters may not contain the NUL character."));
            None
        }
        Some(Value::Object(map)) => Some(map.clone()),
        Some(_) => {
            errors.push(FieldError::invalid("input", "Must be a JSON object."));
            None
        }
    };
    let webhook = match body.get("webhook") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => WebhookUrl::parse(s)
            .map_err(|e| errors.push(FieldError::invalid("webhook", format!("The webhook URL {e}."))))
            .ok(),
        Some(_) => {
            errors.push(FieldError::invalid("webhook", "Must be a string (an absolute http or https URL)."));
            None
        }
    };
    let webhook_events_filter = match body.get("webhook_events_filter") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => Some(events(items, &mut errors)),
        Some(_) => {
            errors.push(FieldError::invalid(
                "webhook_events_filter",
                "Must be an array of event names (start, output, logs, completed).",
            ));
            None
        }
    };
    let priority = match body.get("priority") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.parse::<Priority>().is_ok() => s.parse().ok(),
        Some(_) => {
            errors.push(FieldError::invalid("priority", "Must be high, normal or low."));
            None
        }
    };
    match input {
        Some(input) if errors.is_empty() => Ok(CreatePrediction { input, webhook, webhook_events_filter, priority }),
        _ => Err(errors),
    }
}

/// Whether a name in `map`, at any depth, holds a NUL character (the input is stored as it
/// came, and a stored document's names cannot hold one).
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

fn events(items: &[Value], errors: &mut Vec<FieldError>) -> Vec<WebhookEvent> {
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item.as_str().map(str::parse::<WebhookEvent>) {
            Some(Ok(event)) => {
                if !out.contains(&event) {
                    out.push(event);
                }
            }
            _ => errors.push(FieldError::invalid(
                format!("webhook_events_filter[{i}]"),
                "Must be one of start, output, logs, completed.",
            )),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::FieldErrorCode;
    use serde_json::json;

    fn parse_json(v: Value) -> Result<CreatePrediction, Vec<FieldError>> {
        parse(v.as_object().expect("object"))
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
}
