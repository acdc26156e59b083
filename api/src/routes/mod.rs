//! The routes, one file per resource. Every handler states the scope it needs in its
//! signature (see [`crate::auth`]).
//!
//! | route | handler | scope |
//! |---|---|---|
//! | `POST /v1/account/api-keys` | [`api_keys::create`] | admin |
//! | `GET /v1/account/api-keys/{id}` | [`api_keys::get`] | admin |
//! | `POST /v1/models/{owner}/{model}/predictions` | [`predictions::create`] | write |
//! | `GET /v1/predictions` | [`predictions::list`] | read |
//! | `GET /v1/predictions/{id}` | [`predictions::get`] | read |
//! | `POST /v1/predictions/{id}/cancel` | [`predictions::cancel`] | write |
//! | `GET /v1/predictions/{id}/stream` | [`stream::stream`] | read |
//! | `GET /v1/files/{id}` | [`files::get`] | read |
//! | `GET /predictions/{id}` (HTML) | [`web::get`] | read |
//! | `GET /v1/account/webhooks/secret` (alias `GET /v1/webhooks/default/secret`) | [`webhook_secret::get`] | admin |
//! | `POST /v1/account/webhooks/secret/rotate` | [`webhook_secret::rotate`] | admin |
//! | `GET /ready`, `GET /health` | [`health`] | none |
//! | `GET /openapi.json` | [`crate::openapi::serve`] | none |

pub mod api_keys;
pub mod files;
pub mod health;
pub mod predictions;
pub mod stream;
pub mod web;
pub mod webhook_secret;

use axum::{
    Router,
    routing::{get, post},
};

use crate::{error::ApiError, state::AppState};

/// Every route, with unknown paths answered 404 problem+json.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/account/api-keys", post(api_keys::create))
        .route("/v1/account/api-keys/{id}", get(api_keys::get))
        .route("/v1/models/{owner}/{model}/predictions", post(predictions::create))
        .route("/v1/predictions", get(predictions::list))
        .route("/v1/predictions/{id}", get(predictions::get))
        .route("/v1/predictions/{id}/cancel", post(predictions::cancel))
        .route("/v1/predictions/{id}/stream", get(stream::stream))
        .route("/v1/files/{id}", get(files::get))
        .route("/predictions/{id}", get(web::get))
        .route("/v1/account/webhooks/secret", get(webhook_secret::get))
        .route("/v1/account/webhooks/secret/rotate", post(webhook_secret::rotate))
        .route("/v1/webhooks/default/secret", get(webhook_secret::get))
        .route("/ready", get(health::ready))
        .route("/health", get(health::health))
        .route("/openapi.json", get(crate::openapi::serve))
        .fallback(unknown_route)
        .with_state(state)
}

async fn unknown_route() -> ApiError {
    ApiError::not_found("No such route.")
}
