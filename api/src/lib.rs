//! The public HTTP API (axum).
//!
//! A request flows: request id ([`request_id`]) and tracing ([`app`]) → problem rendering ([`error`]) →
//! authentication, scope and rate limit ([`auth`], [`ratelimit`]) → the route's handler ([`routes`]), which parses the
//! body ([`validate`]), writes MongoDB and publishes to JetStream through [`common`].
//!
//! Two API surfaces share the handlers: the canonical `/v1` and the Replicate-compatible
//! `/replicate/v1` ([`replicate`]); each handler renders for the request's [`surface`].
//!
//! The api writes `starting` predictions and never runs a model; runners do that.
#![forbid(unsafe_code)]

pub mod accounts;
pub mod admin;
pub mod app;
pub mod auth;
pub mod config;
pub mod deadline;
pub mod error;
pub mod idempotency;
pub mod metrics;
pub mod models;
pub mod openapi;
pub mod ratelimit;
pub mod replicate;
pub mod request_id;
pub mod routes;
pub mod run_to_completion;
pub mod state;
pub mod surface;
pub mod validate;
pub mod versions;
pub mod wait;
pub mod wait_slots;

pub use app::{run, serve};
