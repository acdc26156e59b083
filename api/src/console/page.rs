//! Rendering pages, and the headers every console answer carries.
//!
//! Templates are askama's (checked at compile time, HTML-escaped by default) under
//! `src/console/templates/`. The Content-Security-Policy allows scripts, styles, images and
//! media from this origin only and forbids inline script; the one script is
//! `/static/console.js`. Images and media are also allowed from the object store's origin when
//! downloads redirect there (`FILES_S3_REDIRECT`): an output image's link answers 307 to its
//! presigned URL ([`policy_with`]).

use crate::validate::paging::Paging;

use askama::Template;
use axum::{
    extract::Request,
    http::{HeaderValue, header},
    middleware::Next,
    response::{Html, IntoResponse, Response},
};

/// The console's Content-Security-Policy, with no file store origin.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
img-src 'self'; media-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The console's Content-Security-Policy when downloads redirect to `files_origin` (the object
/// store's `scheme://host[:port]`): images and media may come from there too.
pub fn policy_with(files_origin: Option<&str>) -> String {
    match files_origin {
        Some(origin) => CONTENT_SECURITY_POLICY
            .replace("img-src 'self';", &format!("img-src 'self' {origin};"))
            .replace("media-src 'self';", &format!("media-src 'self' {origin};")),
        None => CONTENT_SECURITY_POLICY.to_owned(),
    }
}

/// A rendered template (an opaque 500 if it cannot render, which a checked template does not).
pub fn html<T: Template>(page: &T) -> Response {
    match page.render() {
        Ok(body) => Html(body).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "a console template did not render");
            (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "The page could not be rendered.").into_response()
        }
    }
}

/// Middleware: the security headers of every console answer (`policy` its
/// Content-Security-Policy); pages are never cached.
pub async fn security_headers(policy: HeaderValue, request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, policy);
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// What every signed-in page shows around its content: the navigation and the sign-out form.
pub struct Chrome {
    /// The form token of the session.
    pub csrf: String,
    /// The navigation entry to highlight.
    pub section: &'static str,
    /// The name of the key signed in with.
    pub key_name: String,
}

/// How many items a page of a console list shows (the predictions', trainings', deployments',
/// keys' and files' lists), as a page of the API's lists does by default.
pub use crate::ops::jobs::CONSOLE_PAGE;

/// The page of a console list a request asks for: `?page=N`, from 0 (anything else is the
/// first page).
#[derive(Debug, Clone, Copy, Default)]
pub struct PageNumber(u64);

impl PageNumber {
    /// The page `query` asks for.
    pub fn of(query: &std::collections::HashMap<String, String>) -> Self {
        Self(query.get("page").and_then(|p| p.parse().ok()).unwrap_or(0).min(1_000_000))
    }

    /// How many items come before the page.
    pub fn offset(self) -> u64 {
        self.0 * u64::from(CONSOLE_PAGE)
    }

    /// The pager of this page of the list at `path` (which may carry a query of its own, as
    /// `/?status=failed`), which holds `total` items, `shown` of them on this page: its
    /// neighbours are the API's ([`Paging::neighbours`]).
    pub fn pager(self, path: &str, shown: usize, total: u64) -> Pager {
        let join = if path.contains('?') { '&' } else { '?' };
        let link = |offset: u64| format!("{path}{join}page={}", offset / u64::from(CONSOLE_PAGE));
        let (next, previous) = Paging { limit: CONSOLE_PAGE, offset: self.offset() }.neighbours(total);
        Pager { previous: previous.map(link), next: next.map(link), shown, total }
    }
}

/// The links under a list (`pager.html`): to the newer and the older page, where there is one.
pub struct Pager {
    /// The newer page.
    pub previous: Option<String>,
    /// The older page.
    pub next: Option<String>,
    /// How many items this page shows.
    pub shown: usize,
    /// How many the list holds.
    pub total: u64,
}

/// A 303 to `location` (a path of this site): where every action and sign-in sends the browser.
pub fn see_other(location: &str) -> Response {
    let location = HeaderValue::from_str(location).unwrap_or(HeaderValue::from_static("/"));
    (axum::http::StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response()
}

/// A relative time for people: "12 s ago", "3 min ago", "5 h ago", "2 d ago".
pub fn ago(seconds: i64) -> String {
    match seconds.max(0) {
        s if s < 60 => format!("{s} s ago"),
        s if s < 3600 => format!("{} min ago", s / 60),
        s if s < 86_400 => format!("{} h ago", s / 3600),
        s => format!("{} d ago", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_in_the_largest_whole_unit() {
        assert_eq!(ago(5), "5 s ago");
        assert_eq!(ago(125), "2 min ago");
        assert_eq!(ago(7300), "2 h ago");
        assert_eq!(ago(200_000), "2 d ago");
        assert_eq!(ago(-3), "0 s ago", "clock skew never shows the future");
    }

    #[test]
    fn the_policy_forbids_inline_script() {
        assert!(CONTENT_SECURITY_POLICY.contains("script-src 'self';"));
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe-inline"));
    }

    #[test]
    fn images_and_media_may_come_from_the_store_downloads_redirect_to_and_nothing_else_does() {
        let policy = policy_with(Some("https://bucket.s3.example.com"));
        assert!(policy.contains("img-src 'self' https://bucket.s3.example.com;"), "{policy}");
        assert!(policy.contains("media-src 'self' https://bucket.s3.example.com;"), "{policy}");
        assert!(policy.contains("script-src 'self';") && policy.contains("connect-src 'self';"), "{policy}");
        assert_eq!(policy_with(None), CONTENT_SECURITY_POLICY);
    }
}
