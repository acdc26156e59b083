//! The Replicate-compatible surface (docs/replicate.md): every `/v1` route, mounted again under
//! `/replicate/v1` with [`ApiSurface::Replicate`] on its requests. It is a translation, not a
//! copy: the same handlers, keys, scopes, rate limits and storage; the handlers render for the
//! request's [`Surface`], which changes only the shape:
//!
//! - `error` is the message string (or `null`) instead of `{code, message}`;
//! - every URL returned (`urls.*`, `next`, `previous`, file outputs, a model's `url`) points
//!   inside `/replicate/v1` (`urls.web` is `…/predictions/{id}/web`, a redirect to the page);
//! - a create whose `Prefer: wait` runs out answers `starting`, as Replicate does;
//! - webhooks of a prediction created here carry this shape (the prediction remembers its
//!   surface, see [`common::domain::Prediction::surface`]).
//!
//! Clients: `replicate.Client(base_url=f"{BASE}/replicate")` (Python) and
//! `new Replicate({baseUrl: `${BASE}/replicate/v1`})` (JavaScript).

use axum::{
    Extension, Router,
    extract::Path,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use common::domain::{ApiSurface, PredictionId};

use crate::{error::ApiError, http::surface::Surface, state::AppState};

/// The root of this surface.
pub const ROOT: &str = "/replicate/v1";

/// `api` (the `/v1` routes, relative to their root) mounted at [`ROOT`] for this surface,
/// with the redirect of `urls.web`.
pub fn mount(api: Router<AppState>) -> Router<AppState> {
    let api = api.route("/predictions/{id}/web", get(web_page));
    Router::new().nest(ROOT, api.layer(Extension(Surface(ApiSurface::Replicate))))
}

/// `GET /replicate/v1/predictions/{id}/web`: 303 to the prediction's page (which checks who
/// may see it), so that `urls.web` too stays inside this surface.
async fn web_page(Path(id): Path<String>) -> Result<Response, ApiError> {
    let id = PredictionId::parse(&id).map_err(|_| ApiError::not_found(format!("Prediction {id} not found.")))?;
    let location = HeaderValue::from_str(&format!("/predictions/{id}")).map_err(anyhow::Error::from)?;
    Ok((StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response())
}
