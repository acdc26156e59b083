//! The database's clock (`common::store::clock`): what billed times are stamped with.

/// The server says its time in `hello` (`localTime`), as mongod does, and the store measures
/// its clock against it: the offset on one machine is a round trip at most.
#[tokio::test]
async fn the_databases_clock_is_measured_from_its_hello() {
    let context = testkit::TestContext::new();
    let store = context.store().await;
    let offset = store.clock().measure(store.database()).await.expect("answered").expect("the server says its time");
    assert!(offset.abs() < 1_000, "the same machine's clock, {offset} ms apart");
    assert_eq!(store.clock().offset_millis(), offset);
}
