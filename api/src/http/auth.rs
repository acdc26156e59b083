//! Authentication and scopes, as extractors: a handler that takes [`Authorized<Write>`] cannot
//! run without a valid key holding `write`, so no route can forget the check.
//!
//! Keys are looked up by the SHA-256 of the presented value through
//! [`crate::state::keys::KeyDirectory`] (cached briefly; a deactivation empties every replica's cache
//! at once). Expiry is checked on every request against the clock, so an expired key fails at
//! once. Missing, malformed, unknown, inactive and expired keys all get the same 401.

use std::marker::PhantomData;

use axum::{extract::FromRequestParts, http::request::Parts};
use bson::DateTime;
use common::domain::{ApiKeyValue, Scope};

use crate::store::ApiKeyRecord;
use crate::{error::ApiError, state::AppState, state::ratelimit::DecisionSlot};

/// The caller: a valid, active, unexpired key within its rate limit (see [`crate::state::ratelimit`]).
#[derive(Debug, Clone)]
pub struct Caller {
    /// The key that authenticated the request.
    pub key: ApiKeyRecord,
}

fn bearer_token(parts: &Parts) -> Option<&str> {
    let value = parts.headers.get(axum::http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let value = bearer_token(parts).and_then(ApiKeyValue::parse).ok_or_else(ApiError::unauthorized)?;
        let key = state
            .keys
            .lookup(&value)
            .await?
            .filter(|k| k.is_usable_at(DateTime::now()))
            .ok_or_else(ApiError::unauthorized)?;
        state.keys.note_use(&key);
        let decision = state.rate_limiter.check(&key).await;
        if let Some(slot) = parts.extensions.get::<DecisionSlot>() {
            slot.set(decision);
        }
        if !decision.allowed {
            return Err(ApiError::rate_limited());
        }
        Ok(Self { key })
    }
}

/// A scope a route requires, as a type.
pub trait RequiredScope: Send + Sync {
    /// The scope.
    const SCOPE: Scope;
}

/// Marker: the route needs `read`.
pub struct Read;
/// Marker: the route needs `write`.
pub struct Write;
/// Marker: the route needs `admin`.
pub struct Admin;

impl RequiredScope for Read {
    const SCOPE: Scope = Scope::Read;
}
impl RequiredScope for Write {
    const SCOPE: Scope = Scope::Write;
}
impl RequiredScope for Admin {
    const SCOPE: Scope = Scope::Admin;
}

/// A caller proven to hold scope `S`.
pub struct Authorized<S: RequiredScope> {
    /// The authenticated caller.
    pub caller: Caller,
    _scope: PhantomData<S>,
}

impl<S: RequiredScope> FromRequestParts<AppState> for Authorized<S> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = Caller::from_request_parts(parts, state).await?;
        if !caller.key.has_scope(S::SCOPE) {
            return Err(ApiError::forbidden(S::SCOPE));
        }
        Ok(Self { caller, _scope: PhantomData })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Request;

    fn parts(auth: Option<&str>) -> Parts {
        let mut req = Request::builder().uri("/");
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        req.body(()).expect("request").into_parts().0
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token(&parts(Some("Bearer abc"))), Some("abc"));
        assert_eq!(bearer_token(&parts(Some("bearer abc"))), Some("abc"));
    }

    #[test]
    fn other_schemes_and_missing_headers_give_no_token() {
        assert_eq!(bearer_token(&parts(Some("Basic abc"))), None);
        assert_eq!(bearer_token(&parts(Some("Bearer"))), None);
        assert_eq!(bearer_token(&parts(None)), None);
    }
}
