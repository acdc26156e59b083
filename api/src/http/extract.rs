//! Typed input at the door: extractors that run the [`crate::validate`] parsers, so a handler
//! receives what it asked for, already checked, and never parses `Bytes`, a `HeaderMap` or a raw
//! query itself.
//!
//! - [`Query<T>`]: the query string, parsed by `T`'s [`FromQuery`]; a bad one is 400 naming
//!   each field.
//! - [`Body<T>`] and [`OptionalBody<T>`]: a JSON object body (see [`body::json_object`]) read
//!   into `T`'s [`FromBody::Sent`] and checked; [`Sent<B>`]: such a body read into `B` alone,
//!   for a handler that checks it once it knows more (a create checks its fields after the
//!   model it names is found, so an unknown model is 404 whatever the body).
//! - [`AcceptsCsv`]: whether `Accept` asks for CSV.
//! - [`PreferWait`] and [`JobOptions`]: the headers of a create (`Prefer: wait`;
//!   `Idempotency-Key` and `Cancel-After`).
//!
//! A body past the route's limit is refused by axum's `Bytes` before any parser runs, as it was
//! when handlers took `Bytes`: [`crate::error`] renders that rejection as problem+json.

use std::time::Duration;

use axum::{
    extract::{FromRequest, FromRequestParts, Request},
    http::request::Parts,
    response::{IntoResponse, Response},
};
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::{
    error::ApiError,
    validate::{FromBody, FromQuery, body, create_headers, field},
};

/// A query string parsed by `T`.
#[derive(Debug)]
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: FromQuery> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        T::from_query(parts.uri.query()).map(Query).map_err(ApiError::invalid_query)
    }
}

/// A JSON object body read into `B`, its fields not yet checked.
#[derive(Debug)]
pub struct Sent<B>(pub B);

/// A JSON object body parsed by `T`.
#[derive(Debug)]
pub struct Body<T>(pub T);

/// A body whose fields are all optional (none, or JSON `null`, is `{}`), parsed by `T`.
#[derive(Debug)]
pub struct OptionalBody<T>(pub T);

/// Reads a JSON object from a body and its headers ([`body::json_object`] or
/// [`body::optional_json_object`]).
type ObjectReader = fn(&axum::http::HeaderMap, &Bytes) -> Result<Map<String, Value>, ApiError>;

/// The body read by `object`, or the response that refuses it.
async fn read<S: Send + Sync>(
    request: Request,
    state: &S,
    object: ObjectReader,
) -> Result<Map<String, Value>, Response> {
    let headers = request.headers().clone();
    let bytes = Bytes::from_request(request, state).await.map_err(IntoResponse::into_response)?;
    object(&headers, &bytes).map_err(IntoResponse::into_response)
}

impl<S: Send + Sync, B: DeserializeOwned> FromRequest<S> for Sent<B> {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Response> {
        let object = read(request, state, body::json_object).await?;
        field::from_object(object).map(Sent).map_err(|e| ApiError::invalid_fields(e).into_response())
    }
}

impl<S: Send + Sync, T: FromBody> FromRequest<S> for Body<T> {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Response> {
        let object = read(request, state, body::json_object).await?;
        parsed(object).map(Body).map_err(IntoResponse::into_response)
    }
}

impl<S: Send + Sync, T: FromBody> FromRequest<S> for OptionalBody<T> {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Response> {
        let object = read(request, state, body::optional_json_object).await?;
        parsed(object).map(OptionalBody).map_err(IntoResponse::into_response)
    }
}

/// `object` as `T`, or the 400 that names every bad field.
fn parsed<T: FromBody>(object: Map<String, Value>) -> Result<T, ApiError> {
    T::from_object(object).map_err(ApiError::invalid_fields)
}

/// Whether the request's `Accept` asks for CSV (`text/csv`).
#[derive(Debug, Clone, Copy)]
pub struct AcceptsCsv(pub bool);

impl<S: Send + Sync> FromRequestParts<S> for AcceptsCsv {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let accept = parts.headers.get(axum::http::header::ACCEPT).and_then(|v| v.to_str().ok());
        Ok(Self(accept.is_some_and(|a| a.contains("text/csv"))))
    }
}

/// What the headers of a create ask for: `Idempotency-Key` and `Cancel-After`. (A create
/// from the console asks for neither: [`JobOptions::default`].)
#[derive(Debug, Clone, Default)]
pub struct JobOptions {
    /// `Idempotency-Key`: the first job of the key is the answer to every repeat.
    pub idempotency_key: Option<String>,
    /// `Cancel-After`: a deadline sooner than the configured one of the job's kind.
    pub cancel_after: Option<Duration>,
}

impl<S: Send + Sync> FromRequestParts<S> for JobOptions {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        Ok(Self {
            idempotency_key: create_headers::idempotency_key(&parts.headers)?,
            cancel_after: create_headers::cancel_after(&parts.headers)?,
        })
    }
}

/// `Prefer: wait[=n]`: how long a create holds its answer for the prediction to end, if at all.
#[derive(Debug, Clone, Copy)]
pub struct PreferWait(pub Option<Duration>);

impl<S: Send + Sync> FromRequestParts<S> for PreferWait {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        create_headers::prefer_wait(&parts.headers).map(Self)
    }
}
