//! The upgrade row: every service starts from the previous release's build (the commit
//! `deploy/testing/faults/previous-release` names, built by `deploy/local/build-previous`),
//! whose `api admin bootstrap` makes the database; under load, this build's `api admin
//! migrate` runs, then every replica is upgraded in place, one at a time (the apis, the
//! runners, the notifiers), each stopped with SIGTERM and started again from this build, so
//! the two releases run side by side throughout, as docs/operations.md's Upgrading says they
//! may. Nothing may be lost, stuck or sent twice; every replica must end on this build, and
//! the database on this release's index set.

use std::path::PathBuf;

use anyhow::Context;
use common::store::migrations::Standing;
use serde_json::{Value, json};

use crate::topology::{Role, Topology};

/// The environment variable naming the directory of the previous release's `api`, `runner`
/// and `notifier` (`deploy/local/fault-tests` sets it).
pub const PREVIOUS_RELEASE: &str = "FAULTS_PREVIOUS_RELEASE";

/// The directory of the previous release's binaries.
pub fn previous_release() -> anyhow::Result<PathBuf> {
    let dir = std::env::var_os(PREVIOUS_RELEASE).map(PathBuf::from).with_context(|| {
        format!("{PREVIOUS_RELEASE} is not set: the upgrade row runs the previous release that deploy/local/fault-tests builds")
    })?;
    for role in [Role::Api, Role::Runner, Role::Notifier] {
        let binary = dir.join(role.binary());
        anyhow::ensure!(binary.exists(), "{} is missing", binary.display());
    }
    Ok(dir)
}

/// What the upgrade did.
#[derive(Debug, Clone)]
pub struct UpgradeTally {
    /// Replicas upgraded to this build.
    pub upgraded: usize,
    /// Replicas still on the previous release at the end.
    pub left_on_previous: usize,
    /// The database's index set after `api admin migrate`, against this release's.
    pub standing: String,
}

impl UpgradeTally {
    /// Why the row fails, if it does.
    pub fn failures(&self) -> Vec<String> {
        let mut why = Vec::new();
        if self.upgraded == 0 {
            why.push("no replica was upgraded".to_owned());
        }
        if self.left_on_previous > 0 {
            why.push(format!("{} replicas still run the previous release", self.left_on_previous));
        }
        if self.standing != format!("{:?}", Standing::Current) {
            why.push(format!("the index set is {} after the migration, not this release's", self.standing));
        }
        why
    }

    /// The tally as JSON.
    pub fn json(&self) -> Value {
        json!({"upgraded": self.upgraded, "left_on_previous": self.left_on_previous, "index_set": self.standing})
    }
}

/// Migrates the database with this build, then upgrades every replica in place, one at a time.
pub async fn roll(topology: &mut Topology) -> anyhow::Result<UpgradeTally> {
    let config = api::config::ApiConfig::from_env(&topology.setup.env())?;
    api::admin::migrate(&config).await.context("this build's api admin migrate")?;
    let mut upgraded = 0;
    for role in [Role::Api, Role::Runner, Role::Notifier] {
        for n in 0..topology.count(role) {
            topology.upgrade(role, n).await.with_context(|| format!("upgrading {} {n}", role.binary()))?;
            upgraded += 1;
            println!("  {} {n} upgraded", role.binary());
        }
    }
    let standing = format!("{:?}", topology.setup.store.index_standing().await?);
    Ok(UpgradeTally { upgraded, left_on_previous: topology.on_previous(), standing })
}
