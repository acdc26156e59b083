//! The web console: pages for people, served by the api beside the API, on the same listener.
//!
//! - [`login`]: sign in with an API key, sign out; [`session`]: the cookie and the signed-in
//!   person every page proves it is ([`session::Signed`]); [`csrf`]: the checks of every form
//!   post ([`csrf::ConsoleAction`]).
//! - Pages, one file each: [`predictions`] (the list at `/`, a prediction at its `urls.web`,
//!   Cancel, Resend), [`models`] (list, run form, versions), [`trainings`] (list, a training
//!   at its `urls.web`, Cancel, the Train form of a version with a trainer), [`deployments`] (list, create, a
//!   new release, delete), [`keys`], [`secret`], [`account`] (its
//!   concurrency cap), [`usage`] (a chart by day and model, and the CSV); [`files`] serves
//!   file outputs to the pages.
//! - [`page`]: rendering (askama templates in `templates/`, escaped by default) and the
//!   security headers (a Content-Security-Policy without inline script); [`assets`]: the one
//!   stylesheet and the one script; [`error`]: every failure as a page, never JSON.
//!
//! Pages call the same domain functions as the JSON routes (`submit`, `cancel`,
//! `deliveries`, `accounts`, `signing_secret`), never a route handler. The cookie is read here only:
//! the `/v1` and `/replicate/v1` APIs authenticate with bearer keys alone.
//!
//! Also here:
//! - [`output`]: a prediction's output as its console page shows it, from the stored value.

mod account;
mod assets;
mod csrf;
mod deployments;
mod error;
mod files;
mod keys;
mod login;
mod models;
mod output;
mod page;
mod predictions;
mod secret;
mod session;
mod trainings;
mod usage;

use axum::{
    Router,
    extract::DefaultBodyLimit,
    middleware,
    routing::{get, post},
};

pub use error::ConsoleError;
pub use page::CONTENT_SECURITY_POLICY;

use crate::state::AppState;

/// The console's routes, each answered with the console's security headers (its policy
/// allowing the object store's origin for images when `state`'s downloads redirect there).
pub fn router(state: &AppState) -> Router<AppState> {
    let origin = state.files.redirect_origin();
    let policy = axum::http::HeaderValue::from_str(&page::policy_with(origin.as_deref()))
        .unwrap_or_else(|_| axum::http::HeaderValue::from_static(page::CONTENT_SECURITY_POLICY));
    Router::new()
        .route("/", get(predictions::list))
        .route("/login", get(login::form).post(login::submit))
        .route("/logout", post(login::logout))
        .route("/predictions/{id}", get(predictions::page))
        .route("/predictions/{id}/cancel", post(predictions::cancel))
        .route("/predictions/{id}/deliveries/{webhook_id}/resend", post(predictions::resend))
        .route("/files", get(files::list))
        .route("/files/{id}", get(files::get))
        .route("/files/{id}/delete", post(files::delete))
        .route("/models", get(models::list))
        // A run form with files streams them to the file store under API_MAX_FILE_BYTES each.
        .route("/models/{owner}/{name}", get(models::form).post(models::run).layer(DefaultBodyLimit::disable()))
        .route("/models/{owner}/{name}/train", post(trainings::train).layer(DefaultBodyLimit::disable()))
        .route("/trainings", get(trainings::list))
        .route("/trainings/{id}", get(trainings::page))
        .route("/trainings/{id}/cancel", post(trainings::cancel))
        .route("/keys", get(keys::list).post(keys::create))
        .route("/keys/{id}/deactivate", post(keys::deactivate))
        .route("/secret", get(secret::show))
        .route("/account", get(account::show))
        .route("/usage", get(usage::show))
        .route("/usage.csv", get(usage::csv))
        .route("/deployments", get(deployments::list).post(deployments::create))
        .route("/deployments/{name}/release", post(deployments::release))
        .route("/deployments/{name}/delete", post(deployments::delete))
        .route("/secret/reveal", post(secret::reveal))
        .route("/secret/rotate", post(secret::rotate))
        .route("/static/console.css", get(assets::css))
        .route("/static/console.js", get(assets::js))
        .layer(middleware::from_fn(move |request, next| page::security_headers(policy.clone(), request, next)))
}

/// The page for a path nothing serves, for browsers (API clients get problem+json).
pub fn not_found() -> ConsoleError {
    ConsoleError::NotFound("There is no page at this address.".into())
}
