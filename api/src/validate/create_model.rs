//! The body of `POST /v1/models` (Replicate's `models.create`): every field checked, every
//! failing one reported at once.
//!
//! | field | rule |
//! |---|---|
//! | `owner` | required: the caller's account's name (checked by the handler: 403 otherwise) |
//! | `name` | required: 1 to 100 characters of `a-z`, `0-9`, `-`, `_`, `.`, starting with a letter or digit |
//! | `visibility` | required: `public` or `private` |
//! | `hardware` | required: a pool name (see `GET /v1/hardware`) |
//! | `description` | optional: a string of at most 1,000 characters |
//! | `github_url`, `paper_url`, `license_url`, `cover_image_url` | optional: an absolute `http` or `https` URL of at most 2,000 characters, or `null` |

use common::{
    domain::{Pool, model::is_valid_segment},
    store::{ModelLinks, Visibility},
};
use serde::Deserialize;
use serde_json::Value;

use super::{
    FromBody,
    field::{Faults, Field, FieldValue, Read, text},
};
use crate::problem::FieldError;

/// The longest description.
const MAX_DESCRIPTION: usize = 1_000;
/// The longest link.
const MAX_URL: usize = 2_000;

/// The body of `POST /v1/models`.
// As sent; `NewModel` is it checked.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct CreateModelBody {
    /// The caller's account's name.
    #[schema(value_type = String)]
    pub owner: Option<Field<String>>,
    /// The model's name, unique under its owner.
    #[schema(value_type = String, pattern = r"^[a-z0-9][a-z0-9._-]{0,99}$")]
    pub name: Option<Field<ModelName>>,
    /// `public` (every account may see and run it) or `private` (its account only).
    #[schema(value_type = Visibility)]
    pub visibility: Option<Field<Visibility>>,
    /// A hardware pool (`GET /v1/hardware`).
    #[schema(value_type = String, pattern = r"^[a-z][a-z0-9-]{0,31}$")]
    pub hardware: Option<Field<Pool>>,
    /// What it does.
    #[schema(value_type = Option<String>, max_length = 1000)]
    pub description: Option<Field<Description>>,
    /// Its code (an absolute URL).
    #[schema(value_type = Option<String>, format = "uri", max_length = 2000)]
    pub github_url: Option<Field<Link>>,
    /// Its paper (an absolute URL).
    #[schema(value_type = Option<String>, format = "uri", max_length = 2000)]
    pub paper_url: Option<Field<Link>>,
    /// Its license (an absolute URL).
    #[schema(value_type = Option<String>, format = "uri", max_length = 2000)]
    pub license_url: Option<Field<Link>>,
    /// An image that shows it (an absolute URL).
    #[schema(value_type = Option<String>, format = "uri", max_length = 2000)]
    pub cover_image_url: Option<Field<Link>>,
}

/// A model's name: 1 to 100 characters of `a-z`, `0-9`, `-`, `_`, `.`, starting with a letter
/// or digit (`flux-1.1-pro`).
#[derive(Debug)]
pub struct ModelName(String);

impl FieldValue for ModelName {
    fn from_value(value: Value) -> Result<Self, Faults> {
        let name = text(value)?;
        if is_valid_segment(&name) {
            Ok(Self(name))
        } else {
            Err(Faults::new("1 to 100 characters of a-z, 0-9, '-', '_' and '.', starting with a letter or digit."))
        }
    }
}

impl FieldValue for Visibility {
    fn from_value(value: Value) -> Result<Self, Faults> {
        match value.as_str() {
            Some("public") => Ok(Visibility::Public),
            Some("private") => Ok(Visibility::Private),
            _ => Err(Faults::new("Must be 'public' or 'private'.")),
        }
    }
}

/// A model's description: at most [`MAX_DESCRIPTION`] characters.
#[derive(Debug)]
pub struct Description(String);

impl FieldValue for Description {
    fn from_value(value: Value) -> Result<Self, Faults> {
        let description = text(value)?;
        if description.chars().count() <= MAX_DESCRIPTION {
            Ok(Self(description))
        } else {
            Err(Faults::new(format!("At most {MAX_DESCRIPTION} characters.")))
        }
    }
}

/// A link of a model: an absolute `http` or `https` URL of at most [`MAX_URL`] characters.
#[derive(Debug)]
pub struct Link(String);

impl FieldValue for Link {
    fn from_value(value: Value) -> Result<Self, Faults> {
        let must =
            || Faults::new(format!("Must be an absolute http or https URL of at most {MAX_URL} characters, or null."));
        let url = text(value).map_err(|_| must())?;
        match url::Url::parse(&url) {
            Ok(parsed) if matches!(parsed.scheme(), "http" | "https") && url.len() <= MAX_URL => Ok(Self(url)),
            _ => Err(must()),
        }
    }
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

impl FromBody for NewModel {
    type Sent = CreateModelBody;

    fn check(body: CreateModelBody) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        let owner = body.owner.required("owner", &mut errors);
        let name = body.name.required("name", &mut errors);
        let visibility = body.visibility.required("visibility", &mut errors);
        let hardware = body.hardware.required("hardware", &mut errors);
        let description = body.description.optional("description", &mut errors).map(|d| d.0);
        let mut link = |field: Option<Field<Link>>, name: &str| field.optional(name, &mut errors).map(|l| l.0);
        let links = ModelLinks {
            github_url: link(body.github_url, "github_url"),
            paper_url: link(body.paper_url, "paper_url"),
            license_url: link(body.license_url, "license_url"),
            cover_image_url: link(body.cover_image_url, "cover_image_url"),
        };
        match (owner, name, visibility, hardware) {
            (Some(owner), Some(ModelName(name)), Some(visibility), Some(hardware)) if errors.is_empty() => {
                Ok(NewModel { owner, name, visibility, hardware, description, links })
            }
            _ => Err(errors),
        }
    }
}

/// The body of `PATCH /v1/models/{owner}/{name}` (Replicate's `models.update`): what its owner
/// says of the model, and no other field. A field sent `null` is left as it is; an empty body
/// changes nothing.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateModelBody {
    /// What it does.
    #[schema(value_type = Option<String>, max_length = 1000)]
    pub description: Option<Field<Description>>,
    /// Its code (an absolute URL).
    #[schema(value_type = Option<String>, format = "uri", max_length = 2000)]
    pub github_url: Option<Field<Link>>,
    /// Its paper (an absolute URL).
    #[schema(value_type = Option<String>, format = "uri", max_length = 2000)]
    pub paper_url: Option<Field<Link>>,
    /// Its license (an absolute URL).
    #[schema(value_type = Option<String>, format = "uri", max_length = 2000)]
    pub license_url: Option<Field<Link>>,
    /// An image that shows it (an absolute URL).
    #[schema(value_type = Option<String>, format = "uri", max_length = 2000)]
    pub cover_image_url: Option<Field<Link>>,
    /// `public` or `private`.
    #[schema(value_type = Option<Visibility>)]
    pub visibility: Option<Field<Visibility>>,
}

/// A valid model update: the fields to set, as stored (`description`, `links.<name>`,
/// `visibility`).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelChange(pub Vec<(&'static str, String)>);

impl FromBody for ModelChange {
    type Sent = UpdateModelBody;

    fn check(body: UpdateModelBody) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        let mut set = Vec::new();
        if let Some(d) = body.description.optional("description", &mut errors) {
            set.push(("description", d.0));
        }
        for (field, stored, value) in [
            ("github_url", "links.github_url", body.github_url),
            ("paper_url", "links.paper_url", body.paper_url),
            ("license_url", "links.license_url", body.license_url),
            ("cover_image_url", "links.cover_image_url", body.cover_image_url),
        ] {
            if let Some(link) = value.optional(field, &mut errors) {
                set.push((stored, link.0));
            }
        }
        if let Some(visibility) = body.visibility.optional("visibility", &mut errors) {
            let text = match visibility {
                Visibility::Public => "public",
                Visibility::Private => "private",
            };
            set.push(("visibility", text.to_owned()));
        }
        if errors.is_empty() { Ok(Self(set)) } else { Err(errors) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(body: serde_json::Map<String, Value>) -> Result<NewModel, Vec<FieldError>> {
        NewModel::from_object(body)
    }

    fn body(value: Value) -> serde_json::Map<String, Value> {
        value.as_object().cloned().expect("an object")
    }

    #[test]
    fn a_whole_body_reads() {
        let new = parse(body(json!({"owner": "acme", "name": "my-tune", "visibility": "private", "hardware": "cpu"})))
            .expect("valid");
        assert_eq!(new.name, "my-tune");
        assert_eq!(new.visibility, Visibility::Private);
        assert_eq!(new.description, None);
        assert_eq!(new.links, ModelLinks::default());
    }

    #[test]
    fn links_are_kept_when_absolute_urls_and_named_when_not() {
        let new = parse(body(json!({"owner": "acme", "name": "m", "visibility": "public", "hardware": "cpu",
            "github_url": "https://github.com/acme/m", "paper_url": null, "cover_image_url": "http://img.example/m.png"})))
        .expect("valid");
        assert_eq!(new.links.github_url.as_deref(), Some("https://github.com/acme/m"));
        assert_eq!((new.links.paper_url, new.links.license_url), (None, None));
        assert_eq!(new.links.cover_image_url.as_deref(), Some("http://img.example/m.png"));
        let errors = parse(body(json!({"owner": "acme", "name": "m", "visibility": "public", "hardware": "cpu",
            "github_url": "github.com/acme", "license_url": "ftp://x/y", "paper_url": 3})))
        .expect_err("invalid");
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, vec!["github_url", "paper_url", "license_url"]);
    }

    #[test]
    fn every_wrong_field_is_named_at_once() {
        let errors = parse(body(
            json!({"name": "Bad Name", "visibility": "secret", "hardware": 3, "description": "x".repeat(1001)}),
        ))
        .expect_err("invalid");
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        for field in ["owner", "name", "visibility", "hardware", "description"] {
            assert!(fields.contains(&field), "{field} in {fields:?}");
        }
    }
}
