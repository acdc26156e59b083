//! The body of `POST /v1/account/api-keys`: every field optional. `name` at most 100
//! characters (default empty); `scopes` known scope names (default `["read","write"]`, not
//! empty, duplicates dropped); `expires_in_days` an integer from 1 to 365; `rate_limit_rpm`
//! an integer from 1 to 1,000,000 (default: the deployment's `DEFAULT_RATE_LIMIT_RPM`).

use crate::problem::FieldError;
use common::domain::Scope;
use serde_json::{Map, Value};

/// The longest key name.
pub const MAX_NAME_CHARS: usize = 100;
/// The shortest and longest lifetimes of a key, in days.
pub const EXPIRES_IN_DAYS: std::ops::RangeInclusive<i64> = 1..=365;
/// The requests per minute a key may be given.
pub const RATE_LIMIT_RPM: std::ops::RangeInclusive<i64> = 1..=1_000_000;

/// The request body as the OpenAPI description shows it; [`parse`] reads it.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct CreateApiKeyBody {
    /// A name for people.
    #[schema(max_length = 100)]
    name: Option<String>,
    /// The key's scopes, each held by the calling key (default `["read","write"]`).
    #[schema(min_items = 1)]
    scopes: Option<Vec<Scope>>,
    /// Days until the key stops working; never when absent.
    #[schema(minimum = 1, maximum = 365)]
    expires_in_days: Option<i64>,
    /// Requests per minute the key may make (default: the deployment's default, 600).
    #[schema(minimum = 1, maximum = 1000000)]
    rate_limit_rpm: Option<i64>,
}

/// A well-formed create-key request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateApiKey {
    /// The key's name.
    pub name: String,
    /// Its scopes.
    pub scopes: Vec<Scope>,
    /// Its lifetime in days, if it expires.
    pub expires_in_days: Option<i64>,
    /// Its rate limit, if not the deployment's default.
    pub rate_limit_rpm: Option<u32>,
}

/// Parses the body; on failure returns every field error.
pub fn parse(body: &Map<String, Value>) -> Result<CreateApiKey, Vec<FieldError>> {
    let mut errors = Vec::new();
    let name = match body.get("name") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) if s.chars().count() <= MAX_NAME_CHARS => s.clone(),
        Some(Value::String(_)) => {
            errors.push(FieldError::invalid("name", format!("Must be at most {MAX_NAME_CHARS} characters long.")));
            String::new()
        }
        Some(_) => {
            errors.push(FieldError::invalid("name", "Must be a string."));
            String::new()
        }
    };
    let scopes = match body.get("scopes") {
        None | Some(Value::Null) => vec![Scope::Read, Scope::Write],
        Some(Value::Array(items)) if items.is_empty() => {
            errors.push(FieldError::invalid("scopes", "Must list at least one scope."));
            Vec::new()
        }
        Some(Value::Array(items)) => {
            let mut scopes = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match item.as_str().map(str::parse::<Scope>) {
                    Some(Ok(scope)) if !scopes.contains(&scope) => scopes.push(scope),
                    Some(Ok(_)) => {}
                    _ => errors.push(FieldError::invalid(format!("scopes[{i}]"), "Must be one of read, write, admin.")),
                }
            }
            scopes
        }
        Some(_) => {
            errors.push(FieldError::invalid("scopes", "Must be an array of scope names (read, write, admin)."));
            Vec::new()
        }
    };
    let expires_in_days = match body.get("expires_in_days") {
        None | Some(Value::Null) => None,
        Some(v) => match super::body::integer(v) {
            Some(days) if EXPIRES_IN_DAYS.contains(&days) => Some(days),
            _ => {
                errors.push(FieldError::invalid("expires_in_days", "Must be an integer from 1 to 365."));
                None
            }
        },
    };
    let rate_limit_rpm = match body.get("rate_limit_rpm") {
        None | Some(Value::Null) => None,
        Some(v) => match super::body::integer(v) {
            Some(rpm) if RATE_LIMIT_RPM.contains(&rpm) => u32::try_from(rpm).ok(),
            _ => {
                errors.push(FieldError::invalid("rate_limit_rpm", "Must be an integer from 1 to 1000000."));
                None
            }
        },
    };
    if errors.is_empty() { Ok(CreateApiKey { name, scopes, expires_in_days, rate_limit_rpm }) } else { Err(errors) }
}

impl super::FromBody for CreateApiKey {
    fn from_body(body: &Map<String, Value>) -> Result<Self, Vec<FieldError>> {
        parse(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse_json(v: Value) -> Result<CreateApiKey, Vec<FieldError>> {
        parse(v.as_object().expect("object"))
    }

    fn fields(v: Value) -> Vec<String> {
        parse_json(v).expect_err("invalid").into_iter().map(|e| e.field).collect()
    }

    #[test]
    fn an_empty_body_gives_the_defaults() {
        let req = parse_json(json!({})).expect("valid");
        assert_eq!(
            req,
            CreateApiKey {
                name: String::new(),
                scopes: vec![Scope::Read, Scope::Write],
                expires_in_days: None,
                rate_limit_rpm: None
            }
        );
    }

    #[test]
    fn limits_hold_on_both_sides() {
        assert!(parse_json(json!({"name": "a".repeat(100)})).is_ok());
        assert_eq!(fields(json!({"name": "a".repeat(101)})), vec!["name"]);
        for (days, ok) in [(0, false), (1, true), (365, true), (366, false)] {
            assert_eq!(parse_json(json!({"expires_in_days": days})).is_ok(), ok, "{days}");
        }
        for (rpm, ok) in [(0, false), (1, true), (1_000_000, true), (1_000_001, false)] {
            assert_eq!(parse_json(json!({"rate_limit_rpm": rpm})).is_ok(), ok, "{rpm}");
        }
        assert_eq!(parse_json(json!({"rate_limit_rpm": 60})).expect("valid").rate_limit_rpm, Some(60));
    }

    #[test]
    fn every_bad_field_is_reported() {
        assert_eq!(
            fields(json!({"name": 5, "scopes": ["read", "root"], "expires_in_days": 1.5})),
            vec!["name", "scopes[1]", "expires_in_days"]
        );
        assert_eq!(fields(json!({"scopes": []})), vec!["scopes"]);
        assert_eq!(fields(json!({"scopes": "read"})), vec!["scopes"]);
        assert_eq!(fields(json!({"expires_in_days": "3"})), vec!["expires_in_days"]);
    }

    #[test]
    fn duplicate_scopes_are_dropped() {
        assert_eq!(parse_json(json!({"scopes": ["admin", "admin"]})).expect("valid").scopes, vec![Scope::Admin]);
    }
}
