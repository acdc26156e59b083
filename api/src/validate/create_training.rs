//! The body of `POST /v1/models/{owner}/{name}/versions/{version}/trainings`: `destination`
//! (`owner/name` of a model of the caller's account, required) beside the fields of a
//! prediction's create ([`CreatePrediction::check`]: `input`, `webhook`,
//! `webhook_events_filter`, `priority`), every failing field reported at once.

use common::domain::ModelRef;
use serde::Deserialize;
use serde_json::Value;

use super::{
    FromBody,
    create_prediction::{CreatePrediction, CreatePredictionBody},
    field::{Faults, Field, FieldValue, Read},
};
use crate::problem::FieldError;

/// The body of a training's create: its destination beside the fields of every create.
// As sent; `destination` and `CreatePrediction::check` read it.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct CreateTrainingBody {
    /// The model the trained version goes to: `owner/name` of a model of your account
    /// (`POST /models` makes one).
    #[schema(value_type = String, pattern = r"^[a-z0-9][a-z0-9._-]{0,99}/[a-z0-9][a-z0-9._-]{0,99}$")]
    pub destination: Option<Field<Destination>>,
    /// The fields of every create (the input is checked against the trainer's
    /// `TrainingInput` schema).
    #[serde(flatten)]
    pub create: CreatePredictionBody,
}

/// A training's destination: `owner/name`.
#[derive(Debug, Clone, PartialEq)]
pub struct Destination(pub ModelRef);

impl FieldValue for Destination {
    fn from_value(value: Value) -> Result<Self, Faults> {
        let Value::String(text) = value else {
            return Err(Faults::new("Must be a string, 'owner/name'."));
        };
        text.parse().map(Self).map_err(|_| Faults::new("Must be 'owner/name', a model of your account."))
    }
}

/// The destination a body names, or its field error.
pub fn destination(field: Option<Field<Destination>>) -> Result<ModelRef, FieldError> {
    let mut errors = Vec::new();
    match field.required("destination", &mut errors) {
        Some(Destination(model)) => Ok(model),
        None => Err(errors.remove(0)),
    }
}

/// Checks the body: its destination and the prediction-like rest, or every field error.
pub fn parse(body: CreateTrainingBody) -> Result<(ModelRef, CreatePrediction), Vec<FieldError>> {
    match (destination(body.destination), CreatePrediction::check(body.create)) {
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
        parse(body(v)).expect_err("invalid").into_iter().map(|e| e.field).collect()
    }

    fn body(v: Value) -> CreateTrainingBody {
        crate::validate::field::from_object(v.as_object().expect("object").clone()).expect("read")
    }

    #[test]
    fn a_destination_and_an_input_make_a_training() {
        let body = json!({"destination": "alice/tuned", "input": {"suffix": "x"}});
        let (destination, request) = parse(self::body(body)).expect("valid");
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
