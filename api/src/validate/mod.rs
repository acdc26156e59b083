//! Turning request bodies into typed requests, reporting every failing field at once.
//!
//! - [`body`]: the JSON body itself (content type, syntax, an object at the top).
//! - [`input`]: a prediction's `input` against the model's JSON Schema (the files of this
//!   service it names are checked by [`crate::ops::file_inputs`]).
//! - [`create_headers`]: `Prefer: wait`, `Idempotency-Key` and `Cancel-After`.
//! - [`create_prediction`]: the create-prediction request as a whole; [`create_training`]: a
//!   training's, its `destination` beside the same fields.
//! - [`paging`]: `limit` and `offset` of every list; [`list_predictions`] adds `status`;
//!   [`query`]: a query string read into the type that declares its parameters.
//!
//! A request read from a whole query or body implements [`FromQuery`] or [`FromBody`], and
//! [`crate::http::extract`] runs it at the door. A query or a body is declared once: the type
//! it is read into is its OpenAPI description, each field a [`field::Field`] that keeps what
//! was sent or why it failed, so a check names every failing field at once.
//!
//! Also here:
//! - [`account_changes`]: the body of `PATCH /v1/account`.
//! - [`create_api_key`]: the body of `POST /v1/account/api-keys`.
//! - [`create_model`]: the body of `POST /v1/models`.
//! - [`deployment`]: the bodies of `POST /v1/deployments` and `PATCH /v1/deployments/{owner}/{name}`.
//! - [`search_query`]: the query of `GET /v1/search`.
//! - [`usage_query`]: the query of `GET /v1/usage`.

pub mod account_changes;
pub mod body;
pub mod create_api_key;
pub mod create_headers;
pub mod create_model;
pub mod create_prediction;
pub mod create_training;
pub mod deployment;
pub mod field;
pub mod input;
pub mod list_predictions;
pub mod paging;
pub mod query;
pub mod search_query;
pub mod usage_query;

use crate::problem::FieldError;

/// A request checked from its query string: the parameters are read into
/// [`FromQuery::Sent`], the type that declares them (see [`query`]), then checked.
pub trait FromQuery: Sized {
    /// The parameters as sent.
    type Sent: query::QueryParams;
    /// The request the parameters ask for; on failure, every bad parameter.
    fn check(sent: Self::Sent) -> Result<Self, Vec<FieldError>>;

    /// Reads and checks a query string (`None` when there is none).
    fn from_query(query: Option<&str>) -> Result<Self, Vec<FieldError>> {
        <Self::Sent as query::QueryParams>::read(&query::object(query)).and_then(Self::check)
    }
}

/// A request checked from its JSON object body: the body is read into [`FromBody::Sent`],
/// the one type that declares it (its OpenAPI schema, every field read leniently: see
/// [`field`]), then checked.
pub trait FromBody: Sized {
    /// The body as sent.
    type Sent: serde::de::DeserializeOwned;
    /// The request the body asks for; on failure, every bad field.
    fn check(sent: Self::Sent) -> Result<Self, Vec<FieldError>>;

    /// Reads and checks a JSON object (a body, or the console's form made one).
    fn from_object(object: serde_json::Map<String, serde_json::Value>) -> Result<Self, Vec<FieldError>> {
        field::from_object(object).and_then(Self::check)
    }
}
