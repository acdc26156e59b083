//! The standard set's report: the CPU floor the targets are held against, the tables (JSON
//! and Markdown, each figure beside its baseline or target), the change from the committed
//! run (the regression gate) and the SVG charts.
//!
//! Also here:
//! - [`cpu_floor`]: the floor under the CPU targets.

pub mod charts;
pub mod cpu_floor;
pub mod gate;
pub mod tables;
