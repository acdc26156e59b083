//! [`ConsoleAction`]: the extractor of every console POST. It proves three things before a
//! handler runs, so no action can forget them: a live session ([`Signed`]), an `Origin` (or,
//! without one, a `Referer`) that is this service's own `PUBLIC_BASE_URL`, and a form field
//! `csrf` equal to the session's token (compared in constant time). Otherwise: 403, nothing
//! done.

use std::collections::HashMap;

use axum::{
    Form,
    extract::{FromRequest, FromRequestParts, Request},
    http::HeaderMap,
};
use subtle::ConstantTimeEq;

use super::{error::ConsoleError, session::Signed};
use crate::state::AppState;

/// A console form post that passed the session, origin and token checks.
pub struct ConsoleAction {
    /// Who posted it.
    pub signed: Signed,
    /// The form's fields (the token among them).
    pub fields: HashMap<String, String>,
}

impl ConsoleAction {
    /// The value of field `name`, empty when absent.
    pub fn field(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", String::as_str)
    }
}

/// The origin (`scheme://host[:port]`) of a URL.
fn origin_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host_len = rest.find('/').unwrap_or(rest.len());
    &url[..url.len() - rest.len() + host_len]
}

/// Whether the request says it comes from a page of `base` (this service).
pub fn same_origin(headers: &HeaderMap, base: &str) -> bool {
    let ours = origin_of(base);
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    match (header("origin"), header("referer")) {
        (Some(origin), _) => origin == ours,
        (None, Some(referer)) => origin_of(referer) == ours,
        (None, None) => false,
    }
}

impl FromRequest<AppState> for ConsoleAction {
    type Rejection = ConsoleError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ConsoleError> {
        let (mut parts, body) = request.into_parts();
        let signed = Signed::from_request_parts(&mut parts, state).await?;
        if !same_origin(&parts.headers, state.base_url()) {
            return Err(ConsoleError::Forbidden("This form was not sent from this console's own pages.".into()));
        }
        let Form(fields) = Form::<HashMap<String, String>>::from_request(Request::from_parts(parts, body), state)
            .await
            .map_err(|_| ConsoleError::Forbidden("The form could not be read.".into()))?;
        let token = fields.get("csrf").map_or("", String::as_str);
        if !bool::from(token.as_bytes().ct_eq(signed.csrf().as_bytes())) {
            return Err(ConsoleError::Forbidden(
                "This form's security token is missing or out of date. Reload the page and try again.".into(),
            ));
        }
        Ok(Self { signed, fields })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn origins_are_scheme_host_and_port() {
        assert_eq!(origin_of("http://127.0.0.1:8080/keys?x=1"), "http://127.0.0.1:8080");
        assert_eq!(origin_of("https://example.com"), "https://example.com");
    }

    #[test]
    fn only_this_services_own_pages_may_post() {
        let base = "http://127.0.0.1:8080";
        assert!(same_origin(&headers(&[("origin", "http://127.0.0.1:8080")]), base));
        assert!(!same_origin(&headers(&[("origin", "http://evil.example")]), base));
        assert!(!same_origin(&headers(&[("origin", "null")]), base));
        assert!(same_origin(&headers(&[("referer", "http://127.0.0.1:8080/keys")]), base));
        assert!(!same_origin(&headers(&[("referer", "http://127.0.0.1:8081/keys")]), base));
        assert!(!same_origin(&headers(&[]), base), "neither header: refused");
    }
}
