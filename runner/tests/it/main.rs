//! The runner's integration tests, against real NATS JetStream and MongoDB. Predictions are
//! stored and their jobs published directly, as the api would.
//!
//! Its modules:
//! - [`account_caps`]: concurrency caps per account.
//! - [`cancel`]: a prediction canceled through the api while a runner holds it.
//! - [`cog`]: models served by real Cog servers.
//! - [`cog_uploads`]: output files a real Cog server uploads to the runner, streamed into the file store.
//! - [`crash`]: a runner killed with SIGKILL mid-job.
//! - [`deadlines`]: deadlines: a prediction running past its time limit fails with `PREDICTION_TIMEOUT`.
//! - [`depth`]: the queue's depth per model, waiting and running counted apart.
//! - [`fixture`]: a test's private database and NATS prefix, with helpers to create predictions and start
//!   runners.
//! - [`lane_marks`]: queue lanes' start marks.
//! - [`levels`]: priority levels in the runner's pick.
//! - [`limits`]: what a prediction keeps of a model that says too much.
//! - [`reconcile`]: the reconciler.
//! - [`results`]: the runner's last state change.
//! - [`scheduling`]: scheduling: a runner serving any number of models starts a waiting job as soon as it has
//!   a free slot, and.
//! - [`selection`]: runners serve only the models they are given.
//! - [`unanswered_fetch`]: a fetch nobody answers.
//! - [`uncertain_writes`]: writes whose wait for the majority timed out.

mod account_caps;
mod cancel;
mod cog;
mod cog_uploads;
mod crash;
mod deadlines;
mod depth;
mod fixture;
mod instances;
mod lane_marks;
mod levels;
mod limits;
mod reconcile;
mod results;
mod scheduling;
mod selection;
mod unanswered_fetch;
mod uncertain_writes;
