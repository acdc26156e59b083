//! The api's integration tests: the real api, runner and notifier (in-process) against real
//! NATS JetStream and MongoDB (see `common::testkit` for where the servers come from).

mod api_keys;
mod bad_input;
mod builtin_models;
mod cancel;
mod cog_file_inputs;
mod console;
mod deployments;
mod disconnects;
mod end_to_end;
mod file_store_faults;
mod files;
mod fuzz;
mod harness;
mod indexes;
mod keys_lifecycle;
mod large_predictions;
mod list;
mod nats_outage;
mod new_predictions;
mod object_store;
mod openapi;
mod owned_models;
mod priority;
mod queue_places;
mod rate_limit;
mod readiness;
mod replicate_parity;
mod replicate_surface;
mod shedding;
mod signing_secret;
mod streaming;
mod tracing;
mod trainings;
mod usage;
mod webhook_deliveries;
