//! The MongoDB stand-in's speed-ups (deploy/testing/mongo-standin/Speedups.java) change no
//! answer: on its H2 file (what `deploy/local/up` runs) it answers filters that no unique index
//! handles from in-memory summaries of its documents and equality indexes over them
//! (`Summaries`, `ValueIndex`), and on both backends a filter with an `_id` equality or `$in`
//! beside other fields from the `_id` index (`IdIndexed*`). These tests hold both to the
//! library's own answers (`MONGO_STANDIN_SPEEDUPS=off`, the memory backend scanning whole
//! documents): the same documents, in the same order,
//! for filters on small fields, on large ones (left out of the summaries), on both, through the
//! equality indexes or not, sorted or not, with skips and limits, after updates and removals,
//! and after a restart on the same file (summaries read anew).

use bson::{Bson, Document, doc};
use common::store::{Store, commands::Monitoring};
use testkit::MongoStandin;

/// A value past the summaries' size bound (512), so it is left out of them.
fn large(tag: &str) -> String {
    format!("{tag}:{}", "x".repeat(2_000))
}

/// 240 documents inserted in `_id` order (so both backends' natural orders agree): a status,
/// a time, a nested `usage`, a list, and a `payload` that is large for every third document.
fn documents() -> Vec<Document> {
    let start = bson::DateTime::from_millis(1_790_000_000_000);
    (0..240)
        .map(|i: i64| {
            let payload = if i % 3 == 0 {
                Bson::String(large(&format!("p{}", i % 2)))
            } else {
                Bson::String(format!("p{}", i % 2))
            };
            let status = ["starting", "processing", "succeeded", "canceled"][(i % 4) as usize];
            let at = bson::DateTime::from_millis(start.timestamp_millis() + (i * 7919) % 240 * 1000);
            let mut d = doc! {
                "_id": format!("d{i:04}"),
                "status": status,
                "at": at,
                "usage": { "pending": i % 5 == 0 },
                "tags": [format!("t{}", i % 3)],
                "payload": payload,
            };
            if i % 7 == 0 {
                d.insert("data_removed", false);
            }
            d
        })
        .collect()
}

/// The filters, sorts, skips and limits asked of both backends.
fn queries() -> Vec<(Document, Option<Document>, u64, i64)> {
    let mid = bson::DateTime::from_millis(1_790_000_000_000 + 120_000);
    vec![
        (doc! { "status": "starting" }, None, 0, 0),
        (doc! { "status": { "$in": ["starting", "processing"] }, "at": { "$lt": mid } }, None, 0, 100),
        (doc! { "status": "succeeded" }, Some(doc! { "at": 1, "_id": 1 }), 0, 10),
        (doc! { "status": "succeeded" }, Some(doc! { "at": -1, "_id": 1 }), 5, 10),
        (doc! { "usage.pending": true, "at": { "$lt": mid } }, Some(doc! { "at": 1, "_id": 1 }), 0, 100),
        (doc! { "data_removed": false }, None, 0, 0),
        (doc! { "data_removed": { "$exists": false }, "status": "canceled" }, None, 3, 5),
        (doc! { "tags": "t1", "status": { "$ne": "starting" } }, None, 0, 0),
        // Filters on the large field: matched on whole documents where it was left out.
        (doc! { "payload": large("p0") }, None, 0, 0),
        (doc! { "payload": "p1" }, None, 0, 0),
        (doc! { "payload": { "$regex": "^p1" }, "status": "processing" }, None, 0, 0),
        (doc! { "$or": [{ "status": "canceled" }, { "payload": large("p1") }] }, Some(doc! { "_id": -1 }), 0, 20),
        // Sorted on the large field: the sort is the library's own, on whole documents.
        (doc! { "status": { "$in": ["starting", "canceled"] } }, Some(doc! { "payload": 1, "_id": 1 }), 2, 7),
        (doc! { "$expr": { "$eq": ["$status", "starting"] } }, None, 0, 0),
        (doc! {}, Some(doc! { "$natural": -1 }), 0, 5),
        (doc! { "status": "processing" }, None, 0, 4),
        // Equalities the value indexes answer: on strings, booleans, `$eq`, `$in`, a dotted
        // path, a field holding lists (listed as "other"), a field some documents leave out of
        // their summaries, and an `$in` with a null, which the index leaves to the scan.
        (doc! { "status": { "$eq": "canceled" }, "at": { "$gte": mid } }, Some(doc! { "at": 1, "_id": 1 }), 0, 0),
        (doc! { "status": { "$in": ["canceled", "nothing"] } }, Some(doc! { "$natural": -1 }), 0, 6),
        (doc! { "usage.pending": true }, None, 0, 0),
        (doc! { "usage.pending": false, "status": "canceled" }, None, 0, 0),
        (doc! { "tags": "t2" }, None, 0, 0),
        (doc! { "payload": "p0", "status": { "$ne": "processing" } }, None, 0, 0),
        (doc! { "payload": large("p1") }, None, 0, 0),
        (doc! { "data_removed": false, "at": { "$lt": mid } }, Some(doc! { "at": 1, "_id": 1 }), 0, 3),
        (doc! { "status": { "$in": ["starting", null] } }, None, 0, 0),
        // An `_id` equality or `$in` beside other fields: found by the `_id` index, the rest
        // checked on the documents it finds.
        (doc! { "_id": "d0004", "status": "starting" }, None, 0, 0),
        (doc! { "_id": "d0004", "status": "processing" }, None, 0, 0),
        (
            doc! { "_id": { "$in": ["d0001", "d0002", "d0005", "d9999"] }, "status": { "$ne": "processing" } },
            None,
            0,
            0,
        ),
    ]
}

/// Every query's answer on `store`'s collection, each document as extended JSON.
async fn answers(store: &Store) -> Vec<Vec<String>> {
    let coll = store.database().collection::<Document>("scans");
    let mut all = Vec::new();
    for (filter, sort, skip, limit) in queries() {
        let mut find = coll.find(filter.clone()).skip(skip).limit(limit);
        if let Some(sort) = sort {
            find = find.sort(sort);
        }
        let mut cursor = find.await.unwrap_or_else(|e| panic!("find {filter}: {e}"));
        let mut found = Vec::new();
        while cursor.advance().await.expect("read the cursor") {
            found.push(cursor.deserialize_current().expect("a document").to_string());
        }
        let count = coll.count_documents(filter.clone()).await.expect("count");
        found.push(format!("count {count}"));
        all.push(found);
    }
    all
}

/// Updates and removals through filters no index handles, as the sweeps make them.
async fn change(store: &Store) {
    let coll = store.database().collection::<Document>("scans");
    let moved = coll
        .update_many(doc! { "status": "starting", "usage.pending": true }, doc! { "$set": { "status": "processing" } })
        .await
        .expect("update_many");
    assert!(moved.modified_count > 0, "the update changed something");
    // A large field made small, and a small one made large: the summaries follow.
    coll.update_many(doc! { "payload": large("p0"), "status": "succeeded" }, doc! { "$set": { "payload": "p0" } })
        .await
        .expect("update_many");
    coll.update_one(doc! { "_id": "d0001", "status": "processing" }, doc! { "$set": { "status": large("s") } })
        .await
        .expect("update_one");
    coll.delete_many(doc! { "status": "canceled", "at": { "$lt": bson::DateTime::from_millis(1_790_000_060_000) } })
        .await
        .expect("delete_many");
}

fn mongodb_index(keys: Document) -> mongodb::IndexModel {
    mongodb::IndexModel::builder().keys(keys).build()
}

async fn connect(uri: &str) -> Store {
    Store::connect(uri, "scans", "standin-scans", Monitoring::Off).await.expect("connect to the stand-in")
}

#[tokio::test]
async fn the_speed_ups_answer_as_the_library_does_before_and_after_changes_and_a_restart() {
    let dir = std::env::temp_dir().join(format!("ps-test-scans-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let file = dir.join("mongo.h2");
    let library = MongoStandin::start_with(None, &[("MONGO_STANDIN_SPEEDUPS", "off")]);
    // With the speed-ups whatever the test command's setting (it runs its servers without).
    let speedups = [("MONGO_STANDIN_SPEEDUPS", "on")];
    let memory = MongoStandin::start_with(None, &speedups);
    let h2 = MongoStandin::start_with(Some(&file), &speedups);
    let (expected_store, memory_store, h2_store) =
        (connect(&library.uri).await, connect(&memory.uri).await, connect(&h2.uri).await);
    for store in [&expected_store, &memory_store, &h2_store] {
        let coll = store.database().collection::<Document>("scans");
        // Secondary indexes, before and after the documents: the H2 stand-in answers equalities
        // on their first fields from its value indexes.
        for keys in [doc! { "status": 1, "at": 1 }, doc! { "usage.pending": 1, "at": 1 }, doc! { "tags": 1 }] {
            coll.create_index(mongodb_index(keys)).await.expect("create an index");
        }
        coll.insert_many(documents()).await.expect("insert");
        for keys in [doc! { "payload": 1 }, doc! { "data_removed": 1, "at": 1 }] {
            coll.create_index(mongodb_index(keys)).await.expect("create an index");
        }
    }

    let expected = answers(&expected_store).await;
    assert!(expected.iter().filter(|a| a.len() > 1).count() >= 14, "most queries find documents: {expected:?}");
    assert_eq!(answers(&memory_store).await, expected, "the memory stand-in answers as the library");
    assert_eq!(answers(&h2_store).await, expected, "the H2 stand-in answers as the library");

    for store in [&expected_store, &memory_store, &h2_store] {
        change(store).await;
    }
    let expected = answers(&expected_store).await;
    assert_eq!(answers(&memory_store).await, expected, "the memory stand-in, after updates and removals");
    assert_eq!(answers(&h2_store).await, expected, "the H2 stand-in, after updates and removals");

    drop(h2_store);
    drop(h2);
    let h2 = MongoStandin::start_with(Some(&file), &speedups);
    let h2_store = connect(&h2.uri).await;
    assert_eq!(answers(&h2_store).await, expected, "after a restart on the same file");
    drop(h2_store);
    drop(h2);
    let _ = std::fs::remove_dir_all(&dir);
}
