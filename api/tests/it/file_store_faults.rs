//! Files' bytes in GridFS as real MongoDB treats them: a cursor idle for 10 minutes is closed
//! by the server (error 43), and a delete can fail halfway. Faults are injected with the
//! `failCommand` failpoint on a store of this test's own.

use common::{
    domain::AccountId,
    files::{Files, NewFile},
};
use futures::StreamExt;
use testkit::TestContext;

fn new_file(name: &str) -> NewFile {
    NewFile {
        account_id: AccountId::generate(),
        name: name.into(),
        content_type: "application/octet-stream".into(),
        metadata: String::new(),
        expires_at: None,
        prediction_id: None,
    }
}

/// A file of `len` bytes that differ from chunk to chunk.
async fn stored(files: &Files, len: usize) -> (common::store::FileRecord, Vec<u8>) {
    let bytes: Vec<u8> = (0..len).map(|i| (i / 1000 % 251) as u8).collect();
    let body = futures::stream::iter(bytes.chunks(64 * 1024).map(|c| Ok(bytes::Bytes::copy_from_slice(c)))).boxed();
    let record = files.create(new_file("data.bin"), body, u64::MAX).await.expect("stored");
    (record, bytes)
}

#[tokio::test]
async fn a_download_reads_every_chunk_without_a_cursor_the_server_may_have_closed() {
    let ctx = TestContext::new();
    let store = ctx.named_store().await;
    let files = Files::new(&store);
    let (record, bytes) = stored(&files, 5 * 1024 * 1024).await;
    // As after a client that read too slowly: every later batch of a cursor is gone.
    ctx.fail_commands(&store, &["getMore"], bson::doc! { "errorCode": 43 }, 100).await;

    let read = files.read_all(&record).await.expect("read whole");

    assert!(read == bytes, "the same {} bytes", bytes.len());
}

#[tokio::test]
async fn a_delete_that_fails_halfway_leaves_the_file_listed_to_delete_again_and_no_bytes_behind() {
    let ctx = TestContext::new();
    let store = ctx.named_store().await;
    let files = Files::new(&store);
    let (record, _) = stored(&files, 600 * 1024).await;
    ctx.fail_commands(&store, &["delete"], bson::doc! { "errorCode": 1 }, 1).await;

    assert!(files.delete(&record.id).await.is_err(), "the injected failure");
    assert!(files.get(&record.id).await.expect("read").is_some(), "still there, so its owner can delete it again");
    assert!(files.delete(&record.id).await.expect("deleted"));

    for (collection, field) in [("files.files", "_id"), ("files.chunks", "files_id")] {
        let left = store
            .database()
            .collection::<bson::Document>(collection)
            .count_documents(bson::doc! { field: record.id.as_str() })
            .await
            .expect("count");
        assert_eq!(left, 0, "no bytes left in {collection} that nothing names");
    }
}
