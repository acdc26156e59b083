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
//! | `max_instances` | required | optional | 0 to 100, at least `min_instances` (0: switched off, as Replicate allows) |
//! | `priority` | optional | optional | `high`, `normal` or `low`: its predictions' priority when they ask for none |
//!
//! Whether the model and version exist is checked by the handler.

use crate::problem::FieldError;
use common::domain::{ModelRef, Pool, Priority, route::is_version_id};
use serde::Deserialize;
use serde_json::Value;

use super::{
    FromBody,
    body::integer,
    field::{Faults, Field, FieldValue, Read, text},
};

/// The body of `POST /v1/deployments`.
// As sent; `NewDeployment` is it checked.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct CreateDeploymentBody {
    /// The deployment's name, unique in the account.
    #[schema(value_type = String, pattern = r"^[a-z0-9][a-z0-9._-]{0,99}$")]
    pub name: Option<Field<DeploymentName>>,
    /// `owner/name` of a registered model.
    #[schema(value_type = String, pattern = r"^[a-z0-9][a-z0-9._-]{0,99}/[a-z0-9][a-z0-9._-]{0,99}$")]
    pub model: Option<Field<Model>>,
    /// A version id the model has had (`GET /v1/models/{owner}/{name}/versions`).
    #[schema(value_type = String, pattern = r"^[A-Za-z0-9]{1,64}$")]
    pub version: Option<Field<VersionId>>,
    /// A hardware pool (`GET /v1/hardware`).
    #[schema(value_type = String, pattern = r"^[a-z][a-z0-9-]{0,31}$")]
    pub hardware: Option<Field<Pool>>,
    /// The fewest runners an autoscaler keeps.
    #[schema(value_type = u32, minimum = 0, maximum = 100)]
    pub min_instances: Option<Field<Instances<0>>>,
    /// The most runners an autoscaler starts; at least `min_instances` (0 switches the
    /// deployment off: its predictions wait until it is switched on).
    #[schema(value_type = u32, minimum = 0, maximum = 100)]
    pub max_instances: Option<Field<Instances<0>>>,
    /// The priority of its predictions that ask for none (default `normal`); at most the
    /// account's `max_priority`.
    #[schema(value_type = Option<Priority>)]
    pub priority: Option<Field<Priority>>,
}

/// The body of `PATCH /v1/deployments/{owner}/{name}`: at least one field, and no other.
// As sent; `parse_change` checks it.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateDeploymentBody {
    /// A version id the model has had.
    #[schema(value_type = Option<String>, pattern = r"^[A-Za-z0-9]{1,64}$")]
    pub version: Option<Field<VersionId>>,
    /// A hardware pool.
    #[schema(value_type = Option<String>, pattern = r"^[a-z][a-z0-9-]{0,31}$")]
    pub hardware: Option<Field<Pool>>,
    /// The fewest runners an autoscaler keeps.
    #[schema(value_type = Option<u32>, minimum = 0, maximum = 100)]
    pub min_instances: Option<Field<Instances<0>>>,
    /// The most runners an autoscaler starts (0: switched off).
    #[schema(value_type = Option<u32>, minimum = 0, maximum = 100)]
    pub max_instances: Option<Field<Instances<0>>>,
    /// The priority of its predictions that ask for none.
    #[schema(value_type = Option<Priority>)]
    pub priority: Option<Field<Priority>>,
}

/// A deployment's name: 1 to 100 characters of `a-z`, `0-9`, `-`, `_`, `.`, starting with a
/// letter or digit.
#[derive(Debug)]
pub struct DeploymentName(String);

impl FieldValue for DeploymentName {
    fn from_value(value: Value) -> Result<Self, Faults> {
        let name = text(value)?;
        if is_name(&name) {
            Ok(Self(name))
        } else {
            Err(Faults::new("1 to 100 characters of a-z, 0-9, '-', '_' and '.'."))
        }
    }
}

/// The model of a deployment: `owner/name`.
#[derive(Debug)]
pub struct Model(ModelRef);

impl FieldValue for Model {
    fn from_value(value: Value) -> Result<Self, Faults> {
        text(value)?.parse().map(Self).map_err(|_| Faults::new("Must be 'owner/name'."))
    }
}

/// A version id: 1 to 64 letters and digits (`owner/name:id`, as Replicate's clients may send
/// it, counts as its id).
#[derive(Debug)]
pub struct VersionId(String);

impl FieldValue for VersionId {
    fn from_value(value: Value) -> Result<Self, Faults> {
        let text = text(value)?;
        let id = text.rsplit_once(':').map_or(text.as_str(), |(_, id)| id);
        if is_version_id(id) {
            Ok(Self(id.to_owned()))
        } else {
            Err(Faults::new("Must be a version id (1 to 64 letters and digits)."))
        }
    }
}

/// A number of instances from `LEAST` to [`MAX_INSTANCES`].
#[derive(Debug)]
pub struct Instances<const LEAST: u32>(u32);

impl<const LEAST: u32> FieldValue for Instances<LEAST> {
    fn from_value(value: Value) -> Result<Self, Faults> {
        integer(&value)
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| (LEAST..=MAX_INSTANCES).contains(n))
            .map(Self)
            .ok_or_else(|| Faults::new(format!("Must be a whole number from {LEAST} to {MAX_INSTANCES}.")))
    }
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

fn check_bounds(min: Option<u32>, max: Option<u32>, errors: &mut Vec<FieldError>) {
    if let (Some(min), Some(max)) = (min, max)
        && max < min
    {
        errors.push(FieldError::invalid("max_instances", "Must be at least min_instances."));
    }
}

impl FromBody for NewDeployment {
    type Sent = CreateDeploymentBody;

    fn check(body: CreateDeploymentBody) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        let name = body.name.required("name", &mut errors);
        let model = body.model.required("model", &mut errors);
        let version = body.version.required("version", &mut errors);
        let hardware = body.hardware.required("hardware", &mut errors);
        let min_instances = body.min_instances.required("min_instances", &mut errors).map(|n| n.0);
        let max_instances = body.max_instances.required("max_instances", &mut errors).map(|n| n.0);
        let priority = body.priority.optional("priority", &mut errors);
        check_bounds(min_instances, max_instances, &mut errors);
        match (name, model, version, hardware, min_instances, max_instances) {
            (
                Some(DeploymentName(name)),
                Some(Model(model)),
                Some(VersionId(version)),
                Some(hardware),
                Some(min_instances),
                Some(max_instances),
            ) if errors.is_empty() => {
                Ok(NewDeployment { name, model, version, hardware, min_instances, max_instances, priority })
            }
            _ => Err(errors),
        }
    }
}

/// Checks an update body; `current` bounds are used to check `max_instances >= min_instances`.
pub fn parse_change(body: UpdateDeploymentBody, current: (u32, u32)) -> Result<DeploymentChange, Vec<FieldError>> {
    let mut errors = Vec::new();
    let change = DeploymentChange {
        version: body.version.optional("version", &mut errors).map(|v| v.0),
        hardware: body.hardware.optional("hardware", &mut errors),
        min_instances: body.min_instances.optional("min_instances", &mut errors).map(|n| n.0),
        max_instances: body.max_instances.optional("max_instances", &mut errors).map(|n| n.0),
        priority: body.priority.optional("priority", &mut errors),
    };
    if errors.is_empty() && change == DeploymentChange::default() {
        errors.push(FieldError::missing("version"));
    }
    check_bounds(change.min_instances.or(Some(current.0)), change.max_instances.or(Some(current.1)), &mut errors);
    if errors.is_empty() { Ok(change) } else { Err(errors) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object<T: serde::de::DeserializeOwned>(v: Value) -> T {
        crate::validate::field::from_object(v.as_object().cloned().expect("object")).expect("read")
    }

    fn parse_new(body: CreateDeploymentBody) -> Result<NewDeployment, Vec<FieldError>> {
        NewDeployment::check(body)
    }

    #[test]
    fn a_whole_create_parses() {
        let body = object(json!({"name": "my-app", "model": "demo/echo", "version": "v2", "hardware": "cpu",
                                 "min_instances": 0, "max_instances": 3}));
        let parsed = parse_new(body).expect("valid");
        assert_eq!((parsed.name.as_str(), parsed.version.as_str(), parsed.max_instances), ("my-app", "v2", 3));
        assert_eq!(parsed.priority, None);
        let low = object(json!({"name": "b", "model": "demo/echo", "version": "v2", "hardware": "cpu",
                                "min_instances": 0, "max_instances": 3, "priority": "low"}));
        assert_eq!(parse_new(low).expect("valid").priority, Some(Priority::Low));
        let bad = object(json!({"name": "b", "model": "demo/echo", "version": "v2", "hardware": "cpu",
                                "min_instances": 0, "max_instances": 3, "priority": "urgent"}));
        assert_eq!(parse_new(bad).expect_err("invalid")[0].field, "priority");
        assert_eq!(
            parse_change(object(json!({"priority": "high"})), (0, 1)),
            Ok(DeploymentChange { priority: Some(Priority::High), ..DeploymentChange::default() })
        );
    }

    #[test]
    fn every_bad_or_missing_field_of_a_create_is_reported() {
        let body = object(json!({"name": "My App", "model": "echo", "hardware": "any", "min_instances": 5,
                                 "max_instances": 2}));
        let errors = parse_new(body).expect_err("invalid");
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["name", "model", "version", "hardware", "max_instances"]);
    }

    #[test]
    fn an_update_takes_only_its_fields_and_at_least_one() {
        assert_eq!(
            parse_change(object(json!({"version": "demo/echo:v3"})), (0, 1)),
            Ok(DeploymentChange { version: Some("v3".into()), ..DeploymentChange::default() })
        );
        assert!(parse_change(object(json!({})), (0, 1)).is_err(), "nothing to change");
        let refused = crate::validate::field::from_object::<UpdateDeploymentBody>(
            json!({"name": "other"}).as_object().cloned().expect("object"),
        );
        assert_eq!(refused.expect_err("not changeable")[0].field, "name");
        let errors = parse_change(object(json!({"min_instances": 4})), (0, 2)).expect_err("over max");
        assert_eq!(errors[0].field, "max_instances");
    }
}
