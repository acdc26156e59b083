//! Which API surface a request came through, as an extractor: the routes mounted under
//! `/replicate/v1` (see [`crate::replicate`]) carry [`ApiSurface::Replicate`] as a request
//! extension, everything else is canonical. Handlers render what they return for it.

use std::convert::Infallible;

use axum::{extract::FromRequestParts, http::request::Parts};
use common::domain::ApiSurface;

/// The surface of the request (canonical unless its route was mounted for another).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Surface(pub ApiSurface);

impl<S: Send + Sync> FromRequestParts<S> for Surface {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Infallible> {
        Ok(parts.extensions.get::<Surface>().copied().unwrap_or(Surface(ApiSurface::Canonical)))
    }
}
