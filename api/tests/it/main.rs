//! The api's integration tests: the real api, runner and notifier (in-process) against real
//! NATS JetStream and MongoDB (see `testkit` for where the servers come from).
//!
//! Its modules:
//! - [`api_keys`]: `POST /v1/account/api-keys`, `GET /v1/account/api-keys/{id}` and scope enforcement.
//! - [`backup`]: a backup taken under load, restored into a new system.
//! - [`bad_input`]: bad input: every error is problem+json with the documented type, title, status and code.
//! - [`builtin_models`]: the built-in models end to end through the api, their files, and retention.
//! - [`cancel`]: `POST /v1/predictions/{id}/cancel` while starting, while processing, and when terminal.
//! - [`cog_file_inputs`]: a file input reaching a real Cog model server.
//! - [`cog_outputs`]: real models' outputs in Replicate's shapes.
//! - [`collections`]: collections: written by the operator.
//! - [`console`]: the web console over HTTP.
//! - [`database_clock`]: the database's clock.
//! - [`deployments`]: versions, deployments, hardware pools and the account.
//! - [`disconnects`]: clients that go away mid-request.
//! - [`end_to_end`]: a prediction's whole path.
//! - [`file_store_faults`]: files' bytes in GridFS as real MongoDB treats them.
//! - [`files`]: the Files API through the api.
//! - [`fuzz`]: random JSON bodies never produce a server error, and a refused request writes nothing.
//! - [`harness`]: the system under test.
//! - [`indexes`]: every query the services make has an index to use.
//! - [`jetstream_at_start`]: a start waits for JetStream to take its streams.
//! - [`keys_lifecycle`]: keys that stop working.
//! - [`kubernetes`]: the models' Kubernetes kit.
//! - [`large_predictions`]: predictions larger than a NATS message, or with a value kept in the file store.
//! - [`list`]: `GET /v1/predictions`.
//! - [`master_key`]: rotating the master key.
//! - [`model_metrics`]: the numbers a Cog model records of its run.
//! - [`nats_outage`]: jobs accepted while NATS is away start within seconds of its return.
//! - [`new_predictions`]: new predictions are stored by group commit.
//! - [`object_store`]: files in an S3-compatible store.
//! - [`openapi`]: `/openapi.json` describes every endpoint, and real responses carry exactly the documented
//!   fields.
//! - [`owned_models`]: an account's own models.
//! - [`payloads`]: values too large for a prediction's document.
//! - [`priority`]: `priority` on a create.
//! - [`queue_places`]: the queue a waiting prediction sees.
//! - [`rate_limit`]: the per-key rate limit, shared by api replicas.
//! - [`readiness`]: `/ready` and `/health`.
//! - [`replicate_parity`]: the request conventions of docs/api.md on the api.
//! - [`replicate_surface`]: the Replicate-compatible surface.
//! - [`search`]: finding models by text.
//! - [`secret_inputs`]: a `cog.Secret` input.
//! - [`shedding`]: past `API_MAX_IN_FLIGHT` requests at once the api answers at once, 503 problem+json with
//!   `Retry-After`, and.
//! - [`signing_secret`]: rotating the webhook signing secret, and deliveries signed with both secrets
//!   meanwhile.
//! - [`spend`]: spend per account.
//! - [`stalled_database`]: every request is answered within its deadline.
//! - [`streaming`]: the SSE stream.
//! - [`sweeps`]: retention's sweeps isolate failures.
//! - [`tracing`]: one trace per prediction.
//! - [`trainings`]: trainings through the api, a runner and real Cog servers.
//! - [`uncertain_writes`]: writes whose outcome is unknown are settled by reading, not guessing.
//! - [`usage`]: `GET /v1/usage`.
//! - [`webhook_deliveries`]: a prediction's webhook deliveries.

mod api_keys;
mod backup;
mod bad_input;
mod builtin_models;
mod cancel;
mod cog_file_inputs;
mod cog_outputs;
mod collections;
mod console;
mod database_clock;
mod deployments;
mod disconnects;
mod end_to_end;
mod file_store_faults;
mod files;
mod fuzz;
mod harness;
mod indexes;
mod jetstream_at_start;
mod keys_lifecycle;
mod kubernetes;
mod large_predictions;
mod list;
mod master_key;
mod model_metrics;
mod nats_outage;
mod new_predictions;
mod object_store;
mod openapi;
mod owned_models;
mod payloads;
mod priority;
mod queue_places;
mod rate_limit;
mod readiness;
mod replicate_parity;
mod replicate_surface;
mod search;
mod secret_inputs;
mod shedding;
mod signing_secret;
mod spend;
mod stalled_database;
mod streaming;
mod sweeps;
mod tracing;
mod trainings;
mod uncertain_writes;
mod usage;
mod webhook_deliveries;
