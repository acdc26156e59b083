//! Signing in and out.
//!
//! `GET /login` shows a form with one field, `api_key`. `POST /login` checks the key as the API
//! does (active, unexpired), starts a session ([`super::session`]) and sends the browser to
//! `next`, which must be a path on this site (`/…`, never `//…` or a URL: no open redirect).
//! The form must come from this site's own page (its `Origin`), so no other site can sign a
//! visitor in with a key of its choosing. Failed sign-ins count per client address on the
//! rate-limit counters every api replica shares, against `DEFAULT_RATE_LIMIT_RPM` a minute.
//! `POST /logout` (with the session's form token) ends the session.

use std::{
    collections::HashMap,
    net::{IpAddr, Ipv4Addr, SocketAddr},
};

use askama::Template;
use axum::{
    Form,
    extract::{ConnectInfo, FromRequestParts, Query, State},
    http::{HeaderMap, StatusCode, header, request::Parts},
    response::{IntoResponse, Response},
};
use bson::DateTime;
use common::domain::ApiKeyValue;

use super::{
    csrf::ConsoleAction,
    error::ConsoleError,
    page::{html, see_other},
    session::{self, SessionToken},
};
use crate::state::AppState;

/// The most failed sign-ins a client address may make in any minute before it is refused
/// (429); `DEFAULT_RATE_LIMIT_RPM` when that is lower.
const FAILED_SIGN_INS_PER_MINUTE: u32 = 600;

/// The sign-in page.
#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage<'a> {
    next: &'a str,
    error: Option<&'a str>,
}

/// `next` if it is a path on this site, else `/`.
pub fn local_path(next: Option<&str>) -> &str {
    match next {
        Some(p) if p.starts_with('/') && !p.starts_with("//") && !p.contains('\\') && !p.contains("://") => p,
        _ => "/",
    }
}

/// `GET /login`
pub async fn form(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ConsoleError> {
    let next = local_path(query.get("next").map(String::as_str));
    if session::signed_in(&state, &headers).await?.is_some() {
        return Ok(see_other(next));
    }
    Ok(html(&LoginPage { next, error: None }))
}

/// The address a request came from (the peer of its connection; unspecified where the server
/// was not started with connection info, as in some tests).
pub struct ClientAddress(IpAddr);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddress {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(a)| a.ip());
        Ok(Self(peer.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))))
    }
}

/// The counter of failed sign-ins from `client`: one subject token.
fn failures_counter(client: &IpAddr) -> String {
    let ip: String = client.to_string().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    format!("login_{ip}")
}

/// `POST /login`
pub async fn submit(
    State(state): State<AppState>,
    ClientAddress(client): ClientAddress,
    headers: HeaderMap,
    Form(fields): Form<HashMap<String, String>>,
) -> Result<Response, ConsoleError> {
    if !super::csrf::same_origin(&headers, state.base_url()) {
        return Err(ConsoleError::Forbidden("This form was not sent from this console's own pages.".into()));
    }
    let next = local_path(fields.get("next").map(String::as_str));
    let presented = fields.get("api_key").map(|k| k.trim()).and_then(ApiKeyValue::parse);
    let key = match presented {
        Some(value) => state.keys.lookup(&value).await?.filter(|k| k.is_usable_at(DateTime::now())),
        None => None,
    };
    let Some(key) = key else {
        let sign_in_limit = state.config.default_rate_limit_rpm.min(FAILED_SIGN_INS_PER_MINUTE);
        let decision = state.rate_limiter.check_counter(&failures_counter(&client), sign_in_limit).await;
        if !decision.allowed {
            let page =
                LoginPage { next, error: Some("Too many failed sign-ins from here. Wait a minute and try again.") };
            return Ok((StatusCode::TOO_MANY_REQUESTS, [(header::RETRY_AFTER, "60")], html(&page)).into_response());
        }
        tracing::info!(%client, "console sign-in refused");
        let page = LoginPage { next, error: Some("That key is not valid: it is unknown, deactivated or expired.") };
        return Ok((StatusCode::UNAUTHORIZED, html(&page)).into_response());
    };
    let token: SessionToken = session::start(&state, &key).await?;
    let mut response = see_other(next);
    response.headers_mut().insert(header::SET_COOKIE, session::set_cookie(&state, Some(&token)));
    Ok(response)
}

/// `POST /logout`
pub async fn logout(State(state): State<AppState>, action: ConsoleAction) -> Result<Response, ConsoleError> {
    crate::ops::sessions::end(&state, &action.signed.session.token_hash).await?;
    let mut response = see_other("/login");
    response.headers_mut().insert(header::SET_COOKIE, session::set_cookie(&state, None));
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_only_accepts_a_path_on_this_site() {
        assert_eq!(local_path(Some("/predictions/p_1?x=1")), "/predictions/p_1?x=1");
        for outside in ["//evil.example/x", "https://evil.example", "/\\evil.example", "evil", "/a://b"] {
            assert_eq!(local_path(Some(outside)), "/", "{outside}");
        }
        assert_eq!(local_path(None), "/");
    }

    #[test]
    fn failures_are_counted_per_client_address_in_one_token() {
        assert_eq!(failures_counter(&"127.0.0.1".parse().expect("addr")), "login_127_0_0_1");
        assert_eq!(failures_counter(&"::1".parse().expect("addr")), "login___1");
    }
}
