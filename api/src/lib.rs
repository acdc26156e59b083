//! The public HTTP API (axum).
//!
//! A request flows: request id ([`request_id`]) and tracing ([`app`]) → problem rendering ([`error`], [`problem`]: the problem+json body every HTTP error uses) →
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
pub mod cancel;
pub mod config;
pub mod console;
pub mod deadline;
pub mod deliveries;
pub mod deployment_metrics;
pub mod deployments;
pub mod error;
pub mod file_response;
pub mod idempotency;
pub mod job_outbox;
pub mod keys;
pub mod metrics;
pub mod models;
pub mod openapi;
pub mod owned;
pub mod priority;
pub mod problem;
pub mod queue;
pub mod ratelimit;
pub mod reference;
pub mod replicate;
pub mod request_id;
pub mod routes;
pub mod run_to_completion;
pub mod shed;
pub mod signing_secret;
pub mod state;
pub mod submit;
pub mod surface;
pub mod trained;
pub mod training;
pub mod uploads;
pub mod usage;
pub mod validate;
pub mod versions;
pub mod wait;
pub mod wait_slots;

pub use app::{run, serve};
