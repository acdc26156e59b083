//! The public HTTP API (axum), in layers:
//!
//! - [`http`]: the plumbing every route shares. A request flows: request id and tracing
//!   ([`app`]) → shedding past the in-flight bound ([`http::shed`]) → authentication, scope and
//!   rate limit ([`http::auth`], [`state::ratelimit`]) → typed input ([`http::extract`], running
//!   the [`validate`] parsers) → the handler; every error answers problem+json
//!   ([`error`], [`problem`]), every list a [`http::page::Page`].
//! - [`routes`]: one file per resource; each handler declares its route, answers and errors
//!   once, and the router and the OpenAPI document come from those declarations.
//! - [`console`]: the web console's pages, on the same operations as the routes.
//! - [`ops`]: the operations routes and console share (submit, cancel, trainings, waits,
//!   idempotency, deliveries, usage …), which write MongoDB and publish to JetStream through
//!   [`common`].
//! - [`state`]: [`state::AppState`] and the parts it owns (key and model caches, queue places,
//!   the job outbox, the caps), each behind a type with private fields.
//! - [`store`]: the collections only the api uses (API keys, idempotency keys, console
//!   sessions, collections of models); the shared ones are [`common::store`]'s.
//!
//! [`admin`] holds the operator commands (`api admin …`), and [`kubernetes`] the renderer of
//! the models' Kubernetes kit they print.
//!
//! Two API surfaces share the handlers: the canonical `/v1` and the Replicate-compatible
//! `/replicate/v1` ([`replicate`]); each handler renders for the request's
//! [`http::surface::Surface`].
//!
//! The api writes `starting` predictions and never runs a model; runners do that.
#![forbid(unsafe_code)]

pub mod admin;
pub mod app;
pub mod config;
pub mod console;
pub mod error;
pub mod http;
pub mod kubernetes;
pub mod ops;
pub mod problem;
pub mod replicate;
pub mod routes;
pub mod state;
pub mod store;
pub mod validate;

pub use app::{run, serve, serve_split};
