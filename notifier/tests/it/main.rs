//! The notifier's integration tests: real NATS and MongoDB, receivers on loopback. Status
//! events are published directly, as a runner would.
//!
//! Its modules:
//! - [`delivery`]: retries, durability across a killed notifier, filters and throttling.
//! - [`fixture`]: a test's private database and NATS prefix, an account with a signing secret, and helpers to
//!   publish status events.
//! - [`held`]: a held message.
//! - [`isolation`]: one receiver cannot hold up another.
//! - [`notices`]: budget notices' claims.
//! - [`recording`]: attempt records.
//! - [`signatures`]: signatures: checked by an independent verifier, and only the new secret's once a
//!   rotation's window has closed.

mod delivery;
mod fixture;
mod held;
mod isolation;
mod notices;
mod recording;
mod signatures;
