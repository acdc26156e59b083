//! Rendering pages, and the headers every console answer carries.
//!
//! Templates are askama's (checked at compile time, HTML-escaped by default) under
//! `src/console/templates/`. The Content-Security-Policy allows scripts, styles, images and
//! media from this origin only and forbids inline script; the one script is
//! `/static/console.js`.

use askama::Template;
use axum::{
    extract::Request,
    http::{HeaderValue, header},
    middleware::Next,
    response::{Html, IntoResponse, Response},
};

/// The console's Content-Security-Policy.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
img-src 'self'; media-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

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

/// Middleware: the security headers of every console answer; pages are never cached.
pub async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
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
}
