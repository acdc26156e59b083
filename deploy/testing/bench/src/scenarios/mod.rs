//! The scenarios, one file each: what each starts, what load it puts on it, and what it reads
//! back. Each is a `bench` subcommand of its own and a step of the standard set
//! ([`crate::standard`]). [`on_fresh_system`] gives a scenario, or a step of the standard
//! set, a system of its own.
//!
//! Its modules:
//! - [`api_alone`]: `bench api`: the api alone.
//! - [`baselines`]: `bench baselines`.
//! - [`cog`]: `bench cog`: the latency the service adds to a Cog model, and how soon a streaming user sees a
//!   prediction move.
//! - [`cold_start`]: `bench coldstart`.
//! - [`cost`]: `bench cost`.
//! - [`create_vs_insert`]: the create-throughput target measured head to head.
//! - [`e2e`]: end to end through the three services as processes, under an open loop.
//! - [`files`]: `bench files`.
//! - [`outputs`]: `bench outputs`.
//! - [`overload`]: `bench overload`.
//! - [`priority`]: `bench priority`.
//! - [`queue`]: `bench queue`.
//! - [`scaling`]: scale-out, simulated on one machine.
//! - [`scheduling`]: scheduling: how long a prediction waits for a slot.
//! - [`soak`]: `bench soak`.
//! - [`trainings`]: `bench trainings`.

pub mod api_alone;
pub mod baselines;
pub mod cog;
pub mod cold_start;
pub mod cost;
pub mod create_vs_insert;
pub mod e2e;
pub mod files;
pub mod outputs;
pub mod overload;
pub mod priority;
pub mod queue;
pub mod scaling;
pub mod scheduling;
pub mod soak;
pub mod trainings;

use harness::cluster::Cluster;
use harness::receiver::Receiver;
use tokio_util::sync::CancellationToken;

/// Runs `measure` on a fresh system (api, notifier, one demo/echo runner and a webhook
/// receiver, with `extra` settings), checks that every webhook it received was signed right,
/// and stops it whatever the outcome.
pub async fn on_fresh_system<T>(
    extra: &[(&str, &str)],
    measure: impl AsyncFnOnce(&mut Cluster, &Receiver) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let mut cluster = Cluster::start(extra, true).await?;
    let stop = CancellationToken::new();
    let outcome = async {
        cluster.add_runners(1, &cost::ECHO_RUNNER).await?;
        let receiver = Receiver::start(cluster.secret.clone(), stop.clone()).await?;
        let measured = measure(&mut cluster, &receiver).await?;
        let bad = receiver.bad_signatures();
        anyhow::ensure!(bad == 0, "{bad} webhooks had bad signatures");
        Ok(measured)
    }
    .await;
    stop.cancel();
    cluster.stop().await?;
    outcome
}
