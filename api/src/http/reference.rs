//! The browsable API reference: `GET /docs` renders the api's own `/openapi.json` with Redoc.
//!
//! Redoc's standalone bundle (the `redoc` package 2.5.4 from npm, MIT) is vendored in
//! `api/vendor/redoc/` and compiled into the binary, so nothing is fetched from the internet
//! when a page opens; [`REDOC_SHA256`] pins its bytes (a unit test holds the file to it) and
//! `deploy/local/vendor-redoc` fetches it again, checking the registry's integrity hash.
//!
//! The page holds no script of its own: the bundle renders the `<redoc spec-url>` element it
//! finds when it loads. Its policy keeps the console's rule of no inline script
//! (`script-src 'self'`); it allows inline styles, which Redoc's styled components insert, and
//! a `blob:` worker, which its search index runs in. The one outside address the bundle names,
//! the Redocly logo of its side-menu footer, is refused by this policy (Redoc then hides it),
//! so opening the page sends nothing beyond this service.

use axum::{
    Router,
    http::{HeaderValue, header},
    middleware,
    response::{IntoResponse, Response},
    routing::get,
};

/// Redoc's standalone bundle, as vendored.
const REDOC_JS: &[u8] = include_bytes!("../../vendor/redoc/redoc.standalone.js");

/// The SHA-256 of [`REDOC_JS`] (hex): the bytes that were reviewed and pinned.
pub const REDOC_SHA256: &str = "dcaf76612bc4a3fbcc923a8966dee2f6146a5f32e5ce1b6f02dd60cbbf89500b";

/// The reference page's Content-Security-Policy.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; form-action 'none'; \
frame-ancestors 'none'; base-uri 'none'";

/// The page: the element Redoc renders into, then the bundle (which must come after it).
const PAGE: &str = r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>API reference · Prediction service</title>
</head>
<body>
<redoc spec-url="/openapi.json"></redoc>
<script src="/docs/redoc.standalone.js"></script>
</body>
</html>
"#;

/// `GET /docs` and its one script.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/docs", get(page))
        .route("/docs/redoc.standalone.js", get(redoc_js))
        .layer(middleware::map_response(security_headers))
}

/// `GET /docs`
async fn page() -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-cache")], PAGE).into_response()
}

/// `GET /docs/redoc.standalone.js`
async fn redoc_js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8"), (header::CACHE_CONTROL, "public, max-age=86400")],
        REDOC_JS,
    )
        .into_response()
}

/// The headers of both answers.
async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    response
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::*;

    #[test]
    fn the_vendored_bundle_is_the_pinned_one() {
        let digest = Sha256::digest(REDOC_JS);
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, REDOC_SHA256, "api/vendor/redoc/redoc.standalone.js changed: review it and pin its new hash");
    }

    #[test]
    fn the_page_has_no_inline_script_and_the_policy_forbids_it() {
        assert_eq!(PAGE.matches("<script").count(), 1);
        assert!(PAGE.contains(r#"<script src="/docs/redoc.standalone.js"></script>"#));
        assert!(PAGE.find("<redoc ") < PAGE.find("<script"), "the bundle renders the element it finds when it loads");
        assert!(CONTENT_SECURITY_POLICY.contains("script-src 'self';"));
        assert!(
            !CONTENT_SECURITY_POLICY.split(';').any(|d| d.trim().starts_with("script-src") && d.contains("unsafe"))
        );
    }
}
