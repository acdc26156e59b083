//! The routes, one file per resource. Every handler states the scope it needs in its
//! signature (see [`crate::http::auth`]).
//!
//! Every `/v1` route is also mounted under `/replicate/v1` (see [`crate::replicate`]); the
//! handlers render for the request's [`crate::http::surface::Surface`].
//!
//! **A route is declared once**, beside its handler: its `#[utoipa::path]` names its method,
//! its path (relative to the surface's root), its scope's security and every answer it gives,
//! problems included. [`api`] lists the handlers (`routes!`), and the router and the OpenAPI
//! document ([`document`]) are both made from that list. `docs/api.md` lists the same routes
//! (a test compares them). Outside both surfaces: `/ready` and `/health` ([`health`]),
//! `/openapi.json` (mounted by [`crate::app`]) and the console's pages ([`crate::console`]).
//!
//! Also here:
//! - [`account`]: `GET /v1/account`.
//! - [`api_keys`]: API keys of the caller's account.
//! - [`collections`]: collections (docs/replicate.md).
//! - [`deployments`]: deployments, in Replicate's shape.
//! - [`files`]: the Files API.
//! - [`hardware`]: `GET /v1/hardware`.
//! - [`model_versions`]: a model's versions.
//! - [`model_view`]: a model as clients see it.
//! - [`models`]: models (docs/replicate.md), in the shape Replicate's clients read.
//! - [`search`]: finding models by text.
//! - [`stream`]: `GET /v1/predictions/{id}/stream`.
//! - [`trainings`]: trainings (docs/trainings.md), on either API surface.
//! - [`usage`]: `GET /v1/usage`.
//! - [`webhook_deliveries`]: a prediction's webhook deliveries.
//! - [`webhook_secret`]: the account's webhook signing secret.

pub mod account;
pub mod api_keys;
pub mod collections;
pub mod deployments;
pub mod files;
pub mod hardware;
pub mod health;
pub mod model_versions;
pub mod model_view;
pub mod models;
pub mod openapi;
pub mod predictions;
pub mod search;
pub mod stream;
pub mod trainings;
pub mod usage;
pub mod webhook_deliveries;
pub mod webhook_secret;

use std::sync::OnceLock;

use axum::{Extension, Router, extract::DefaultBodyLimit};
use common::domain::ApiSurface;
use utoipa_axum::{
    router::{OpenApiRouter, UtoipaMethodRouter},
    routes,
};

use crate::{error::ApiError, http::surface::Surface, replicate, state::AppState};

/// Every route, with unknown paths answered 404 problem+json.
pub fn router(state: AppState) -> Router {
    let (documented, _) = documented().split_for_parts();
    let (replicate_surface, _) = api().split_for_parts();
    documented
        .merge(replicate::mount(replicate_surface))
        .merge(crate::console::router(&state))
        .fallback(unknown_route)
        .with_state(state)
}

/// The OpenAPI document of every route (built once): what the routes declare, completed by
/// [`openapi::complete`].
pub fn document() -> &'static utoipa::openapi::OpenApi {
    static DOCUMENT: OnceLock<utoipa::openapi::OpenApi> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let mut doc = documented().into_openapi();
        search::register_schemas(&mut doc);
        openapi::complete(doc)
    })
}

/// The canonical surface under its root and the operations' routes, with their document.
fn documented() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::base())
        .nest(ApiSurface::Canonical.root(), api().layer(Extension(Surface(ApiSurface::Canonical))))
        .routes(routes!(health::ready))
        .routes(routes!(health::health))
}

/// The routes of an API surface, relative to its root: one `routes!` per path.
fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(account::get, account::update))
        .routes(routes!(hardware::list))
        .routes(routes!(deployments::create, deployments::list))
        .routes(routes!(deployments::get, deployments::update, deployments::delete))
        .routes(routes!(deployments::predict))
        .routes(routes!(api_keys::create, api_keys::list))
        .routes(routes!(api_keys::get, api_keys::update))
        .routes(searchable(routes!(models::list, models::create)))
        .routes(routes!(search::search))
        .routes(routes!(collections::list))
        .routes(routes!(collections::get))
        .routes(routes!(models::get, models::update, models::delete))
        .routes(routes!(models::readme))
        .routes(routes!(models::examples))
        .routes(routes!(model_versions::list))
        .routes(routes!(model_versions::get, model_versions::delete))
        .routes(routes!(trainings::create))
        .routes(routes!(trainings::list))
        .routes(routes!(trainings::get))
        .routes(routes!(trainings::cancel))
        .routes(routes!(predictions::create))
        .routes(routes!(predictions::list, predictions::create_by_version))
        .routes(routes!(predictions::get))
        .routes(routes!(predictions::cancel))
        .routes(routes!(stream::stream))
        .routes(routes!(webhook_deliveries::list))
        .routes(routes!(webhook_deliveries::resend))
        .routes(streamed_upload(routes!(files::create, files::list)))
        .routes(routes!(files::get, files::delete))
        .routes(routes!(files::download))
        .routes(routes!(webhook_secret::get))
        .routes(routes!(webhook_secret::get_default))
        .routes(routes!(webhook_secret::rotate))
        .routes(routes!(usage::get))
}

/// An upload streams to the file store under its own limit (`API_MAX_FILE_BYTES`), not the
/// 1 MiB of other bodies.
fn streamed_upload((schemas, paths, methods): UtoipaMethodRouter<AppState>) -> UtoipaMethodRouter<AppState> {
    (schemas, paths, methods.layer(DefaultBodyLimit::disable()))
}

/// `/models` also answers `QUERY` (a search, [`search::query_models`]): a method axum does not
/// route by, so it reaches the route's fallback.
fn searchable((schemas, paths, methods): UtoipaMethodRouter<AppState>) -> UtoipaMethodRouter<AppState> {
    (schemas, paths, methods.fallback(search::query_models))
}

/// An unknown path: a 404 page for a browser outside the APIs, problem+json otherwise.
async fn unknown_route(uri: axum::http::Uri, headers: axum::http::HeaderMap) -> axum::response::Response {
    use axum::response::IntoResponse;
    let api = uri.path().starts_with(ApiSurface::Canonical.root()) || uri.path().starts_with(replicate::ROOT);
    let browser =
        headers.get(axum::http::header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/html"));
    if browser && !api {
        return crate::console::not_found().into_response();
    }
    ApiError::not_found("No such route.").into_response()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Every documented operation as `METHOD path`.
    fn operations(doc: &utoipa::openapi::OpenApi) -> BTreeSet<String> {
        let doc = serde_json::to_value(doc).expect("json");
        let mut found = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for method in item.as_object().expect("item").keys() {
                found.insert(format!("{} {path}", method.to_uppercase()));
            }
        }
        found
    }

    #[test]
    fn every_authenticated_operation_answers_the_auth_layers_problems_on_both_surfaces() {
        let doc = serde_json::to_value(document()).expect("json");
        assert_eq!(doc["openapi"], "3.1.0");
        let mut checked = 0;
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("item") {
                if op["security"].as_array().is_none_or(Vec::is_empty) {
                    assert!(["/ready", "/health"].contains(&path.as_str()), "{method} {path} takes no key");
                    continue;
                }
                for status in ["401", "403", "429", "500", "503"] {
                    let content = &op["responses"][status]["content"]["application/problem+json"];
                    assert!(content.is_object(), "{method} {path} {status}");
                }
                checked += 1;
            }
        }
        let canonical = operations(document()).iter().filter(|op| op.contains(" /v1/")).count();
        assert_eq!(checked, 2 * canonical, "each /v1 operation and its /replicate/v1 copy");
    }

    #[test]
    fn a_handler_declares_its_own_problems() {
        let doc = serde_json::to_value(document()).expect("json");
        let problems = |path: &str, method: &str| -> BTreeSet<String> {
            doc["paths"][path][method]["responses"]
                .as_object()
                .expect("responses")
                .iter()
                .filter(|(_, r)| r["content"]["application/problem+json"].is_object())
                .map(|(status, _)| status.clone())
                .filter(|status| !["401", "403", "429", "500", "503"].contains(&status.as_str()))
                .collect()
        };
        let set = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        assert_eq!(problems("/v1/predictions/{id}/cancel", "post"), set(&["400", "404"]));
        assert_eq!(problems("/replicate/v1/files/{id}/download", "get"), set(&["400", "404", "416"]));
        assert_eq!(problems("/v1/hardware", "get"), set(&[]));
    }

    #[test]
    fn operation_ids_are_unique() {
        let doc = serde_json::to_value(document()).expect("json");
        let mut ids: Vec<String> = doc["paths"]
            .as_object()
            .expect("paths")
            .values()
            .flat_map(|item| item.as_object().expect("item").values())
            .filter_map(|op| op["operationId"].as_str().map(str::to_owned))
            .collect();
        let count = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), count);
        assert!(ids.contains(&"getModelReplicate".to_owned()));
    }

    /// `docs/api.md` names every `/v1` route the router serves, and no other.
    #[test]
    fn the_api_reference_page_lists_the_routers_routes() {
        let page =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/api.md")).expect("docs/api.md");
        let named: BTreeSet<String> = routes_named(&page);
        let served: BTreeSet<String> = operations(document()).into_iter().filter(|op| op.contains(" /v1/")).collect();
        let missing: Vec<_> = served.difference(&named).collect();
        let unknown: Vec<_> = named.difference(&served).collect();
        assert!(missing.is_empty(), "routes docs/api.md does not name: {missing:?}");
        assert!(unknown.is_empty(), "routes docs/api.md names that the router does not serve: {unknown:?}");
    }

    /// Every "`METHOD /v1/path`" of `page` (a query string dropped).
    fn routes_named(page: &str) -> BTreeSet<String> {
        let mut found = BTreeSet::new();
        for (i, _) in page.match_indices('`') {
            let rest = &page[i + 1..];
            let Some((method, tail)) = rest.split_once(' ') else { continue };
            if !["GET", "POST", "PATCH", "DELETE", "PUT"].contains(&method) || !tail.starts_with("/v1/") {
                continue;
            }
            let end = tail.find(['`', ' ', '?']).unwrap_or(tail.len());
            found.insert(format!("{method} {}", &tail[..end]));
        }
        found
    }
}
