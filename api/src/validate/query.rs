//! A query string read as leniently as a body: its parameters are declared once, by a type that
//! is their OpenAPI description (`IntoParams`) and the serde target at once, each an
//! `Option<Field<T>>` (see [`super::field`]). A query's values are text, so the values here
//! read text: an integer in bounds, a date-time. Unknown parameters are ignored; a repeated one
//! counts once (the first).

use chrono::{DateTime, Utc};
use common::domain::PredictionStatus;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::field::{self, Faults, FieldValue};
use crate::problem::FieldError;

/// The parameters of a query string, each by its first occurrence, as JSON strings.
pub fn object(query: Option<&str>) -> Map<String, Value> {
    let mut object = Map::new();
    for (name, value) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        object.entry(name.into_owned()).or_insert_with(|| Value::String(value.into_owned()));
    }
    object
}

/// A type a query's parameters are read into: one declared set of them (`Deserialize`, every
/// field an `Option<Field<_>>`: the provided `read`), or two read from the same query (a list's
/// own filter beside its paging).
pub trait QueryParams: DeserializeOwned {
    /// The parameters of `query` ([`object`]), every field read leniently.
    fn read(query: &Map<String, Value>) -> Result<Self, Vec<FieldError>> {
        field::from_object(query.clone())
    }
}

impl<A: QueryParams, B: QueryParams> QueryParams for (A, B) {
    fn read(query: &Map<String, Value>) -> Result<Self, Vec<FieldError>> {
        Ok((A::read(query)?, B::read(query)?))
    }
}

/// An integer written in a query, from `MIN` to `MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryInt<const MIN: i64, const MAX: i64>(pub i64);

impl<const MIN: i64, const MAX: i64> FieldValue for QueryInt<MIN, MAX> {
    fn from_value(value: Value) -> Result<Self, Faults> {
        value
            .as_str()
            .and_then(|text| text.parse::<i64>().ok())
            .filter(|n| (MIN..=MAX).contains(n))
            .map(Self)
            .ok_or_else(|| Faults::new(format!("Must be an integer from {MIN} to {MAX}.")))
    }
}

/// An RFC 3339 date-time written in a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timestamp(pub DateTime<Utc>);

impl FieldValue for Timestamp {
    fn from_value(value: Value) -> Result<Self, Faults> {
        // A `+` sent unencoded arrives as a space: read it as the offset it was.
        let text = field::text(value).map(|text| text.replace(' ', "+")).unwrap_or_default();
        DateTime::parse_from_rfc3339(&text)
            .map(|at| Self(at.with_timezone(&Utc)))
            .map_err(|_| Faults::new("Must be an RFC 3339 date-time, such as 2026-11-27T09:30:00Z."))
    }
}

impl FieldValue for PredictionStatus {
    fn from_value(value: Value) -> Result<Self, Faults> {
        value
            .as_str()
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| Faults::new("Must be one of starting, processing, succeeded, failed, canceled."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_of_a_repeated_parameter_counts_and_values_stay_text() {
        let query = object(Some("limit=5&limit=7&q=a+b&n=3"));
        assert_eq!(query["limit"], "5");
        assert_eq!(query["q"], "a b");
        assert_eq!(query["n"], "3", "a number in a query is text");
        assert!(object(None).is_empty());
    }

    #[test]
    fn integers_and_times_are_read_from_text() {
        assert_eq!(QueryInt::<1, 3>::from_value("3".into()), Ok(QueryInt(3)));
        assert!(QueryInt::<1, 3>::from_value("4".into()).is_err());
        assert!(QueryInt::<1, 3>::from_value("2.0".into()).is_err());
        assert!(QueryInt::<1, 3>::from_value(Value::from(2)).is_err(), "a query sends text");
        let at = Timestamp::from_value("2026-11-27T09:30:00 01:00".into()).expect("an unencoded + read back");
        assert_eq!(at.0.to_rfc3339(), "2026-11-27T08:30:00+00:00");
        assert!(Timestamp::from_value("yesterday".into()).is_err());
    }
}
