//! [`ConsoleAction`]: the extractor of every console POST. It proves three things before a
//! handler runs, so no action can forget them: a live session ([`Signed`]), an `Origin` (or,
//! without one, a `Referer`) that is this service's own `PUBLIC_BASE_URL`, and a form field
//! `csrf` equal to the session's token (compared in constant time). Otherwise: 403, nothing
//! done.
//!
//! A form with files (the run form of a model with file inputs) is `multipart/form-data`: its
//! `csrf` field must come before any file (the page puts it first), and a file is stored only
//! once the token is proven and the key holds `write`; the field then carries the new file's
//! URL, as if the person had pasted it (see [`crate::ops::uploads`]).

use std::collections::HashMap;

use axum::{
    Form,
    extract::{FromRequest, FromRequestParts, Multipart, Request},
    http::{HeaderMap, StatusCode, header},
};
use common::domain::{ApiSurface, Scope};
use subtle::ConstantTimeEq;

use super::{error::ConsoleError, session::Signed};
use crate::{ops::uploads, state::AppState};

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
        let multipart = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.to_ascii_lowercase().starts_with("multipart/form-data"));
        let request = Request::from_parts(parts, body);
        if multipart {
            let fields = multipart_fields(request, state, &signed).await?;
            return Ok(Self { signed, fields });
        }
        // The run and train routes take any size of body (their files stream to the store): a
        // form without files is held to the API's own limit here.
        let (parts, body) = request.into_parts();
        let bytes = axum::body::to_bytes(body, crate::http::MAX_BODY_BYTES).await.map_err(|_| {
            let most = crate::http::MAX_BODY_BYTES;
            ConsoleError::Problem(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("A form without files may be at most {most} bytes; this one is larger (or was cut off)."),
            )
        })?;
        let request = Request::from_parts(parts, axum::body::Body::from(bytes));
        let Form(fields) = Form::<HashMap<String, String>>::from_request(request, state)
            .await
            .map_err(|_| ConsoleError::Forbidden("The form could not be read.".into()))?;
        check_token(&signed, fields.get("csrf").map_or("", String::as_str))?;
        Ok(Self { signed, fields })
    }
}

/// The most fields a console form may have (a run form has one per model input).
const MAX_FIELDS: usize = 256;

fn check_token(signed: &Signed, token: &str) -> Result<(), ConsoleError> {
    if bool::from(token.as_bytes().ct_eq(signed.csrf().as_bytes())) {
        return Ok(());
    }
    Err(ConsoleError::Forbidden(
        "This form's security token is missing or out of date. Reload the page and try again.".into(),
    ))
}

/// The fields of a multipart form, its files stored as uploads of the signed-in account (each
/// field then holds its file's URL); the token is checked before any file is stored.
async fn multipart_fields(
    request: Request,
    state: &AppState,
    signed: &Signed,
) -> Result<HashMap<String, String>, ConsoleError> {
    let unreadable = || ConsoleError::Forbidden("The form could not be read.".into());
    // Its files take as long as their bytes do, within the uploads' own limit.
    common::deadline::clear();
    let mut form = Multipart::from_request(request, state).await.map_err(|_| unreadable())?;
    let mut fields = HashMap::new();
    let mut proven = false;
    while let Some(field) = form.next_field().await.map_err(|_| unreadable())? {
        if fields.len() >= MAX_FIELDS {
            return Err(unreadable());
        }
        let name = field.name().unwrap_or_default().to_owned();
        if field.file_name().is_none() {
            let text = uploads::small_text(field, &name).await?;
            if name == "csrf" {
                check_token(signed, &text)?;
                proven = true;
            }
            fields.insert(name, text);
            continue;
        }
        if !proven {
            return Err(ConsoleError::Forbidden("A file came before this form's security token.".into()));
        }
        if field.file_name() == Some("") {
            continue; // a file input left empty
        }
        signed.require(Scope::Write)?;
        let file = uploads::store_part(state, &signed.key.account_id, field).await?;
        fields.insert(name, state.links.file(&file.id, ApiSurface::Canonical));
    }
    if !proven {
        check_token(signed, "")?;
    }
    Ok(fields)
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
