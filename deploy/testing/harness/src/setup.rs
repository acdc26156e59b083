//! What every scenario starts from: its own database and NATS prefix on the servers named by
//! `MONGODB_URI` / `NATS_URL`, a store, a bus, and the settings to start services with.

use std::collections::HashMap;

use common::{
    bus::Bus,
    config::{CommonConfig, Env},
    crypto::MasterKey,
    store::{Store, commands::Monitoring},
};

/// A scenario's environment.
pub struct Setup {
    /// The settings services of this run read.
    pub vars: HashMap<String, String>,
    /// Its database.
    pub store: Store,
    /// Its NATS prefix.
    pub bus: Bus,
    /// The shared settings.
    pub common: CommonConfig,
}

impl Setup {
    /// A fresh database and prefix, with `extra` settings.
    pub async fn new(extra: &[(&str, &str)]) -> anyhow::Result<Self> {
        // Unique across processes and across setups begun within the same millisecond (the
        // fault suite starts two rows at once).
        static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let made = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let millis = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis();
        let unique = format!("{millis:x}{:x}{made}", std::process::id());
        let mut vars: HashMap<String, String> = std::env::vars().collect();
        vars.insert("MONGODB_DATABASE".into(), format!("bench_{unique}"));
        vars.insert("NATS_PREFIX".into(), format!("bench{unique}"));
        vars.insert("MASTER_KEY".into(), MasterKey::generate_base64());
        vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let common = CommonConfig::from_env(&Env::from_fn(|k| vars.get(k).cloned()))?;
        let store = Store::connect(&common.mongodb_uri, &common.mongodb_database, "bench", Monitoring::Off).await?;
        store.ensure_indexes().await?;
        let bus = Bus::connect(&common.nats_url, common.subjects.clone(), "bench")
            .await?
            .with_stream_replicas(common.nats_stream_replicas)
            .with_max_consumers(common.nats_max_consumers);
        bus.ensure_streams().await?;
        Ok(Self { vars, store, bus, common })
    }

    /// Drops this run's database and streams (best effort), so the servers carry no data of
    /// an earlier step into the next: the MongoDB stand-in keeps every database in its Java
    /// heap, and a fuller heap costs the whole machine more CPU (the services' too).
    pub async fn forget(&self) {
        if let Err(e) = self.store.database().drop().await {
            eprintln!("bench database {} not dropped: {e}", self.common.mongodb_database);
        }
        let subjects = self.bus.subjects();
        for stream in [subjects.jobs_stream(), subjects.events_stream(), subjects.rate_limit_stream()] {
            if let Err(e) = self.bus.jetstream().delete_stream(&stream).await {
                eprintln!("bench stream {stream} not deleted: {e}");
            }
        }
    }

    /// The settings as a configuration source.
    pub fn env(&self) -> Env<'_> {
        Env::from_fn(|k| self.vars.get(k).cloned())
    }
}
