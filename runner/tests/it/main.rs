//! The runner's integration tests, against real NATS JetStream and MongoDB. Predictions are
//! stored and their jobs published directly, as the api would.

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
