//! Operations that the API's routes and the console share: each takes typed input and the
//! caller, reads and writes through [`common`], and returns domain values; the callers render
//! them (JSON, problem+json, or a page).
//!
//! - Predictions and trainings: [`submit`] (validate, store, publish), [`training`] and
//!   [`trained`] (a fine-tune and the versions it makes), [`versions`] (what `version` names),
//!   [`owned`] (the caller's own, and the models it may see), [`jobs`] (lists of them),
//!   [`file_inputs`] (the caller's files an input names),
//!   [`cancel`], [`idempotency`], [`wait`] (`Prefer: wait`).
//! - Accounts: [`accounts`] (keys), [`signing_secret`], [`deployment_changes`], [`usage`].
//! - Files and webhooks: [`uploads`], [`deliveries`] (resends).
//! - [`lists`]: the account's deployments, keys and files, a page at a time.

pub mod accounts;
pub mod cancel;
pub mod deliveries;
pub mod deployment_changes;
pub mod file_inputs;
pub mod idempotency;
pub mod jobs;
pub mod lists;
pub mod owned;
pub mod signing_secret;
pub mod submit;
pub mod trained;
pub mod training;
pub mod uploads;
pub mod usage;
pub mod versions;
pub mod wait;
