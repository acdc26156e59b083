//! The notifier's integration tests: real NATS and MongoDB, receivers on loopback. Status
//! events are published directly, as a runner would.

mod delivery;
mod fixture;
mod held;
mod isolation;
mod notices;
mod recording;
mod signatures;
