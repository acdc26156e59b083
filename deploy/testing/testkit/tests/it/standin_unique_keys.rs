//! The H2 stand-in orders its unique indexes' keys of strings itself (`KeyOrder` in
//! deploy/testing/mongo-standin/Speedups.java: H2's order, each key serialized once instead of at every
//! comparison). A file written in H2's own order (`MONGO_STANDIN_KEY_ORDER=h2`, as files written
//! before it were) must be found in by it, and a file it wrote must be found in by H2's order: a
//! different order would miss keys of the other's B-trees. These tests write under one order and
//! look every key up, and refuse duplicates, under the other.

use bson::{Bson, Document, doc};
use common::store::{Store, commands::Monitoring};
use testkit::MongoStandin;

/// Ids and unique values of every kind the order must agree on: prefixes of each other,
/// multi-byte and astral characters, a NUL, lengths across one byte of length prefix, and a
/// few keys that are not strings (left to H2 either way).
fn ids() -> Vec<Bson> {
    let mut ids: Vec<Bson> = (0..400)
        .map(|i| {
            let stem = ["p", "pre", "préd", "中文", "😀", "a\u{0}b", "Z"][i % 7];
            Bson::String(format!("{stem}{}{}", "x".repeat(i % 300), i))
        })
        .collect();
    ids.extend([Bson::Int32(7), Bson::Int64(1 << 40), Bson::ObjectId(bson::oid::ObjectId::new())]);
    ids
}

fn document(n: usize, id: &Bson) -> Document {
    doc! { "_id": id.clone(), "u": format!("unique-{}-{n}", "é".repeat(n % 5)), "n": n as i64 }
}

async fn connect(uri: &str) -> Store {
    Store::connect(uri, "keys", "standin-unique-keys", Monitoring::Off).await.expect("connect to the stand-in")
}

/// Writes the documents on a new `file` with the stand-in's `writer` order, then reads them
/// back with `reader`'s, after a restart.
async fn written_under_then_read_under(writer: &str, reader: &str) {
    let dir = std::env::temp_dir().join(format!("ps-test-keys-{writer}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let file = dir.join("mongo.h2");
    let ids = ids();
    {
        let standin = MongoStandin::start_with(
            Some(&file),
            &[("MONGO_STANDIN_KEY_ORDER", writer), ("MONGO_STANDIN_SPEEDUPS", "on")],
        );
        let coll = connect(&standin.uri).await.database().collection::<Document>("keys");
        let unique = mongodb::options::IndexOptions::builder().unique(true).build();
        coll.create_index(mongodb::IndexModel::builder().keys(doc! { "u": 1 }).options(unique).build())
            .await
            .expect("a unique index");
        for (n, id) in ids.iter().enumerate() {
            coll.insert_one(document(n, id)).await.expect("insert");
        }
    }
    let standin =
        MongoStandin::start_with(Some(&file), &[("MONGO_STANDIN_KEY_ORDER", reader), ("MONGO_STANDIN_SPEEDUPS", "on")]);
    let coll = connect(&standin.uri).await.database().collection::<Document>("keys");
    for (n, id) in ids.iter().enumerate() {
        let by_id = coll.find_one(doc! { "_id": id.clone() }).await.expect("find by _id");
        assert_eq!(by_id, Some(document(n, id)), "{writer} -> {reader}: _id {id}");
        let by_u = coll.find_one(doc! { "u": document(n, id).get_str("u").expect("u") }).await.expect("find by u");
        assert_eq!(by_u, Some(document(n, id)), "{writer} -> {reader}: u of {id}");
        let again = coll.insert_one(doc! { "_id": id.clone(), "u": format!("other-{n}") }).await;
        assert!(again.is_err(), "{writer} -> {reader}: a second _id {id} was accepted");
    }
    let taken = coll.insert_one(doc! { "_id": "new", "u": document(3, &ids[3]).get_str("u").expect("u") }).await;
    assert!(taken.is_err(), "{writer} -> {reader}: a taken unique value was accepted");
    // Removed and written again under the reader's order, then all found once more.
    coll.delete_many(doc! { "n": { "$lt": 100 } }).await.expect("delete");
    for (n, id) in ids.iter().enumerate().take(100) {
        coll.insert_one(document(n, id)).await.expect("insert again");
    }
    for (n, id) in ids.iter().enumerate() {
        let by_id = coll.find_one(doc! { "_id": id.clone() }).await.expect("find by _id");
        assert_eq!(by_id, Some(document(n, id)), "{writer} -> {reader}, rewritten: _id {id}");
    }
    drop(standin);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_file_written_in_h2s_own_key_order_is_found_in_by_the_stand_ins() {
    written_under_then_read_under("h2", "kept").await;
}

#[tokio::test]
async fn a_file_written_by_the_stand_ins_key_order_is_found_in_by_h2s_own() {
    written_under_then_read_under("kept", "h2").await;
}
