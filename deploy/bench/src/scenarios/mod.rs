//! The scenarios, one file each: what each starts, what load it puts on it, and what it reads
//! back. Each is a `bench` subcommand of its own and a step of the standard set
//! ([`crate::standard`]).

pub mod api_alone;
pub mod baselines;
pub mod cog;
pub mod cost;
pub mod create_vs_insert;
pub mod e2e;
pub mod files;
pub mod overload;
pub mod queue;
pub mod scaling;
pub mod scheduling;
