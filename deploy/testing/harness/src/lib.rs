//! `harness`: what the bench (`deploy/testing/bench`) and the fault-injection suite (`deploy/testing/faults`)
//! both stand on, so neither reaches into the other.
//!
//! - [`setup`]: a scenario's own database and NATS prefix on the servers named by
//!   `MONGODB_URI` / `NATS_URL`, and the settings to start services with;
//! - [`servers`]: nats-server (one node or a three-node cluster) and the MongoDB stand-in as
//!   processes a run owns, so it can kill and restart them;
//! - [`processes`]: the service binaries as processes, their CPU, memory and context switches
//!   from `/proc`, and a graceful stop;
//! - [`cluster`]: the whole system (api, notifier, runners) as processes on a scenario's setup;
//! - [`cog_server`]: a Cog model server from a fixture directory;
//! - [`receiver`]: a webhook receiver on loopback that verifies signatures and records arrivals;
//! - [`load_client`]: the load tool's lean HTTP/1.1 client and its closed loop;
//! - [`otlp_sink`]: an OTLP/HTTP endpoint that counts (and can keep) exported spans;
//! - [`stats`]: percentiles of measured durations.
#![forbid(unsafe_code)]

pub mod cluster;
pub mod cog_server;
pub mod load_client;
pub mod otlp_sink;
pub mod processes;
pub mod receiver;
pub mod servers;
pub mod setup;
pub mod stats;

/// The runtime of a load tool (the bench, the fault suite): `BENCH_LOAD_TOOL_THREADS` tokio
/// worker threads, by default 1. On two cores shared with the system under test, a second
/// worker mostly adds cross-thread wake-ups: the api's creates cost the tool 34 µs of CPU each
/// with one worker and 43–46 µs with two.
pub fn load_tool_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let threads = std::env::var("BENCH_LOAD_TOOL_THREADS").ok().and_then(|n| n.parse().ok()).filter(|n| *n > 0);
    tokio::runtime::Builder::new_multi_thread().worker_threads(threads.unwrap_or(1)).enable_all().build()
}
