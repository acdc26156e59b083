//! The index set as a step of its own (`api admin migrate`), run once per release, rather than
//! by every replica of every service at every start.
//!
//! A new index on a large collection takes minutes to build, and a replica that built it at
//! start would not serve meanwhile; a drop made by the first new replica of a rollout takes an
//! index from the old replicas still using it. So the set of [`super::indexes`] (and the
//! [`super::retired_indexes`] it replaces) has a number, [`INDEX_SET`], recorded in the
//! `migrations` collection by [`Store::migrate`]. A service at start ([`Store::indexes_at_start`]):
//!
//! | recorded | what it does |
//! |---|---|
//! | nothing (a new database) | migrates: builds the set and records it |
//! | this release's set | nothing |
//! | an older release's set | serves, and warns that `api admin migrate` has not run |
//! | a newer release's set | serves (a release one apart keeps the indexes it uses) |
//!
//! [`INDEX_SET`] goes up by one with every change of the set; a unit test pins the set's
//! digest beside it, so a change cannot forget it.

use bson::doc;
use sha2::Digest;

use super::{Store, StoreError};

/// The number of this release's index set.
pub const INDEX_SET: i64 = 2;

/// The collection the migration record lives in, and its document.
const COLLECTION: &str = "migrations";
const RECORD: &str = "indexes";

/// A digest of the index set: its indexes (keys and options) and the retired ones.
pub fn index_set_digest() -> String {
    let described = format!("{:?}|{:?}", super::indexes(), super::retired_indexes());
    sha2::Sha256::digest(described.as_bytes()).iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Where a database's indexes stand against this release's set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// No set recorded.
    Unrecorded,
    /// This release's set.
    Current,
    /// An older release's: `api admin migrate` has not run for this one.
    Behind(i64),
    /// A newer release's.
    Ahead(i64),
}

impl Store {
    /// The index set recorded in the database, against this release's.
    pub async fn index_standing(&self) -> Result<Standing, StoreError> {
        let record = self.db.collection::<bson::Document>(COLLECTION).find_one(doc! { "_id": RECORD }).await?;
        Ok(match record.and_then(|r| r.get_i64("set").ok()) {
            None => Standing::Unrecorded,
            Some(set) if set == INDEX_SET => Standing::Current,
            Some(set) if set < INDEX_SET => Standing::Behind(set),
            Some(set) => Standing::Ahead(set),
        })
    }

    /// `api admin migrate`: builds every index of this release's set, drops the ones it
    /// retires, and records the set. Idempotent.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        self.ensure_indexes().await?;
        let record = doc! { "set": INDEX_SET, "digest": index_set_digest(), "migrated_at": bson::DateTime::now() };
        self.db
            .collection::<bson::Document>(COLLECTION)
            .update_one(doc! { "_id": RECORD }, doc! { "$set": record })
            .upsert(true)
            .await?;
        tracing::info!(set = INDEX_SET, "indexes migrated");
        Ok(())
    }

    /// What a service does with the indexes at start (see the module's table).
    pub async fn indexes_at_start(&self) -> Result<Standing, StoreError> {
        let standing = self.index_standing().await?;
        match standing {
            Standing::Unrecorded => {
                tracing::info!("no index set recorded (a new database): migrating");
                self.migrate().await?;
            }
            Standing::Current => {}
            Standing::Behind(set) => tracing::warn!(
                recorded = set,
                ours = INDEX_SET,
                "the database's indexes are an older release's; serving, but run `api admin migrate` for this release"
            ),
            Standing::Ahead(set) => {
                tracing::info!(
                    recorded = set,
                    ours = INDEX_SET,
                    "the database's indexes are a newer release's; serving"
                )
            }
        }
        Ok(standing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_set_has_its_number_and_a_change_of_the_set_a_new_one() {
        // Changed the indexes? Add one to INDEX_SET and pin the new digest here. (A new MongoDB
        // driver may print the set otherwise: then only the digest changes.)
        assert_eq!((INDEX_SET, index_set_digest().as_str()), (2, "aa8eab9f3bbf530f"));
    }
}
