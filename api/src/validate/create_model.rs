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
//! | `github_url`, `paper_url`, `license_url`, `cover_image_url` | optional: an absolute `http` or `https` URL of at most 2,000 characters, or `null` |

use common::{
    domain::{Pool, model::is_valid_segment},
    store::{ModelLinks, Visibility},
};
use serde_json::{Map, Value};

use super::body::{hardware, require, string};
use crate::problem::FieldError;

/// The longest description.
const MAX_DESCRIPTION: usize = 1_000;
/// The longest link.
const MAX_URL: usize = 2_000;

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
    /// Its code (an absolute URL).
    #[schema(format = "uri", max_length = 2000)]
    github_url: Option<String>,
    /// Its paper (an absolute URL).
    #[schema(format = "uri", max_length = 2000)]
    paper_url: Option<String>,
    /// Its license (an absolute URL).
    #[schema(format = "uri", max_length = 2000)]
    license_url: Option<String>,
    /// An image that shows it (an absolute URL).
    #[schema(format = "uri", max_length = 2000)]
    cover_image_url: Option<String>,
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
    /// Where to read more of it.
    pub links: ModelLinks,
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
    let mut link = |field: &str| {
        text(field, &mut errors).and_then(|u| match url::Url::parse(&u) {
            Ok(parsed) if matches!(parsed.scheme(), "http" | "https") && u.len() <= MAX_URL => Some(u),
            _ => {
                errors.push(FieldError::invalid(
                    field,
                    format!("Must be an absolute http or https URL of at most {MAX_URL} characters, or null."),
                ));
                None
            }
        })
    };
    let links = ModelLinks {
        github_url: link("github_url"),
        paper_url: link("paper_url"),
        license_url: link("license_url"),
        cover_image_url: link("cover_image_url"),
    };
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
            Ok(NewModel { owner, name, visibility, hardware, description, links })
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
        assert_eq!(new.links, ModelLinks::default());
    }

    #[test]
    fn links_are_kept_when_absolute_urls_and_named_when_not() {
        let new = parse(&body(json!({"owner": "acme", "name": "m", "visibility": "public", "hardware": "cpu",
            "github_url": "https://github.com/acme/m", "paper_url": null, "cover_image_url": "http://img.example/m.png"})))
        .expect("valid");
        assert_eq!(new.links.github_url.as_deref(), Some("https://github.com/acme/m"));
        assert_eq!((new.links.paper_url, new.links.license_url), (None, None));
        assert_eq!(new.links.cover_image_url.as_deref(), Some("http://img.example/m.png"));
        let errors = parse(&body(json!({"owner": "acme", "name": "m", "visibility": "public", "hardware": "cpu",
            "github_url": "github.com/acme", "license_url": "ftp://x/y", "paper_url": 3})))
        .expect_err("invalid");
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, vec!["github_url", "paper_url", "license_url"]);
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
