//! A request's fields read leniently. A body or query type is the OpenAPI schema and the serde
//! target at once: each of its fields is an `Option<Field<T>>` (absent or `null` is `None`),
//! and a [`Field`] never fails to deserialize: it holds the value `T` read from what was sent,
//! or why that failed. Checking the type then reads each field by its name ([`Read`]) and
//! names every failing one at once, where a serde error would stop at the first.
//!
//! What a field may hold is a [`FieldValue`]: it reads a JSON value and says what the value
//! must be when it cannot. The values several requests share are here (a string, a hardware
//! pool, a priority, a webhook URL, an event filter, a bounded integer); the others live beside
//! the request that uses them.

use common::domain::{Pool, Priority, WebhookEvent, WebhookUrl};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::problem::FieldError;

/// Why a field's value failed: for each fault, where inside the field (`[2]` of an array;
/// empty for the field as a whole) and what the value must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Faults(Vec<(String, String)>);

impl Faults {
    /// The field as a whole is wrong: it `must` be something else.
    pub fn new(must: impl Into<String>) -> Self {
        Self(vec![(String::new(), must.into())])
    }

    /// The faults as errors of the field `name`.
    fn into_errors(self, name: &str) -> impl Iterator<Item = FieldError> + '_ {
        self.0.into_iter().map(move |(at, must)| FieldError::invalid(format!("{name}{at}"), must))
    }
}

/// What a field may hold, read from the JSON value sent (never `null`: that is no value).
pub trait FieldValue: Sized {
    /// The value, or what it must be.
    fn from_value(value: Value) -> Result<Self, Faults>;
}

/// A field's value as sent: read as `T`, or the faults that kept it from being one.
#[derive(Debug, Clone, PartialEq)]
pub struct Field<T>(Result<T, Faults>);

impl<T> Field<T> {
    /// A field holding `value` (for building a request in code, as the console does).
    pub fn of(value: T) -> Self {
        Self(Ok(value))
    }
}

impl<'de, T: FieldValue> Deserialize<'de> for Field<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(|value| Self(T::from_value(value)))
    }
}

/// Reading a field of a request by its name, adding an error for it when it is wrong.
pub trait Read<T> {
    /// The value, if the field was sent and is right.
    fn optional(self, name: &str, errors: &mut Vec<FieldError>) -> Option<T>;
    /// The value; a field not sent (or `null`) is a missing-field error.
    fn required(self, name: &str, errors: &mut Vec<FieldError>) -> Option<T>;
}

impl<T> Read<T> for Option<Field<T>> {
    fn optional(self, name: &str, errors: &mut Vec<FieldError>) -> Option<T> {
        match self?.0 {
            Ok(value) => Some(value),
            Err(faults) => {
                errors.extend(faults.into_errors(name));
                None
            }
        }
    }

    fn required(self, name: &str, errors: &mut Vec<FieldError>) -> Option<T> {
        if self.is_none() {
            errors.push(FieldError::missing(name));
        }
        self.optional(name, errors)
    }
}

/// Deserializes a request type from a JSON object. Its `Field`s cannot fail; a closed type
/// (`#[serde(deny_unknown_fields)]`, declared `additionalProperties: false`) refuses a field it
/// does not have, named as the error's field; any other failure is an error at `body`.
pub fn from_object<T: serde::de::DeserializeOwned>(
    object: serde_json::Map<String, Value>,
) -> Result<T, Vec<FieldError>> {
    serde_json::from_value(Value::Object(object)).map_err(|e| {
        let message = e.to_string();
        match unknown_field(&message) {
            Some(field) => vec![FieldError::invalid(field, "Unknown field: this request does not take it.")],
            None => vec![FieldError::invalid(super::body::BODY_FIELD, message)],
        }
    })
}

/// The field serde's "unknown field `name`, expected …" names, if that is the message.
fn unknown_field(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("unknown field `")?;
    rest.rsplit_once("`, expected").map(|(field, _)| field).or_else(|| rest.strip_suffix('`'))
}

/// The text of a JSON string, or the fault "must be a string".
pub fn text(value: Value) -> Result<String, Faults> {
    match value {
        Value::String(text) => Ok(text),
        _ => Err(Faults::new("Must be a string.")),
    }
}

impl FieldValue for String {
    fn from_value(value: Value) -> Result<Self, Faults> {
        text(value)
    }
}

impl FieldValue for Pool {
    fn from_value(value: Value) -> Result<Self, Faults> {
        Pool::parse(&text(value)?).map_err(|e| Faults::new(e.to_string()))
    }
}

impl FieldValue for Priority {
    fn from_value(value: Value) -> Result<Self, Faults> {
        value.as_str().and_then(|s| s.parse().ok()).ok_or_else(|| Faults::new("Must be high, normal or low."))
    }
}

impl FieldValue for WebhookUrl {
    fn from_value(value: Value) -> Result<Self, Faults> {
        let Value::String(url) = value else {
            return Err(Faults::new("Must be a string (an absolute http or https URL)."));
        };
        WebhookUrl::parse(&url).map_err(|e| Faults::new(format!("The webhook URL {e}.")))
    }
}

/// A JSON array of names, each read by `T`'s `FromStr` and kept once, in the order first
/// named; a fault at `[i]` for each item that is not one. `array` and `item` say what the
/// field and an item must be.
pub fn names<T: std::str::FromStr + PartialEq>(value: Value, array: &str, item: &str) -> Result<Vec<T>, Faults> {
    let Value::Array(items) = value else {
        return Err(Faults::new(array));
    };
    let mut names = Vec::new();
    let mut faults = Vec::new();
    for (i, value) in items.iter().enumerate() {
        match value.as_str().map(str::parse::<T>) {
            Some(Ok(name)) if names.contains(&name) => {}
            Some(Ok(name)) => names.push(name),
            _ => faults.push((format!("[{i}]"), item.to_owned())),
        }
    }
    if faults.is_empty() { Ok(names) } else { Err(Faults(faults)) }
}

/// The events a job's webhooks are filtered to.
impl FieldValue for Vec<WebhookEvent> {
    fn from_value(value: Value) -> Result<Self, Faults> {
        names(
            value,
            "Must be an array of event names (start, output, logs, completed).",
            "Must be one of start, output, logs, completed.",
        )
    }
}

/// A JSON integer from `MIN` to `MAX` (`3.0` counts as `3`, as in JSON Schema).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounded<const MIN: i64, const MAX: i64>(pub i64);

impl<const MIN: i64, const MAX: i64> FieldValue for Bounded<MIN, MAX> {
    fn from_value(value: Value) -> Result<Self, Faults> {
        super::body::integer(&value)
            .filter(|n| (MIN..=MAX).contains(n))
            .map(Self)
            .ok_or_else(|| Faults::new(format!("Must be an integer from {MIN} to {MAX}.")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Deserialize)]
    struct Sent {
        name: Option<Field<String>>,
        events: Option<Field<Vec<WebhookEvent>>>,
        count: Option<Field<Bounded<1, 3>>>,
    }

    fn read(body: Value) -> (Option<String>, Option<Vec<WebhookEvent>>, Option<i64>, Vec<String>) {
        let sent: Sent = from_object(body.as_object().expect("an object").clone()).expect("never fails");
        let mut errors = Vec::new();
        let name = sent.name.required("name", &mut errors);
        let events = sent.events.optional("events", &mut errors);
        let count = sent.count.optional("count", &mut errors).map(|c| c.0);
        (name, events, count, errors.into_iter().map(|e| e.field).collect())
    }

    #[test]
    fn every_failing_field_is_named_at_once_with_paths_inside_it() {
        let (_, _, _, fields) = read(json!({"events": ["start", "bogus", 3], "count": 4}));
        assert_eq!(fields, vec!["name", "events[1]", "events[2]", "count"]);
        let (_, _, _, fields) = read(json!({"name": 5, "events": "start", "count": "2"}));
        assert_eq!(fields, vec!["name", "events", "count"]);
    }

    #[test]
    fn right_values_are_read_and_null_is_no_value() {
        let (name, events, count, fields) =
            read(json!({"name": "x", "events": ["completed", "start", "completed"], "count": 2.0}));
        assert_eq!(fields, Vec::<String>::new());
        assert_eq!(name.as_deref(), Some("x"));
        assert_eq!(events, Some(vec![WebhookEvent::Completed, WebhookEvent::Start]));
        assert_eq!(count, Some(2));
        let (_, _, _, fields) = read(json!({"name": null, "count": null}));
        assert_eq!(fields, vec!["name"], "null is absent: missing where required, nothing where optional");
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Closed {
        only: Option<Field<String>>,
    }

    #[test]
    fn a_closed_type_names_the_field_it_does_not_have() {
        let refused =
            from_object::<Closed>(json!({"only": "x", "odd`, name": 1}).as_object().cloned().expect("object"));
        assert_eq!(refused.expect_err("refused")[0].field, "odd`, name");
        let read: Closed = from_object(json!({"only": 3}).as_object().cloned().expect("object")).expect("read");
        assert_eq!(read.only.optional("only", &mut Vec::new()), None, "a bad value is the check's to name");
    }
}
