//! The body of `POST /v1/account/api-keys`: every field optional. `name` at most 100
//! characters (default empty); `scopes` known scope names (default `["read","write"]`, not
//! empty, duplicates dropped); `expires_in_days` an integer from 1 to 365; `rate_limit_rpm`
//! an integer from 1 to 1,000,000 (default: the deployment's `DEFAULT_RATE_LIMIT_RPM`).

use common::domain::Scope;
use serde::Deserialize;
use serde_json::Value;

use super::{
    FromBody,
    field::{Bounded, Faults, Field, FieldValue, Read, names, text},
};
use crate::problem::FieldError;

/// The longest key name.
pub const MAX_NAME_CHARS: usize = 100;

/// The body of `POST /v1/account/api-keys`: every field optional, and no body at all is `{}`.
// As sent; `CreateApiKey` is it checked.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct CreateApiKeyBody {
    /// A name for people.
    #[schema(value_type = Option<String>, max_length = 100)]
    pub name: Option<Field<KeyName>>,
    /// The key's scopes, each held by the calling key (default `["read","write"]`).
    #[schema(value_type = Option<Vec<Scope>>, min_items = 1)]
    pub scopes: Option<Field<Scopes>>,
    /// Days until the key stops working; never when absent.
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 365)]
    pub expires_in_days: Option<Field<Bounded<1, 365>>>,
    /// Requests per minute the key may make, every authenticated request counted (default: the
    /// deployment's default, 3,000).
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 1000000)]
    pub rate_limit_rpm: Option<Field<Bounded<1, 1_000_000>>>,
}

/// A key's name: at most [`MAX_NAME_CHARS`] characters.
#[derive(Debug)]
pub struct KeyName(String);

impl FieldValue for KeyName {
    fn from_value(value: Value) -> Result<Self, Faults> {
        let name = text(value)?;
        if name.chars().count() <= MAX_NAME_CHARS {
            Ok(Self(name))
        } else {
            Err(Faults::new(format!("Must be at most {MAX_NAME_CHARS} characters long.")))
        }
    }
}

/// A key's scopes: at least one, each named once.
#[derive(Debug)]
pub struct Scopes(Vec<Scope>);

impl FieldValue for Scopes {
    fn from_value(value: Value) -> Result<Self, Faults> {
        if value.as_array().is_some_and(Vec::is_empty) {
            return Err(Faults::new("Must list at least one scope."));
        }
        let array = "Must be an array of scope names (read, write, admin).";
        names(value, array, "Must be one of read, write, admin.").map(Self)
    }
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

impl FromBody for CreateApiKey {
    type Sent = CreateApiKeyBody;

    fn check(body: CreateApiKeyBody) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        let name = body.name.optional("name", &mut errors).map_or_else(String::new, |n| n.0);
        let scopes =
            body.scopes.optional("scopes", &mut errors).map_or_else(|| vec![Scope::Read, Scope::Write], |s| s.0);
        let expires_in_days = body.expires_in_days.optional("expires_in_days", &mut errors).map(|d| d.0);
        let rate_limit_rpm =
            body.rate_limit_rpm.optional("rate_limit_rpm", &mut errors).and_then(|r| u32::try_from(r.0).ok());
        if errors.is_empty() { Ok(Self { name, scopes, expires_in_days, rate_limit_rpm }) } else { Err(errors) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse_json(v: Value) -> Result<CreateApiKey, Vec<FieldError>> {
        CreateApiKey::from_object(v.as_object().cloned().expect("object"))
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
