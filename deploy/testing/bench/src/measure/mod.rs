//! Instruments: what the scenarios read besides latency (the load tool's own CPU per call,
//! closed loop and paced; how busy the machine's cores were and whose CPU it was; `perf`
//! recordings of the services).
//!
//! Also here:
//! - [`machine_cpu`]: how busy the whole machine's CPUs were over a span of work, from `/proc/stat`.
//! - [`profiler`]: `perf record` attached to each service process for one measured stretch, so the cost bench
//!   can say where the.
//! - [`rate`]: operations per second of an operation run a fixed number at a time, closed loop, and the load
//!   tool's own CPU.

pub mod machine_cpu;
pub mod paced;
pub mod profiler;
pub mod rate;
