//! The JSON body of a request: it must be declared JSON (`application/json` or `+json`), parse,
//! and be an object. Each failure is a 400 whose `errors[]` item names the field `body`. Also
//! the readers of fields every body parser shares: a string, a hardware pool, the required ones.

use crate::problem::FieldError;
use axum::http::{HeaderMap, header};
use bytes::Bytes;
use serde_json::{Map, Value};

use crate::error::ApiError;

/// The field name used for errors about the body as a whole.
pub const BODY_FIELD: &str = "body";

fn is_json_content_type(headers: &HeaderMap) -> bool {
    let Some(ct) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// A JSON number that is an integer in JSON Schema's sense: `3` and `3.0` alike (as a
/// signed 64-bit integer; fractions, and numbers beyond what a double holds exactly, are not).
pub fn integer(value: &Value) -> Option<i64> {
    let n = value.as_number()?;
    if let Some(i) = n.as_i64() {
        return Some(i);
    }
    let f = n.as_f64()?;
    (f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e15).then_some(f as i64)
}

/// The body as a JSON object.
pub fn json_object(headers: &HeaderMap, body: &Bytes) -> Result<Map<String, Value>, ApiError> {
    if !is_json_content_type(headers) {
        return Err(ApiError::validation(
            "The request body must be JSON, sent with 'Content-Type: application/json'.",
            vec![FieldError::invalid(BODY_FIELD, "Content-Type must be application/json.")],
        ));
    }
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::validation(
            "The request body is not valid JSON.",
            vec![FieldError::invalid(BODY_FIELD, format!("Invalid JSON: {e}."))],
        )
    })?;
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(ApiError::validation(
            "The request body must be a JSON object.",
            vec![FieldError::invalid(BODY_FIELD, "Must be a JSON object.")],
        )),
    }
}

/// An optional body for endpoints whose fields are all optional: empty (or JSON `null`) means `{}`.
pub fn optional_json_object(headers: &HeaderMap, body: &Bytes) -> Result<Map<String, Value>, ApiError> {
    // No body, or JSON `null` (what a client that serializes "no options" sends), means defaults.
    // A body of white space said to be JSON is not JSON: refused like any other.
    let (text, json) = (body.trim_ascii(), is_json_content_type(headers));
    if body.is_empty() || (text.is_empty() && !json) || (text == b"null" && json) {
        return Ok(Map::new());
    }
    json_object(headers, body)
}

/// The string at `field` of `body`, if there is one (`null` counts as none); another type is
/// an error at `field`.
pub fn string<'a>(body: &'a Map<String, Value>, field: &str, errors: &mut Vec<FieldError>) -> Option<&'a str> {
    match body.get(field) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(_) => {
            errors.push(FieldError::invalid(field, "Must be a string."));
            None
        }
    }
}

/// The hardware pool named at `hardware` of `body`, if there is one.
pub fn hardware(body: &Map<String, Value>, errors: &mut Vec<FieldError>) -> Option<common::domain::Pool> {
    let text = string(body, "hardware", errors)?;
    match common::domain::Pool::parse(text) {
        Ok(pool) => Some(pool),
        Err(e) => {
            errors.push(FieldError::invalid("hardware", e.to_string()));
            None
        }
    }
}

/// Adds a "required" error for each field of `present` that is missing, unless the field has
/// an error already.
pub fn require(present: &[(&str, bool)], errors: &mut Vec<FieldError>) {
    for (field, present) in present {
        if !present && !errors.iter().any(|e| e.field == *field) {
            errors.push(FieldError::missing(*field));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ApiError;
    use axum::http::HeaderValue;

    fn headers(ct: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_str(ct).expect("header"));
        h
    }

    fn field_of(err: ApiError) -> String {
        match err {
            ApiError::Problem(p) => p.errors[0].field.clone(),
            other => panic!("unexpected error {other:?}"),
        }
    }

    #[test]
    fn json_content_types_with_parameters_are_accepted() {
        let body = Bytes::from_static(b"{\"a\":1}");
        assert!(json_object(&headers("application/json; charset=utf-8"), &body).is_ok());
        assert!(json_object(&headers("application/merge-patch+json"), &body).is_ok());
    }

    #[test]
    fn a_wrong_content_type_malformed_json_or_a_non_object_is_a_body_error() {
        let ok = Bytes::from_static(b"{}");
        assert_eq!(field_of(json_object(&headers("text/plain"), &ok).expect_err("refused")), "body");
        assert_eq!(field_of(json_object(&HeaderMap::new(), &ok).expect_err("refused")), "body");
        let bad = Bytes::from_static(b"{\"a\":");
        assert_eq!(field_of(json_object(&headers("application/json"), &bad).expect_err("refused")), "body");
        let array = Bytes::from_static(b"[1]");
        assert_eq!(field_of(json_object(&headers("application/json"), &array).expect_err("refused")), "body");
    }

    #[test]
    fn an_empty_optional_body_is_an_empty_object() {
        assert!(optional_json_object(&HeaderMap::new(), &Bytes::new()).expect("empty ok").is_empty());
        let null = optional_json_object(&headers("application/json"), &Bytes::from_static(b" null "));
        assert!(null.expect("null ok").is_empty(), "JSON null is no options");
        let blank = optional_json_object(&headers("application/json"), &Bytes::from_static(b"\r"));
        assert_eq!(field_of(blank.expect_err("white space is not JSON")), "body");
        assert_eq!(integer(&serde_json::json!(164.0)), Some(164), "JSON Schema integers include 164.0");
        assert_eq!(integer(&serde_json::json!(1.5)), None);
    }
}
