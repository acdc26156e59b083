//! The query of `GET /v1/search`: `query` (required: 1 to 200 characters once trimmed), `limit`
//! and `offset` as every list. `QUERY /v1/models` sends the same text as its body.

use serde::Deserialize;

use super::{
    field::{Field, Read},
    paging::{Paging, PagingParams},
};
use crate::problem::FieldError;

/// The longest query text.
pub const MAX_QUERY: usize = 200;

/// The search text as sent (beside its [`PagingParams`]).
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SearchParams {
    /// What to look for in models' owners, names and descriptions (case-insensitive; every
    /// word must match).
    #[param(value_type = String, min_length = 1, max_length = 200, pattern = r"\S")]
    query: Option<Field<String>>,
}
impl super::query::QueryParams for SearchParams {}

/// The search text a model list may carry (`GET /v1/models?query=…`: the next page of a
/// search): as [`SearchParams`], but optional.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListSearchParams {
    /// With it, the page is a page of the search for this text (best match first), as the
    /// `next` link of `QUERY /models` names it; without it, every model by address.
    #[param(value_type = Option<String>, min_length = 1, max_length = 200, pattern = r"\S")]
    query: Option<Field<String>>,
    /// Orders the models by when each was created (`model_created_at`) or when its latest
    /// version was (`latest_version_created_at`; models without one come last), as Replicate's
    /// `models.list` does. Without it (and without `sort_direction`), by address.
    #[param(value_type = Option<ModelSort>)]
    sort_by: Option<Field<ModelSort>>,
    /// `desc` (newest first, the default when sorting) or `asc`.
    #[param(value_type = Option<SortDirection>)]
    sort_direction: Option<Field<SortDirection>>,
}
impl super::query::QueryParams for ListSearchParams {}

/// What a model list is sorted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum ModelSort {
    /// When the model was created (a registered model: when its first version was seen).
    #[default]
    ModelCreatedAt,
    /// When its latest version was created.
    LatestVersionCreatedAt,
}

impl ModelSort {
    /// The parameter's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ModelCreatedAt => "model_created_at",
            Self::LatestVersionCreatedAt => "latest_version_created_at",
        }
    }
}

impl SortDirection {
    /// The parameter's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Asc => "asc",
            Self::Desc => "desc",
        }
    }
}

impl super::field::FieldValue for ModelSort {
    fn from_value(value: serde_json::Value) -> Result<Self, super::field::Faults> {
        match value.as_str() {
            Some("model_created_at") => Ok(Self::ModelCreatedAt),
            Some("latest_version_created_at") => Ok(Self::LatestVersionCreatedAt),
            _ => Err(super::field::Faults::new("One of model_created_at, latest_version_created_at.")),
        }
    }
}

/// The direction of a sorted list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum SortDirection {
    /// Oldest first.
    Asc,
    /// Newest first.
    #[default]
    Desc,
}

impl super::field::FieldValue for SortDirection {
    fn from_value(value: serde_json::Value) -> Result<Self, super::field::Faults> {
        match value.as_str() {
            Some("asc") => Ok(Self::Asc),
            Some("desc") => Ok(Self::Desc),
            _ => Err(super::field::Faults::new("One of asc, desc.")),
        }
    }
}

/// How a model list is sorted, when it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ModelOrder {
    /// By what.
    pub by: ModelSort,
    /// Which way.
    pub direction: SortDirection,
}

/// A well-formed search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchQuery {
    /// The text, trimmed.
    pub text: String,
    /// The page.
    pub paging: Paging,
}

/// The search text `raw` (a query parameter or a `QUERY` body), trimmed; an error at `query`
/// when it is missing, blank (only spaces and line breaks: the schema's `pattern` says so) or
/// too long.
pub fn text(raw: Option<&str>) -> Result<String, FieldError> {
    let Some(raw) = raw.filter(|r| !r.is_empty()) else {
        return Err(FieldError::missing("query"));
    };
    let text = raw.trim();
    if text.is_empty() {
        return Err(FieldError::invalid("query", "At least one character other than spaces."));
    }
    if text.chars().count() > MAX_QUERY {
        return Err(FieldError::invalid("query", format!("At most {MAX_QUERY} characters.")));
    }
    Ok(text.to_owned())
}

impl super::FromQuery for SearchQuery {
    type Sent = (SearchParams, PagingParams);

    fn check((search, paging): Self::Sent) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        let sent = search.query.optional("query", &mut errors);
        let text = text(sent.as_deref()).map_err(|e| errors.push(e)).ok();
        let paging = Paging::read(paging, &mut errors);
        match text {
            Some(text) if errors.is_empty() => Ok(Self { text, paging }),
            _ => Err(errors),
        }
    }
}

/// The query of `GET /v1/models`: its page, and a search text when it follows the `next` or
/// `previous` link of a search (`QUERY /v1/models`), which then searches the same text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelListQuery {
    /// The search text, trimmed, if any.
    pub text: Option<String>,
    /// The page.
    pub paging: Paging,
    /// The order asked for (`sort_by`, `sort_direction`), if any: else by address.
    pub order: Option<ModelOrder>,
}

impl super::FromQuery for ModelListQuery {
    type Sent = (ListSearchParams, PagingParams);

    fn check((search, paging): Self::Sent) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        let sent = search.query.optional("query", &mut errors);
        let text = sent.map(|raw| text(Some(&raw)).map_err(|e| errors.push(e)).ok());
        let paging = Paging::read(paging, &mut errors);
        let by = search.sort_by.optional("sort_by", &mut errors);
        let direction = search.sort_direction.optional("sort_direction", &mut errors);
        let order = (by.is_some() || direction.is_some())
            .then(|| ModelOrder { by: by.unwrap_or_default(), direction: direction.unwrap_or_default() });
        match text {
            _ if !errors.is_empty() => Err(errors),
            Some(text) => Ok(Self { text, paging, order }),
            None => Ok(Self { text: None, paging, order }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::FromQuery;

    #[test]
    fn a_query_is_required_trimmed_and_bounded() {
        let q = SearchQuery::from_query(Some("query=%20Echo%20&limit=5")).expect("valid");
        assert_eq!((q.text.as_str(), q.paging.limit), ("Echo", 5));
        let fields = |raw: &str| -> Vec<String> {
            SearchQuery::from_query(Some(raw)).expect_err("invalid").into_iter().map(|e| e.field).collect()
        };
        assert_eq!(fields("query=%20%20"), vec!["query"]);
        assert_eq!(fields("query=%0A"), vec!["query"], "a line break alone is blank too");
        assert_eq!(fields(""), vec!["query"]);
        assert_eq!(fields(&format!("query={}&limit=0", "x".repeat(201))), vec!["query", "limit"]);
    }

    #[test]
    fn a_model_list_is_sorted_only_when_asked_and_newest_first_by_default() {
        let order = |raw: &str| ModelListQuery::from_query(Some(raw)).expect("valid").order;
        assert_eq!(order(""), None, "by address");
        assert_eq!(
            order("sort_by=latest_version_created_at"),
            Some(ModelOrder { by: ModelSort::LatestVersionCreatedAt, direction: SortDirection::Desc })
        );
        assert_eq!(
            order("sort_direction=asc"),
            Some(ModelOrder { by: ModelSort::ModelCreatedAt, direction: SortDirection::Asc })
        );
        let fields: Vec<String> = ModelListQuery::from_query(Some("sort_by=name&sort_direction=up"))
            .expect_err("invalid")
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(fields, vec!["sort_by", "sort_direction"]);
    }
}
