//! Contracts shared by the three services: the api, the runner and the notifier.
//!
//! The services never call each other. They meet only through what this crate defines:
//!
//! - [`domain`]: the parsed domain types (ids, statuses, models, keys, secrets, predictions).
//! - [`views`]: what clients see of them (a prediction, a file), which status events carry.
//! - [`messages`]: the versioned wire messages on NATS, and [`subjects`]: where they travel.
//! - [`files`]: uploaded files and file outputs: their records, and their bytes behind the
//!   [`files::FileStore`] interface (GridFS or an S3-compatible store).
//! - [`usage`]: usage per account, each ended prediction counted once in running totals.
//! - [`store`]: the MongoDB collections, one module per collection, each written by the service
//!   its module doc names.
//! - [`bus`]: the JetStream streams and the publishing side of the messages.
//! - [`signing`] (Standard Webhooks) and [`crypto`] (secrets sealed at rest).
//! - [`links`]: every URL handed out (both API surfaces, files, stream capability tokens).
//! - [`metrics`]: the OpenMetrics page every service serves.
//! - [`deadline`]: a request's deadline, which the calls it makes respect.
//! - [`config`], [`connect`], [`telemetry`], [`readiness`], [`shutdown`], [`runtime`]: what every service
//!   needs at start and while it runs.
//! - `samples` (feature `samples`): sample predictions for tests and the load tool, and
//!   `Links::for_tests`. The integration-test harness is a crate of its own, `testkit`
//!   (deploy/testing/testkit), a dev-dependency only.
//!
//! Also here:
//! - [`cache`]: a small map whose entries expire after a fixed time, for look-ups that may be a little stale.
//! - [`lane`]: a queue lane.
//! - [`trace_context`]: W3C trace context across the services.
#![forbid(unsafe_code)]

pub mod budget;
pub mod bus;
pub mod cache;
pub mod config;
pub mod connect;
pub mod crypto;
pub mod deadline;
pub mod domain;
pub mod files;
pub mod lane;
pub mod links;
pub mod messages;
pub mod metrics;
pub mod readiness;
pub mod runtime;
#[cfg(feature = "samples")]
pub mod samples;
pub mod shutdown;
pub mod signing;
pub mod store;
pub mod subjects;
pub mod telemetry;
pub mod trace_context;
pub mod usage;
pub mod views;

/// The release version every service reports (`/ready`, logs).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
