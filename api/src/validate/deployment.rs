//! The bodies of `POST /v1/deployments` and `PATCH /v1/deployments/{owner}/{name}`: every
//! field checked, every failing one reported at once.
//!
//! | field | create | update | rule |
//! |---|---|---|---|
//! | `name` | required | — | 1 to 100 characters of `a-z`, `0-9`, `-`, `_`, `.`, starting with a letter or digit |
//! | `model` | required | — | `owner/name` |
//! | `version` | required | optional | a version id (1 to 64 letters and digits) |
//! | `hardware` | required | optional | a pool name (see `GET /v1/hardware`) |
//! | `min_instances` | required | optional | 0 to 100 |
//! | `max_instances` | required | optional | 1 to 100, at least `min_instances` |
//! | `priority` | optional | optional | `high`, `normal` or `low`: its predictions' priority when they ask for none |
//!
//! Whether the model and version exist is checked by the handler.

use crate::problem::FieldError;
use common::domain::{ModelRef, Pool, Priority, route::is_version_id};
use serde_json::{Map, Value};

use super::body::{hardware, integer, require, string};

/// `POST /v1/deployments`'s body as the OpenAPI description shows it; [`parse_new`] reads it.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct CreateDeploymentBody {
    /// The deployment's name, unique in the account.
    #[schema(pattern = r"^[a-z0-9][a-z0-9._-]{0,99}$")]
    name: String,
    /// `owner/name` of a registered model.
    #[schema(pattern = r"^[a-z0-9][a-z0-9_-]{0,63}/[a-z0-9][a-z0-9_-]{0,63}$")]
    model: String,
    /// A version id the model has had (`GET /v1/models/{owner}/{name}/versions`).
    #[schema(pattern = r"^[A-Za-z0-9]{1,64}$")]
    version: String,
    /// A hardware pool (`GET /v1/hardware`).
    #[schema(pattern = r"^[a-z][a-z0-9-]{0,31}$")]
    hardware: String,
    /// The fewest runners an autoscaler keeps.
    #[schema(minimum = 0, maximum = 100)]
    min_instances: u32,
    /// The most runners an autoscaler starts; at least `min_instances`.
    #[schema(minimum = 1, maximum = 100)]
    max_instances: u32,
    /// The priority of its predictions that ask for none (default `normal`); at most the
    /// account's `max_priority`.
    priority: Option<Priority>,
}

/// `PATCH /v1/deployments/{owner}/{name}`'s body as the OpenAPI description shows it: at
/// least one field; [`parse_change`] reads it.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct UpdateDeploymentBody {
    /// A version id the model has had.
    #[schema(pattern = r"^[A-Za-z0-9]{1,64}$")]
    version: Option<String>,
    /// A hardware pool.
    #[schema(pattern = r"^[a-z][a-z0-9-]{0,31}$")]
    hardware: Option<String>,
    /// The fewest runners an autoscaler keeps.
    #[schema(minimum = 0, maximum = 100)]
    min_instances: Option<u32>,
    /// The most runners an autoscaler starts.
    #[schema(minimum = 1, maximum = 100)]
    max_instances: Option<u32>,
    /// The priority of its predictions that ask for none.
    priority: Option<Priority>,
}

/// The most instances a release may name.
pub const MAX_INSTANCES: u32 = 100;

/// A create request, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct NewDeployment {
    /// The deployment's name.
    pub name: String,
    /// The model.
    pub model: ModelRef,
    /// The version.
    pub version: String,
    /// The pool.
    pub hardware: Pool,
    /// Fewest instances.
    pub min_instances: u32,
    /// Most instances.
    pub max_instances: u32,
    /// The default priority of its predictions.
    pub priority: Option<Priority>,
}

/// An update request, parsed: the fields it changes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeploymentChange {
    /// A new version.
    pub version: Option<String>,
    /// A new pool.
    pub hardware: Option<Pool>,
    /// New fewest instances.
    pub min_instances: Option<u32>,
    /// New most instances.
    pub max_instances: Option<u32>,
    /// A new default priority.
    pub priority: Option<Priority>,
}

/// Whether `name` can name a deployment.
pub fn is_name(name: &str) -> bool {
    (1..=100).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.'))
}

fn instances(body: &Map<String, Value>, field: &str, least: u32, errors: &mut Vec<FieldError>) -> Option<u32> {
    let value = body.get(field).filter(|v| !v.is_null())?;
    match integer(value).and_then(|n| u32::try_from(n).ok()).filter(|n| (least..=MAX_INSTANCES).contains(n)) {
        Some(n) => Some(n),
        None => {
            errors.push(FieldError::invalid(field, format!("Must be a whole number from {least} to {MAX_INSTANCES}.")));
            None
        }
    }
}

fn version(body: &Map<String, Value>, errors: &mut Vec<FieldError>) -> Option<String> {
    let text = string(body, "version", errors)?;
    // `owner/name:id` as Replicate's clients may send it: the id is what counts.
    let id = text.rsplit_once(':').map_or(text, |(_, id)| id);
    if is_version_id(id) {
        Some(id.to_owned())
    } else {
        errors.push(FieldError::invalid("version", "Must be a version id (1 to 64 letters and digits)."));
        None
    }
}

fn priority(body: &Map<String, Value>, errors: &mut Vec<FieldError>) -> Option<Priority> {
    let text = string(body, "priority", errors)?;
    match text.parse() {
        Ok(p) => Some(p),
        Err(_) => {
            errors.push(FieldError::invalid("priority", "Must be high, normal or low."));
            None
        }
    }
}

fn check_bounds(min: Option<u32>, max: Option<u32>, errors: &mut Vec<FieldError>) {
    if let (Some(min), Some(max)) = (min, max)
        && max < min
    {
        errors.push(FieldError::invalid("max_instances", "Must be at least min_instances."));
    }
}

/// Parses a create body.
pub fn parse_new(body: &Map<String, Value>) -> Result<NewDeployment, Vec<FieldError>> {
    let mut errors = Vec::new();
    let name = string(body, "name", &mut errors).and_then(|n| {
        is_name(n).then(|| n.to_owned()).or_else(|| {
            errors.push(FieldError::invalid("name", "1 to 100 characters of a-z, 0-9, '-', '_' and '.'."));
            None
        })
    });
    let model = string(body, "model", &mut errors).and_then(|m| {
        m.parse::<ModelRef>().ok().or_else(|| {
            errors.push(FieldError::invalid("model", "Must be 'owner/name'."));
            None
        })
    });
    let version = version(body, &mut errors);
    let hardware = hardware(body, &mut errors);
    let min_instances = instances(body, "min_instances", 0, &mut errors);
    let max_instances = instances(body, "max_instances", 1, &mut errors);
    let priority = priority(body, &mut errors);
    require(
        &[
            ("name", name.is_some()),
            ("model", model.is_some()),
            ("version", version.is_some()),
            ("hardware", hardware.is_some()),
            ("min_instances", min_instances.is_some()),
            ("max_instances", max_instances.is_some()),
        ],
        &mut errors,
    );
    check_bounds(min_instances, max_instances, &mut errors);
    match (name, model, version, hardware, min_instances, max_instances) {
        (Some(name), Some(model), Some(version), Some(hardware), Some(min_instances), Some(max_instances))
            if errors.is_empty() =>
        {
            Ok(NewDeployment { name, model, version, hardware, min_instances, max_instances, priority })
        }
        _ => Err(errors),
    }
}

/// Parses an update body; `current` bounds are used to check `max_instances >= min_instances`.
pub fn parse_change(body: &Map<String, Value>, current: (u32, u32)) -> Result<DeploymentChange, Vec<FieldError>> {
    let mut errors = Vec::new();
    for field in body.keys() {
        if !matches!(field.as_str(), "version" | "hardware" | "min_instances" | "max_instances" | "priority") {
            errors.push(FieldError::invalid(field, "Not a field a deployment's update can change."));
        }
    }
    let change = DeploymentChange {
        version: version(body, &mut errors),
        hardware: hardware(body, &mut errors),
        min_instances: instances(body, "min_instances", 0, &mut errors),
        max_instances: instances(body, "max_instances", 1, &mut errors),
        priority: priority(body, &mut errors),
    };
    if errors.is_empty() && change == DeploymentChange::default() {
        errors.push(FieldError::missing("version"));
    }
    check_bounds(change.min_instances.or(Some(current.0)), change.max_instances.or(Some(current.1)), &mut errors);
    if errors.is_empty() { Ok(change) } else { Err(errors) }
}

impl super::FromBody for NewDeployment {
    fn from_body(body: &Map<String, Value>) -> Result<Self, Vec<FieldError>> {
        parse_new(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("object")
    }

    #[test]
    fn a_whole_create_parses() {
        let body = object(json!({"name": "my-app", "model": "demo/echo", "version": "v2", "hardware": "cpu",
                                 "min_instances": 0, "max_instances": 3}));
        let parsed = parse_new(&body).expect("valid");
        assert_eq!((parsed.name.as_str(), parsed.version.as_str(), parsed.max_instances), ("my-app", "v2", 3));
        assert_eq!(parsed.priority, None);
        let low = object(json!({"name": "b", "model": "demo/echo", "version": "v2", "hardware": "cpu",
                                "min_instances": 0, "max_instances": 3, "priority": "low"}));
        assert_eq!(parse_new(&low).expect("valid").priority, Some(Priority::Low));
        let bad = object(json!({"name": "b", "model": "demo/echo", "version": "v2", "hardware": "cpu",
                                "min_instances": 0, "max_instances": 3, "priority": "urgent"}));
        assert_eq!(parse_new(&bad).expect_err("invalid")[0].field, "priority");
        assert_eq!(
            parse_change(&object(json!({"priority": "high"})), (0, 1)),
            Ok(DeploymentChange { priority: Some(Priority::High), ..DeploymentChange::default() })
        );
    }

    #[test]
    fn every_bad_or_missing_field_of_a_create_is_reported() {
        let body = object(json!({"name": "My App", "model": "echo", "hardware": "any", "min_instances": 5,
                                 "max_instances": 2}));
        let errors = parse_new(&body).expect_err("invalid");
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["name", "model", "hardware", "version", "max_instances"]);
    }

    #[test]
    fn an_update_takes_only_its_fields_and_at_least_one() {
        assert_eq!(
            parse_change(&object(json!({"version": "demo/echo:v3"})), (0, 1)),
            Ok(DeploymentChange { version: Some("v3".into()), ..DeploymentChange::default() })
        );
        assert!(parse_change(&object(json!({})), (0, 1)).is_err(), "nothing to change");
        assert!(parse_change(&object(json!({"name": "other"})), (0, 1)).is_err(), "not changeable");
        let errors = parse_change(&object(json!({"min_instances": 4})), (0, 2)).expect_err("over max");
        assert_eq!(errors[0].field, "max_instances");
    }
}
