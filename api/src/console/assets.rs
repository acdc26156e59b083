//! The console's two static files, compiled into the binary: `console.css` and `console.js`
//! (the only script: it follows a running prediction's SSE stream; pages carry no inline
//! script, which the Content-Security-Policy forbids).

use axum::{http::header, response::IntoResponse};

/// `GET /static/console.css`
pub async fn css() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8"), (header::CACHE_CONTROL, "public, max-age=300")],
        include_str!("static/console.css"),
    )
}

/// `GET /static/console.js`
pub async fn js() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8"), (header::CACHE_CONTROL, "public, max-age=300")],
        include_str!("static/console.js"),
    )
}
