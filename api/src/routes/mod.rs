//! The routes, one file per resource. Every handler states the scope it needs in its
//! signature (see [`crate::auth`]).
//!
//! Every `/v1` route is also mounted under `/replicate/v1` (see [`crate::replicate`]); the
//! handlers render for the request's [`crate::surface::Surface`].
//!
//! | route (under `/v1` and `/replicate/v1`) | handler | scope |
//! |---|---|---|
//! | `GET /account` | [`account::get`] | read |
//! | `GET /hardware` | [`hardware::list`] | read |
//! | `POST /deployments` | [`deployments::create`] | admin |
//! | `GET /deployments` | [`deployments::list`] | read |
//! | `GET /deployments/{owner}/{name}` | [`deployments::get`] | read |
//! | `PATCH /deployments/{owner}/{name}` (a new release) | [`deployments::update`] | admin |
//! | `DELETE /deployments/{owner}/{name}` | [`deployments::delete`] | admin |
//! | `POST /deployments/{owner}/{name}/predictions` | [`deployments::predict`] | write |
//! | `POST /account/api-keys` | [`api_keys::create`] | admin |
//! | `GET /account/api-keys` | [`api_keys::list`] | admin |
//! | `GET /account/api-keys/{id}` | [`api_keys::get`] | admin |
//! | `PATCH /account/api-keys/{id}` (deactivate) | [`api_keys::update`] | admin |
//! | `POST /models/{owner}/{model}/predictions` | [`predictions::create`] | write |
//! | `POST /predictions` (by `version`) | [`predictions::create_by_version`] | write |
//! | `GET /predictions` | [`predictions::list`] | read |
//! | `GET /predictions/{id}` | [`predictions::get`] | read |
//! | `POST /predictions/{id}/cancel` | [`predictions::cancel`] | write |
//! | `GET /predictions/{id}/stream` | [`stream::stream`] | read, or the `token` of `urls.stream` |
//! | `GET /predictions/{id}/webhook-deliveries` | [`webhook_deliveries::list`] | read |
//! | `POST /predictions/{id}/webhook-deliveries/{webhook_id}/resend` | [`webhook_deliveries::resend`] | write |
//! | `GET /models` | [`models::list`] | read |
//! | `GET /models/{owner}/{name}` | [`models::get`] | read |
//! | `GET /models/{owner}/{name}/versions` | [`models::versions`] | read |
//! | `GET /models/{owner}/{name}/versions/{id}` | [`models::version`] | read |
//! | `POST /files` (multipart upload) | [`files::create`] | write |
//! | `GET /files` | [`files::list`] | read |
//! | `GET /files/{id}` | [`files::get`] | read |
//! | `DELETE /files/{id}` | [`files::delete`] | write |
//! | `GET /files/{id}/download` | [`files::download`] | read, or a signed URL |
//! | `GET /account/webhooks/secret` (alias `GET /webhooks/default/secret`) | [`webhook_secret::get`] | admin |
//! | `POST /account/webhooks/secret/rotate` | [`webhook_secret::rotate`] | admin |
//!
//! Outside both surfaces:
//!
//! | route | handler | scope |
//! |---|---|---|
//! | `GET /ready`, `GET /health` | [`health`] | none |
//! | `GET /openapi.json` (mounted by [`crate::app`]) | [`crate::openapi::serve`] | none |
//! | the console's pages (`/`, `/login`, `/predictions/{id}`, …) | [`crate::console`] | a session |

pub mod account;
pub mod api_keys;
pub mod deployments;
pub mod files;
pub mod hardware;
pub mod health;
pub mod models;
pub mod predictions;
pub mod stream;
pub mod webhook_deliveries;
pub mod webhook_secret;

use axum::{
    Extension, Router,
    extract::DefaultBodyLimit,
    routing::{get, post},
};
use common::domain::ApiSurface;

use crate::{error::ApiError, replicate, state::AppState, surface::Surface};

/// Every route, with unknown paths answered 404 problem+json.
pub fn router(state: AppState) -> Router {
    Router::new()
        .nest(ApiSurface::Canonical.root(), api().layer(Extension(Surface(ApiSurface::Canonical))))
        .merge(replicate::mount(api()))
        .merge(crate::console::router())
        .route("/ready", get(health::ready))
        .route("/health", get(health::health))
        .fallback(unknown_route)
        .with_state(state)
}

/// The routes of an API surface, relative to its root.
fn api() -> Router<AppState> {
    Router::new()
        .route("/account", get(account::get))
        .route("/hardware", get(hardware::list))
        .route("/deployments", post(deployments::create).get(deployments::list))
        .route(
            "/deployments/{owner}/{name}",
            get(deployments::get).patch(deployments::update).delete(deployments::delete),
        )
        .route("/deployments/{owner}/{name}/predictions", post(deployments::predict))
        .route("/account/api-keys", post(api_keys::create).get(api_keys::list))
        .route("/account/api-keys/{id}", get(api_keys::get).patch(api_keys::update))
        .route("/models", get(models::list))
        .route("/models/{owner}/{model}", get(models::get))
        .route("/models/{owner}/{model}/versions", get(models::versions))
        .route("/models/{owner}/{model}/versions/{id}", get(models::version))
        .route("/models/{owner}/{model}/predictions", post(predictions::create))
        .route("/predictions", get(predictions::list).post(predictions::create_by_version))
        .route("/predictions/{id}", get(predictions::get))
        .route("/predictions/{id}/cancel", post(predictions::cancel))
        .route("/predictions/{id}/stream", get(stream::stream))
        .route("/predictions/{id}/webhook-deliveries", get(webhook_deliveries::list))
        .route("/predictions/{id}/webhook-deliveries/{webhook_id}/resend", post(webhook_deliveries::resend))
        // An upload streams to the file store under its own limit (API_MAX_FILE_BYTES).
        .route("/files", post(files::create).layer(DefaultBodyLimit::disable()).get(files::list))
        .route("/files/{id}", get(files::get).delete(files::delete))
        .route("/files/{id}/download", get(files::download))
        .route("/account/webhooks/secret", get(webhook_secret::get))
        .route("/account/webhooks/secret/rotate", post(webhook_secret::rotate))
        .route("/webhooks/default/secret", get(webhook_secret::get))
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
