//! Collections (docs/replicate.md): curated lists of models, in Replicate's shape.
//! `GET /v1/collections` (a page of `{name, slug, description}`) and
//! `GET /v1/collections/{slug}` (the same with `models`: those of its models the caller may
//! see), scope `read`, both surfaces. The operator writes them (`api admin collection`).

use crate::store::collections::ModelCollection;
use axum::{
    Json,
    extract::{Path, State},
};
use serde::Serialize;

use crate::{
    error::ApiError,
    http::{
        auth::{Authorized, Read},
        extract::Query,
        page::{Listed, Page},
        surface::Surface,
    },
    ops::{
        self,
        owned::{VisibleModel, visible_model},
    },
    routes::{
        model_view::{ModelView, model_view, owned_view},
        openapi::problems,
    },
    state::AppState,
    validate::paging::{Paging, PagingParams},
};

/// A collection as its list shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CollectionSummary {
    /// Its name.
    pub name: String,
    /// Its address.
    pub slug: String,
    /// What it gathers.
    pub description: String,
}

/// A page of the list, as [`Page`] builds it.
pub type CollectionPage = Page<CollectionSummary>;

impl Listed for CollectionSummary {
    const PAGE: &'static str = "CollectionPage";
    const DESCRIPTION: &'static str = "A page of collections, by slug.";
    const RESULTS: &'static str = "The collections.";
    const TOTAL_COUNT: Option<&'static str> = None;
}

/// A collection with its models.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CollectionView {
    /// Its name.
    pub name: String,
    /// Its address.
    pub slug: String,
    /// What it gathers.
    pub description: String,
    /// Its models the caller may see, in the collection's order.
    pub models: Vec<ModelView>,
}

fn summary(c: ModelCollection) -> CollectionSummary {
    CollectionSummary { name: c.name, slug: c.slug, description: c.description }
}

/// `GET /v1/collections`
#[utoipa::path(
    get,
    path = "/collections",
    operation_id = "listCollections",
    tag = "models",
    params(PagingParams),
    responses((status = 200, description = "A page of the collections, by slug", body = CollectionPage), (status = 400, response = inline(problems::BadRequest))),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Surface(surface): Surface,
    _auth: Authorized<Read>,
    Query(paging): Query<Paging>,
) -> Result<Json<CollectionPage>, ApiError> {
    let (collections, total) = ops::lists::collections(&state, paging.offset, paging.limit).await?;
    let links = paging.links(total, &format!("{}/collections", state.links.api(surface)));
    Ok(Json(Page::uncounted(collections.into_iter().map(summary).collect(), links)))
}

/// `GET /v1/collections/{slug}`
#[utoipa::path(
    get,
    path = "/collections/{slug}",
    operation_id = "getCollection",
    tag = "models",
    params(("slug" = String, Path, description = "The collection's slug")),
    responses((status = 200, description = "The collection and its models", body = CollectionView), (status = 404, response = inline(problems::NotFound))),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    Surface(surface): Surface,
    auth: Authorized<Read>,
    Path(slug): Path<String>,
) -> Result<Json<CollectionView>, ApiError> {
    let account = &auth.caller.key.account_id;
    let Some(collection) = ops::lists::collection(&state, &slug).await? else {
        return Err(ApiError::not_found(format!("Collection {slug} not found.")));
    };
    let mut models = Vec::with_capacity(collection.models.len());
    for model in &collection.models {
        // A model gone since, or another account's private one, is left out.
        match visible_model(&state, account, model.owner(), model.name()).await {
            Ok(VisibleModel::Registered(registered)) => {
                models.push(model_view(&state, surface, account, &registered).await?)
            }
            Ok(VisibleModel::Owned(owned)) => models.push(owned_view(&state, surface, account, &owned).await?),
            Err(ApiError::Problem(_)) => {}
            Err(e) => return Err(e),
        }
    }
    let CollectionSummary { name, slug, description } = summary(collection);
    Ok(Json(CollectionView { name, slug, description, models }))
}
