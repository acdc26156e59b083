//! Finding models by text (docs/replicate.md): `QUERY /v1/models` with the text as a `text/plain`
//! body (the official clients' `models.search`; replicate JS sends it JSON-encoded, which is
//! read as the string it encodes) and `GET /v1/search?query=`, on both surfaces, scope `read`.
//!
//! On `/replicate/v1`, `GET /search` answers Replicate's shape: `{query, models: [{model,
//! metadata}], collections: [...], pages: []}` ([`ReplicateSearchResults`]); `/v1` answers
//! `{query, models: <page>}`. A `QUERY /models` search's `next` and `previous` are
//! `GET /models?query=…` pages, which search as well (`GET /v1/models`), so
//! page 2 of a search is page 2 of the same search.
//!
//! A model matches when every word of the text appears, case-insensitively, in its owner, its
//! name or its description; among the models the caller may see (the registered ones, its own
//! and the public ones, at most [`CANDIDATES`] of each). Best match first: a word that is the
//! whole name counts most, then one that starts it, one inside it, one in the owner, one in
//! the description; equal scores by address. Paginated as every list.

use axum::{
    Json,
    extract::{FromRequestParts, State},
    http::{HeaderValue, StatusCode, header, request::Parts},
    response::{IntoResponse, Response},
};
use common::domain::{AccountId, ApiSurface};
use serde::Serialize;

use crate::{
    error::ApiError,
    http::{
        auth::{Authorized, Read},
        extract::Query,
        page::Page,
        surface::Surface,
    },
    ops::{self, owned::VisibleModel},
    routes::{
        collections::CollectionSummary,
        model_view::{ModelPage, ModelView, registered_description, visible_view},
        openapi::problems,
    },
    state::{AppState, model_catalog::RegisteredModel},
    validate::{
        FromQuery,
        paging::{Paging, PagingParams},
        search_query::{self, SearchParams, SearchQuery},
    },
};

/// The most registered models, and the most of the account's own and public models, a search
/// looks through.
pub const CANDIDATES: i64 = 1_000;

/// What `GET /v1/search` answers.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SearchResults {
    /// The text searched for, trimmed.
    pub query: String,
    /// The matching models, best first.
    pub models: ModelPage,
}

/// What `GET /replicate/v1/search` answers: Replicate's shape.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReplicateSearchResults {
    /// The text searched for, trimmed.
    pub query: String,
    /// The matching models, best first (at most `limit`, after `offset`).
    pub models: Vec<ModelMatch>,
    /// The collections whose slug, name or description match, best first.
    pub collections: Vec<CollectionSummary>,
    /// Pages of documentation that match: none here (the list is kept for Replicate's shape).
    #[schema(value_type = Vec<Object>)]
    pub pages: Vec<serde_json::Value>,
}

/// One model a search found, with what made it match.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ModelMatch {
    /// The model, as `GET /models/{owner}/{name}` shows it.
    pub model: ModelView,
    /// How it matched.
    pub metadata: MatchMetadata,
}

/// What a search says of a model it found.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MatchMetadata {
    /// The model's description (Replicate writes one; here it is the model's own).
    pub generated_description: String,
    /// Its tags: none here.
    pub tags: Vec<String>,
    /// How well it matched: higher is better ([`score`]).
    pub score: u32,
}

/// Adds Replicate's search shape to `doc`'s schemas: `/replicate/v1/search` answers it (see
/// [`crate::routes::openapi`]), which no route declares.
pub fn register_schemas(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::{PartialSchema, ToSchema};
    let mut schemas = Vec::new();
    ReplicateSearchResults::schemas(&mut schemas);
    schemas.push((ReplicateSearchResults::name().into_owned(), ReplicateSearchResults::schema()));
    let components = doc.components.get_or_insert_with(Default::default);
    for (name, schema) in schemas {
        components.schemas.entry(name).or_insert(schema);
    }
}

/// `GET /v1/search`
#[utoipa::path(
    get,
    path = "/search",
    operation_id = "search",
    tag = "models",
    params(SearchParams, PagingParams),
    responses((status = 200, description = "The models that match, best first: `{query, models: <page>}`; on `/replicate/v1`, Replicate's `{query, models: [{model, metadata}], collections, pages}`", body = SearchResults), (status = 400, response = inline(problems::BadRequest))),
    security(("bearer" = []))
)]
pub async fn search(
    State(state): State<AppState>,
    Surface(surface): Surface,
    auth: Authorized<Read>,
    Query(query): Query<SearchQuery>,
) -> Result<Response, ApiError> {
    let account = &auth.caller.key.account_id;
    if surface == ApiSurface::Replicate {
        let found = ranked(&state, account, &query.text).await?;
        let mut models = Vec::new();
        let start = usize::try_from(query.paging.offset).unwrap_or(usize::MAX);
        for (score, model) in found.into_iter().skip(start).take(query.paging.limit as usize) {
            let model = visible_view(&state, surface, account, model).await?;
            let generated_description = model.description.clone();
            models
                .push(ModelMatch { model, metadata: MatchMetadata { generated_description, tags: Vec::new(), score } });
        }
        let collections = matching_collections(&state, &query.text).await?;
        let results = ReplicateSearchResults { query: query.text, models, collections, pages: Vec::new() };
        return Ok(Json(results).into_response());
    }
    let link = search_link(&state, surface, "search", &query.text, query.paging.limit);
    let models = matching(&state, surface, account, &query.text, query.paging, link).await?;
    Ok(Json(SearchResults { query: query.text, models }).into_response())
}

/// The link to the page at an offset of a search for `text` at `path` (`search`, or `models`
/// whose `GET` searches when given a `query`).
pub fn search_link(
    state: &AppState,
    surface: ApiSurface,
    path: &str,
    text: &str,
    limit: u32,
) -> impl Fn(u64) -> String + use<> {
    let base = format!("{}/{path}", state.links.api(surface));
    let encoded: String = url::form_urlencoded::byte_serialize(text.as_bytes()).collect();
    move |offset: u64| format!("{base}?query={encoded}&limit={limit}&offset={offset}")
}

/// The collections whose slug, name or description match `text`, best first.
async fn matching_collections(state: &AppState, text: &str) -> Result<Vec<CollectionSummary>, ApiError> {
    let words = words(text);
    let (collections, _) = ops::lists::collections(state, 0, CANDIDATES as u32).await?;
    let mut found: Vec<(u32, CollectionSummary)> = collections
        .into_iter()
        .filter_map(|c| {
            let score = score(&words, &c.slug, &c.name, &c.description)?;
            Some((score, CollectionSummary { name: c.name, slug: c.slug, description: c.description }))
        })
        .collect();
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.slug.cmp(&b.1.slug)));
    Ok(found.into_iter().map(|(_, c)| c).collect())
}

/// Every method of `/models` other than `GET` and `POST`: `QUERY` with a `text/plain` body
/// searches (the body is the text; `limit` and `offset` in the URL), anything else is 405.
pub async fn query_models(State(state): State<AppState>, mut parts: Parts, body: String) -> Response {
    // A search is a `QUERY` with a text body, as the clients send it; any other request of an
    // undeclared method (a `QUERY` of JSON among them) is refused as before.
    let text_body = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("text/plain"));
    if parts.method.as_str() != "QUERY" || !text_body {
        // `Allow` names the methods the OpenAPI document declares: OpenAPI 3.1 has no `QUERY`,
        // and a client reading `Allow` against the document must find each method listed there.
        let mut refused = StatusCode::METHOD_NOT_ALLOWED.into_response();
        refused.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET,POST"));
        return refused;
    }
    let searched = async {
        let auth = Authorized::<Read>::from_request_parts(&mut parts, &state).await?;
        let Surface(surface) = Surface::from_request_parts(&mut parts, &state).await.unwrap_or_else(|e| match e {});
        // replicate JS sends the text JSON-encoded (`"a cat"`): read it as the string it encodes.
        let body = serde_json::from_str::<String>(body.trim()).unwrap_or(body);
        let (text, paging) = match (search_query::text(Some(&body)), Paging::from_query(parts.uri.query())) {
            (Ok(text), Ok(paging)) => (text, paging),
            (text, paging) => {
                let errors = text.err().into_iter().chain(paging.err().unwrap_or_default()).collect();
                return Err(ApiError::invalid_fields(errors));
            }
        };
        // Its neighbours are `GET /models?query=…` pages: the same search, not the whole list.
        let link = search_link(&state, surface, "models", &text, paging.limit);
        matching(&state, surface, &auth.caller.key.account_id, &text, paging, link).await
    };
    match searched.await {
        Ok(page) => Json(page).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The page `paging` asks for of the models `account` may see that match `text`, best first,
/// with links made by `link` from an offset.
pub async fn matching(
    state: &AppState,
    surface: ApiSurface,
    account: &AccountId,
    text: &str,
    paging: Paging,
    link: impl Fn(u64) -> String,
) -> Result<ModelPage, ApiError> {
    let found = ranked(state, account, text).await?;
    let total = found.len() as u64;
    let start = usize::try_from(paging.offset).unwrap_or(usize::MAX);
    let mut results: Vec<ModelView> = Vec::new();
    for (_, model) in found.into_iter().skip(start).take(paging.limit as usize) {
        results.push(visible_view(state, surface, account, model).await?);
    }
    let (next, previous) = paging.neighbours(total);
    Ok(Page::uncounted(results, (next.map(&link), previous.map(&link))))
}

/// The words of a search text, lowercase.
fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_lowercase).collect()
}

/// Every model `account` may see that matches `text`, with its score, best first (equal
/// scores by address).
async fn ranked(state: &AppState, account: &AccountId, text: &str) -> Result<Vec<(u32, VisibleModel)>, ApiError> {
    let words = words(text);
    let (registered, _) = ops::lists::registered_models(state, 0, CANDIDATES).await?;
    let (owned, _) = ops::lists::owned_models(state, account, 0, CANDIDATES).await?;
    let mut found: Vec<(u32, String, VisibleModel)> = Vec::new();
    for record in registered {
        let model = RegisteredModel::of(record)?;
        let description = registered_description(&model);
        let address = model.record.model.to_string();
        if let Some(score) = score(&words, model.record.model.owner(), model.record.model.name(), &description) {
            found.push((score, address, VisibleModel::Registered(model)));
        }
    }
    for model in owned {
        let description = model.description.clone().unwrap_or_default();
        if let Some(score) = score(&words, model.model.owner(), model.model.name(), &description) {
            found.push((score, model.model.to_string(), VisibleModel::Owned(Box::new(model))));
        }
    }
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    Ok(found.into_iter().map(|(score, _, model)| (score, model)).collect())
}

/// How well a model of `owner`, `name` and `description` matches `words` (lowercase); `None`
/// when a word appears in none of them.
pub fn score(words: &[String], owner: &str, name: &str, description: &str) -> Option<u32> {
    let (owner, name, description) = (owner.to_lowercase(), name.to_lowercase(), description.to_lowercase());
    let address = format!("{owner}/{name}");
    let mut total = 0;
    for word in words {
        total += if name == *word || address == *word {
            100
        } else if name.starts_with(word.as_str()) {
            60
        } else if name.contains(word.as_str()) || address.contains(word.as_str()) && word.contains('/') {
            40
        } else if owner.contains(word.as_str()) {
            20
        } else if description.contains(word.as_str()) {
            10
        } else {
            return None;
        };
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_must_match_and_the_name_counts_most() {
        assert_eq!(score(&words("echo"), "demo", "echo", "A text model."), Some(100));
        assert_eq!(score(&words("ECH"), "demo", "echo", ""), Some(60), "case-insensitive, a prefix");
        assert_eq!(score(&words("cho"), "demo", "echo", ""), Some(40));
        assert_eq!(score(&words("dem"), "demo", "echo", ""), Some(20), "the owner");
        assert_eq!(score(&words("text"), "demo", "echo", "A text model."), Some(10), "the description");
        assert_eq!(score(&words("demo/echo"), "demo", "echo", ""), Some(100), "the address");
        assert_eq!(score(&words("echo video"), "demo", "echo", "A text model."), None, "every word");
        assert!(score(&words("echo"), "demo", "echo", "") > score(&words("echo"), "demo", "echo-2", ""));
    }
}
