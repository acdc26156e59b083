//! What every service does first: connect to MongoDB (migrating its indexes only where none
//! were ever recorded: [`crate::store::migrations`]), connect to NATS and create the streams.
//! Both are idempotent, so every replica of every service may do it.

use crate::{
    bus::{Bus, BusError},
    config::CommonConfig,
    readiness::{Probe, Readiness},
    store::{Store, StoreError},
};

/// Why a service could not connect.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// MongoDB: a bad connection string, or the indexes could not be created.
    #[error("MongoDB: {0}")]
    Store(#[from] StoreError),
    /// NATS: unreachable, or the streams could not be created.
    #[error("NATS: {0}")]
    Bus(#[from] BusError),
}

/// MongoDB (indexes migrated if it has none recorded) and NATS (streams ensured), as `service`.
pub async fn connect(config: &CommonConfig, service: &str) -> Result<(Store, Bus), ConnectError> {
    let store =
        Store::connect(&config.mongodb_uri, &config.mongodb_database, service, config.command_monitoring).await?;
    // The indexes are a step of their own (`api admin migrate`); a new database is migrated
    // here, an older or newer release's is served as it is (store::migrations).
    store.indexes_at_start().await?;
    let bus = Bus::connect(&config.nats_url, config.subjects.clone(), service)
        .await?
        .with_stream_replicas(config.nats_stream_replicas)
        .with_max_consumers(config.nats_max_consumers);
    bus.ensure_streams_at_start().await?;
    Ok((store, bus))
}

/// The readiness of `service`, whose work uses `bus`: checked on a MongoDB client and a NATS
/// connection of its own, named `<service>-probe` (see [`crate::readiness`]).
pub async fn readiness(config: &CommonConfig, service: &str, bus: &Bus) -> Result<Readiness, ConnectError> {
    let name = format!("{service}-probe");
    let store = Store::connect_probe(&config.mongodb_uri, &config.mongodb_database, &name).await?;
    let probe = Probe { store, bus: bus.probe(&config.nats_url, &name).await? };
    Ok(Readiness::start(probe, bus.clone()).await)
}
