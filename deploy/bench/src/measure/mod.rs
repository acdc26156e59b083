//! Instruments: what the scenarios read besides latency (the load tool's own CPU per call,
//! closed loop and paced; how busy the machine's cores were and whose CPU it was; `perf`
//! recordings of the services).

pub mod machine_cpu;
pub mod paced;
pub mod profiler;
pub mod rate;
