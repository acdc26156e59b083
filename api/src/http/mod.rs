//! HTTP plumbing: how a request comes in and how its answer goes out, for every route and the
//! console alike. Nothing here knows a resource; the handlers in [`crate::routes`] and
//! [`crate::console`] are built on it.
//!
//! - In: [`request_id`], [`shed`] (the in-flight bound), [`auth`] (keys, scopes and the rate
//!   limit, as extractors), [`surface`] (which API surface), [`extract`] (typed input),
//!   [`run_to_completion`] (a handler outlives its client).
//! - Out: [`page`] (every list's envelope), [`file_response`] (a file's bytes, ranges,
//!   redirects) and [`reference`](mod@reference) (`/docs`). Errors answer problem+json through
//!   [`crate::error`].

/// The largest request body accepted (a file upload's parts stream past it, each within the
/// uploads' own limit).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

pub mod auth;
pub mod extract;
pub mod file_response;
pub mod page;
pub mod reference;
pub mod request_id;
pub mod run_to_completion;
pub mod shed;
pub mod surface;
