//! The `collections` collection: curated lists of models, as Replicate's collections are, one
//! document per collection (`_id` = its slug). They belong to the whole service: the operator
//! writes them (`api admin collection put|delete`); no account's key can change them.

use bson::{DateTime, doc};
use mongodb::{Collection, Database, options::ReplaceOptions};
use serde::{Deserialize, Serialize};

use common::domain::ModelRef;
use common::store::StoreError;

/// A collection of models.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCollection {
    /// Its address: `a-z`, `0-9` and `-`, 1 to 64 characters, starting with a letter or digit.
    #[serde(rename = "_id")]
    pub slug: String,
    /// Its name, for people.
    pub name: String,
    /// What it gathers.
    #[serde(default)]
    pub description: String,
    /// Its models, in the operator's order.
    #[serde(default)]
    pub models: Vec<ModelRef>,
    /// When the operator last wrote it.
    pub updated_at: DateTime,
}

/// Whether `slug` may name a collection.
pub fn is_valid_slug(slug: &str) -> bool {
    let mut chars = slug.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && slug.len() <= 64
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Typed access to `collections`.
#[derive(Clone, Debug)]
pub struct ModelCollections {
    coll: Collection<ModelCollection>,
}

impl ModelCollections {
    pub(super) fn new(db: &Database) -> Self {
        Self { coll: db.collection("collections") }
    }

    /// Writes `collection` whole (made, or replaced).
    pub async fn put(&self, collection: &ModelCollection) -> Result<(), StoreError> {
        let options = ReplaceOptions::builder().upsert(true).build();
        self.coll.replace_one(doc! { "_id": &collection.slug }, collection).with_options(options).await.map(|_| ())
    }

    /// The collection `slug`, if there is one.
    pub async fn get(&self, slug: &str) -> Result<Option<ModelCollection>, StoreError> {
        self.coll.find_one(doc! { "_id": slug }).max_time(common::store::read_limit()).await
    }

    /// One page of the collections by slug, and how many there are.
    pub async fn page(&self, offset: u64, limit: i64) -> Result<(Vec<ModelCollection>, u64), StoreError> {
        common::store::page(&self.coll, doc! {}, doc! { "_id": 1 }, offset, limit).await
    }

    /// Deletes the collection `slug`; whether there was one.
    pub async fn delete(&self, slug: &str) -> Result<bool, StoreError> {
        Ok(self.coll.delete_one(doc! { "_id": slug }).await?.deleted_count == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_lowercase_words_joined_by_hyphens() {
        for good in ["demo", "text-to-image", "a1"] {
            assert!(is_valid_slug(good), "{good}");
        }
        for bad in ["", "-demo", "Demo", "a b", "a_b", &"x".repeat(65)] {
            assert!(!is_valid_slug(bad), "{bad}");
        }
    }
}
