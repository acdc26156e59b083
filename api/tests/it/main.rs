//! The api's integration tests: the real api, runner and notifier (in-process) against real
//! NATS JetStream and MongoDB (see `common::testkit` for where the servers come from).

mod bad_input;
mod end_to_end;
mod harness;
mod readiness;
mod receiver;
