//! The body of `POST /v1/models` (Replicate's `models.create`): every field checked, every
//! failing one reported at once.
//!
//! | field | rule |
//! |---|---|
//! | `owner` | required: the caller's account's name (checked by the handler: 403 otherwise) |
//! | `name` | required: 1 to 64 characters of `a-z`, `0-9`, `-`, `_`, starting with a letter or digit |
//! | `visibility` | required: `public` or `private` |
//! | `hardware` | required: a pool name (see `GET /v1/hardware`) |
//! | `description` | optional: a string of at most 1,000 characters |

use common::{
    domain::{Pool, model::is_valid_segment},
    store::Visibility,
};
use serde_json::{Map, Value};

use super::body::{hardware, require, string};
use crate::problem::FieldError;

/// The longest description.
const MAX_DESCRIPTION: usize = 1_000;

/// `POST /v1/models`'s body as the OpenAPI description shows it; [`parse`] reads it.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct CreateModelBody {
    /// The caller's account's name.
    owner: String,
    /// The model's name, unique under its owner.
    #[schema(pattern = r"^[a-z0-9][a-z0-9_-]{0,63}$")]
    name: String,
    /// `public` (every account may see and run it) or `private` (its account only).
    visibility: Visibility,
    /// A hardware pool (`GET /v1/hardware`).
    #[schema(pattern = r"^[a-z][a-z0-9-]{0,31}$")]
    hardware: String,
    /// What it does.
    #[schema(max_length = 1000)]
    description: Option<String>,
}

/// A valid `POST /v1/models` body.
#[derive(Debug, Clone, PartialEq)]
pub struct NewModel {
    /// The owner it names (the handler checks it is the caller's account).
    pub owner: String,
    /// Its name.
    pub name: String,
    /// Who may see it.
    pub visibility: Visibility,
    /// Its hardware pool.
    pub hardware: Pool,
    /// What it does.
    pub description: Option<String>,
}

/// Reads `body`, or every field that is wrong.
pub fn parse(body: &Map<String, Value>) -> Result<NewModel, Vec<FieldError>> {
    let mut errors = Vec::new();
    let text = |field: &str, errors: &mut Vec<FieldError>| string(body, field, errors).map(str::to_owned);
    let owner = text("owner", &mut errors);
    let name = text("name", &mut errors).and_then(|n| {
        is_valid_segment(&n).then_some(n).or_else(|| {
            errors.push(FieldError::invalid(
                "name",
                "1 to 64 characters of a-z, 0-9, '-' and '_', starting with a letter or digit.",
            ));
            None
        })
    });
    let visibility = text("visibility", &mut errors).and_then(|v| match v.as_str() {
        "public" => Some(Visibility::Public),
        "private" => Some(Visibility::Private),
        _ => {
            errors.push(FieldError::invalid("visibility", "Must be 'public' or 'private'."));
            None
        }
    });
    let hardware = hardware(body, &mut errors);
    let description = text("description", &mut errors).and_then(|d| {
        (d.chars().count() <= MAX_DESCRIPTION).then_some(d).or_else(|| {
            errors.push(FieldError::invalid("description", format!("At most {MAX_DESCRIPTION} characters.")));
            None
        })
    });
    require(
        &[
            ("owner", owner.is_some()),
            ("name", name.is_some()),
            ("visibility", visibility.is_some()),
            ("hardware", hardware.is_some()),
        ],
        &mut errors,
    );
    match (owner, name, visibility, hardware) {
        (Some(owner), Some(name), Some(visibility), Some(hardware)) if errors.is_empty() => {
            Ok(NewModel { owner, name, visibility, hardware, description })
        }
        _ => Err(errors),
    }
}

impl super::FromBody for NewModel {
    fn from_body(body: &Map<String, Value>) -> Result<Self, Vec<FieldError>> {
        parse(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(value: Value) -> Map<String, Value> {
        value.as_object().cloned().expect("an object")
    }

    #[test]
    fn a_whole_body_reads() {
        let new = parse(&body(json!({"owner": "acme", "name": "my-tune", "visibility": "private", "hardware": "cpu"})))
            .expect("valid");
        assert_eq!(new.name, "my-tune");
        assert_eq!(new.visibility, Visibility::Private);
        assert_eq!(new.description, None);
    }

    #[test]
    fn every_wrong_field_is_named_at_once() {
        let errors = parse(&body(
            json!({"name": "Bad Name", "visibility": "secret", "hardware": 3, "description": "x".repeat(1001)}),
        ))
        .expect_err("invalid");
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        for field in ["owner", "name", "visibility", "hardware", "description"] {
            assert!(fields.contains(&field), "{field} in {fields:?}");
        }
    }
}
