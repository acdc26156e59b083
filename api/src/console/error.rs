//! What a console request answers when it cannot do what was asked: a page for people, never
//! JSON. A request without a session is sent to the sign-in page (303) with its path as
//! `next`; every other error renders `error.html` with its status.

use crate::problem::ProblemKind;
use askama::Template;
use axum::{
    http::StatusCode,
    response::{IntoResponse, Response},
};

use super::page::{html, see_other};
use crate::error::ApiError;

/// A console failure.
#[derive(Debug)]
pub enum ConsoleError {
    /// No live session: sign in first, then come back to `next`.
    SignIn {
        /// The path (and query) that was asked for.
        next: String,
    },
    /// Nothing of this account by that name (another account's alike).
    NotFound(String),
    /// The key lacks a scope, or a form lacked its token or came from another origin.
    Forbidden(String),
    /// Anything else the API would answer with a problem: its status and detail.
    Problem(StatusCode, String),
    /// A failure inside the service (logged; answered opaquely).
    Internal(anyhow::Error),
}

impl From<ApiError> for ConsoleError {
    fn from(e: ApiError) -> Self {
        match e {
            ApiError::Problem(p) if p.kind == ProblemKind::NotFound => Self::NotFound(p.detail),
            ApiError::Problem(p) => {
                Self::Problem(StatusCode::from_u16(p.kind.status()).unwrap_or(StatusCode::BAD_REQUEST), p.detail)
            }
            ApiError::Busy { detail, .. } => Self::Problem(StatusCode::SERVICE_UNAVAILABLE, detail),
            ApiError::Internal(e) => Self::Internal(e),
        }
    }
}

/// Any other failure (a store's, the file store's, ...) is one inside the service: `?` on it is
/// the console's one conversion.
impl<E: Into<anyhow::Error>> From<E> for ConsoleError {
    fn from(e: E) -> Self {
        Self::Internal(e.into())
    }
}

/// The error page.
#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    title: &'a str,
    detail: &'a str,
    status: u16,
}

/// `/login?next=<path>`, with the path percent-encoded.
pub fn sign_in_location(next: &str) -> String {
    let encoded: String = next
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    format!("/login?next={encoded}")
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let (status, title, detail) = match &self {
            Self::SignIn { next } => return see_other(&sign_in_location(next)),
            Self::NotFound(detail) => (StatusCode::NOT_FOUND, "Not found", detail.clone()),
            Self::Forbidden(detail) => (StatusCode::FORBIDDEN, "Not allowed", detail.clone()),
            Self::Problem(status, detail) => (*status, "That did not work", detail.clone()),
            Self::Internal(e) => {
                tracing::error!(error = format!("{e:#}"), "console request failed");
                let detail = "Something went wrong on our side. Try again in a moment.".to_owned();
                (StatusCode::INTERNAL_SERVER_ERROR, "Something went wrong", detail)
            }
        };
        let page = ErrorPage { title, detail: &detail, status: status.as_u16() };
        (status, html(&page)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_path_is_percent_encoded() {
        assert_eq!(sign_in_location("/predictions/p_1"), "/login?next=/predictions/p_1");
        assert_eq!(sign_in_location("/?status=failed&page=2"), "/login?next=/%3Fstatus%3Dfailed%26page%3D2");
    }
}
