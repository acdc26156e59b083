//! The body of `POST /v1/models/{owner}/{name}/versions/{version}/trainings`: `destination`
//! (`owner/name` of a model of the caller's account, required) beside the fields of a
//! prediction's create ([`create_prediction::parse`]: `input`, `webhook`,
//! `webhook_events_filter`, `priority`), every failing field reported at once.

use common::domain::{ModelRef, Priority, WebhookEvent};
use serde_json::{Map, Value};

use super::create_prediction::{self, CreatePrediction};
use crate::problem::FieldError;

/// The request body as the OpenAPI description shows it; [`parse`] reads it.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct CreateTrainingBody {
    /// The model the trained version goes to: `owner/name` of a model of your account
    /// (`POST /models` makes one).
    #[schema(pattern = r"^[a-z0-9][a-z0-9_-]{0,63}/[a-z0-9][a-z0-9_-]{0,63}$")]
    destination: String,
    /// Training parameters, checked against the trainer's `TrainingInput` schema. No name, at
    /// any depth, may contain the NUL character.
    #[schema(value_type = Object)]
    input: Value,
    /// An absolute http or https URL that receives the training's webhooks.
    #[schema(format = "uri", max_length = 2048)]
    webhook: Option<String>,
    /// The events to deliver; all of them when absent.
    webhook_events_filter: Option<Vec<WebhookEvent>>,
    /// How urgent it is (default `normal`); at most the account's `max_priority`.
    priority: Option<Priority>,
}

/// The destination a body names, or its field error.
pub fn destination(body: &Map<String, Value>) -> Result<ModelRef, FieldError> {
    match body.get("destination") {
        None | Some(Value::Null) => Err(FieldError::missing("destination")),
        Some(Value::String(text)) => text
            .parse()
            .map_err(|_| FieldError::invalid("destination", "Must be 'owner/name', a model of your account.")),
        Some(_) => Err(FieldError::invalid("destination", "Must be a string, 'owner/name'.")),
    }
}

/// Parses the body: its destination and the prediction-like rest, or every field error.
pub fn parse(body: &Map<String, Value>) -> Result<(ModelRef, CreatePrediction), Vec<FieldError>> {
    match (destination(body), create_prediction::parse(body)) {
        (Ok(destination), Ok(request)) => Ok((destination, request)),
        (destination, request) => {
            let mut errors: Vec<FieldError> = destination.err().into_iter().collect();
            errors.extend(request.err().unwrap_or_default());
            Err(errors)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(v: Value) -> Vec<String> {
        parse(v.as_object().expect("object")).expect_err("invalid").into_iter().map(|e| e.field).collect()
    }

    #[test]
    fn a_destination_and_an_input_make_a_training() {
        let body = json!({"destination": "alice/tuned", "input": {"suffix": "x"}});
        let (destination, request) = parse(body.as_object().expect("object")).expect("valid");
        assert_eq!(destination.to_string(), "alice/tuned");
        assert_eq!(request.input.get("suffix"), Some(&json!("x")));
    }

    #[test]
    fn every_bad_field_is_named() {
        assert_eq!(fields(json!({})), vec!["destination", "input"]);
        assert_eq!(fields(json!({"destination": "Not A Model", "input": {}})), vec!["destination"]);
        assert_eq!(
            fields(json!({"destination": 3, "input": [], "webhook": "ftp://x"})),
            vec!["destination", "input", "webhook"]
        );
    }
}
