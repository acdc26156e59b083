//! Every query the services make has an index to use. The MongoDB stand-in ignores indexes,
//! so nothing else would notice a query that real MongoDB answers by scanning a collection:
//! this test drives every kind of request, lets the runner's reconciler and retention sweep
//! and the notifier run, and checks the shape of each query the three services sent
//! (`MONGODB_QUERY_SHAPES`) against the indexes they created.

use std::{collections::HashMap, time::Duration};

use bson::Document;
use common::store::commands::{QueryShape, query_shapes};
use futures::TryStreamExt;
use reqwest::{Method, multipart};
use serde_json::json;

use receiver::Receiver;

use crate::harness::{JsonBody, Options, System};

/// Whether an index with these keys serves a query filtering on `filter` and sorting on
/// `sort`: it holds every field the query filters and sorts on (an `_id` range or sort
/// included), and it leads with one the filter names (or, for a query without a filter, with
/// the first it sorts on).
fn serves_fields(keys: &[String], filter: &[String], sort: &[String]) -> bool {
    let Some(first) = keys.first() else { return false };
    let covered = filter.iter().chain(sort).all(|f| keys.contains(f));
    let leads = if filter.is_empty() { sort.first() == Some(first) } else { filter.contains(first) };
    covered && leads
}

/// Whether `indexes` serve `shape`: a query naming its documents by `_id` is served by the
/// `_id` index; one with a top-level `$or` needs an index for each branch; any other one
/// index that [`serves_fields`].
fn served(indexes: &[Vec<String>], shape: &QueryShape) -> bool {
    // Every collection has its `_id` index, one not made yet (nothing written to it) too.
    let id = vec!["_id".to_owned()];
    let by_one = |filter: &[String]| indexes.iter().chain([&id]).any(|keys| serves_fields(keys, filter, &shape.sort));
    if shape.by_id {
        true
    } else if shape.branches.is_empty() {
        by_one(&shape.filter)
    } else {
        shape.branches.iter().all(|branch| by_one(branch))
    }
}

/// Each collection's indexes, by their keys.
async fn indexes(store: &common::store::Store) -> HashMap<String, Vec<Vec<String>>> {
    let db = store.database();
    let mut all = HashMap::new();
    for name in db.list_collection_names().await.expect("collections") {
        let specs: Vec<Document> = db
            .collection::<Document>(&name)
            .list_indexes()
            .await
            .expect("indexes")
            .try_collect::<Vec<_>>()
            .await
            .map(|models| models.into_iter().map(|m| m.keys).collect())
            .expect("read indexes");
        all.insert(name, specs.into_iter().map(|keys| keys.keys().cloned().collect()).collect());
    }
    all
}

/// Runs a little of everything the api, runner and notifier do.
async fn workload(system: &System, receiver: &Receiver) {
    let echo = json!({"input": {"prompt": "hi"}, "webhook": receiver.url()});
    let created = system
        .request(Method::POST, "/v1/models/demo/echo/predictions")
        .header("idempotency-key", "once")
        .header("prefer", "wait=10")
        .json(&echo)
        .send()
        .await
        .expect("create")
        .json_body()
        .await;
    let id = created["id"].as_str().expect("an id").to_owned();
    for path in [
        format!("/v1/predictions/{id}"),
        "/v1/predictions".into(),
        "/v1/predictions?status=succeeded".into(),
        format!("/v1/predictions/{id}/webhook-deliveries"),
        "/v1/models".into(),
        "/v1/models/demo/echo".into(),
        "/v1/models/demo/echo/versions".into(),
        "/v1/account".into(),
        "/v1/hardware".into(),
        "/v1/account/api-keys".into(),
        "/v1/account/webhooks/secret".into(),
        "/replicate/v1/predictions".into(),
    ] {
        assert!(system.get(&path).await.status().is_success(), "{path}");
    }
    let by_version =
        system.post_json("/v1/predictions", &json!({"version": "demo/echo", "input": {"prompt": "v"}})).await;
    assert_eq!(by_version.status(), 201);
    let stream = system.get(&format!("/v1/predictions/{id}/stream")).await;
    assert!(stream.text().await.expect("events").contains("event: done"));

    // A waiting prediction behind a running one (one slot), its queue place, and cancels.
    let sleep = |seconds: u64| json!({"input": {"seconds": seconds}});
    let running = system.post_json("/v1/models/demo/sleep/predictions", &sleep(30)).await.json_body().await;
    let waiting = system.post_json("/v1/models/demo/sleep/predictions", &sleep(30)).await.json_body().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let place = system.get(&format!("/v1/predictions/{}", waiting["id"].as_str().expect("id"))).await.json_body().await;
    assert!(place["queue"]["position"].is_number(), "{place}");
    for p in [&waiting, &running] {
        let cancel =
            system.post_json(&format!("/v1/predictions/{}/cancel", p["id"].as_str().expect("id")), &json!({})).await;
        assert_eq!(cancel.status(), 200);
    }

    // Files.
    let part = multipart::Part::bytes(b"hello".to_vec()).file_name("a.txt").mime_str("text/plain").expect("mime");
    let file = system
        .request(Method::POST, "/v1/files")
        .multipart(multipart::Form::new().part("content", part))
        .send()
        .await
        .expect("upload")
        .json_body()
        .await;
    let file_id = file["id"].as_str().expect("a file id").to_owned();
    for path in ["/v1/files".to_owned(), format!("/v1/files/{file_id}"), format!("/v1/files/{file_id}/download")] {
        assert!(system.get(&path).await.status().is_success(), "{path}");
    }
    let checksum = system
        .post_json("/v1/models/demo/checksum/predictions", &json!({"input": {"file": file["urls"]["get"]}}))
        .await;
    assert_eq!(checksum.status(), 201);
    let deleted = system.request(Method::DELETE, &format!("/v1/files/{file_id}")).send().await.expect("delete");
    assert_eq!(deleted.status(), 204);

    // Deployments and keys.
    let deployment = json!({"name": "app", "model": "demo/echo", "version": created["version"], "hardware": "cpu",
                            "min_instances": 0, "max_instances": 1});
    let made = system.post_json("/v1/deployments", &deployment).await;
    assert_eq!(made.status(), 201, "{}", made.text().await.unwrap_or_default());
    for path in ["/v1/deployments", "/v1/deployments/test-account/app"] {
        assert!(system.get(path).await.status().is_success(), "{path}");
    }
    let patched = system
        .request(Method::PATCH, "/v1/deployments/test-account/app")
        .json(&json!({"max_instances": 2}))
        .send()
        .await;
    assert!(patched.expect("patch").status().is_success());
    let run =
        system.post_json("/v1/deployments/test-account/app/predictions", &json!({"input": {"prompt": "d"}})).await;
    assert_eq!(run.status(), 201);
    // An account's own model: created, listed, read, deleted.
    let owned = json!({"owner": "test-account", "name": "tune", "visibility": "private", "hardware": "cpu"});
    assert_eq!(system.post_json("/v1/models", &owned).await.status(), 201);
    for path in ["/v1/models", "/v1/models/test-account/tune", "/v1/models/test-account/tune/versions"] {
        assert!(system.get(path).await.status().is_success(), "{path}");
    }
    let unmade = system.request(Method::DELETE, "/v1/models/test-account/tune").send().await.expect("delete");
    assert_eq!(unmade.status(), 204);
    let key = system.post_json("/v1/account/api-keys", &json!({"name": "k"})).await.json_body().await;
    assert!(
        system.get(&format!("/v1/account/api-keys/{}", key["id"].as_str().expect("id"))).await.status().is_success()
    );
    let removed = system.request(Method::DELETE, "/v1/deployments/test-account/app").send().await.expect("delete");
    assert!(removed.status().is_success());
    assert!(
        system
            .post_json("/v1/account/webhooks/secret/rotate", &json!({"transition_hours": 1}))
            .await
            .status()
            .is_success()
    );

    let deliveries = system.get(&format!("/v1/predictions/{id}/webhook-deliveries")).await.json_body().await;
    if let Some(webhook_id) = deliveries["results"][0]["webhook_id"].as_str() {
        let path = format!("/v1/predictions/{id}/webhook-deliveries/{webhook_id}/resend");
        assert!(system.post_json(&path, &json!({})).await.status().is_success());
    }
}

#[tokio::test]
async fn every_query_the_services_make_has_an_index_to_use() {
    let env = vec![
        ("MONGODB_QUERY_SHAPES", "true".into()),
        ("RUNNER_CONCURRENCY", "1".into()),
        ("RUNNER_RECONCILE_SECONDS", "0.2".into()),
        ("RUNNER_RETENTION_SWEEP_SECONDS", "0.2".into()),
        ("RETENTION_SECONDS", "1".into()),
    ];
    let system = System::start_with(Options { env, ..Default::default() }).await;
    let receiver = Receiver::start().await;

    workload(&system, &receiver).await;
    // The reconciler, the retention sweep and the notifier's retries have their turns.
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The usage sweep asks for what ended 30 s ago and more: asked here at once, through a
    // store whose queries are kept like the services'.
    let sweeping = common::store::Store::connect(
        &system.ctx.mongodb_uri,
        &system.ctx.database,
        "usage-sweep",
        common::store::commands::Monitoring::Shapes,
    )
    .await
    .expect("a store");
    common::usage::UsageLedger::start(&sweeping)
        .recover_ended_before(Duration::ZERO, 10)
        .await
        .expect("the usage sweep");

    // The lanes' recount and removal ask for lanes idle two minutes and more: the lanes are
    // aged here, and tended through the same kind of store.
    let lanes = system.ctx.store().await.database().collection::<Document>("queue_lanes");
    let aged = bson::doc! { "$set": { "touched_at": bson::DateTime::from_millis(1000) } };
    lanes.update_many(bson::doc! {}, aged).await.expect("aged");
    let files = common::files::Files::new(&sweeping);
    runner::retention::Sweeper::new(sweeping.clone(), files, Duration::from_secs(3600), Duration::from_secs(3600))
        .tend_lanes()
        .await;

    let store = system.ctx.store().await;
    let indexes = indexes(&store).await;
    let shapes = query_shapes(&system.ctx.database);
    assert!(shapes.len() > 20, "the workload made queries of many shapes: {}", shapes.len());
    let unserved: Vec<&QueryShape> = shapes
        .iter()
        .filter(|shape| {
            let of_collection = indexes.get(&shape.collection).map(Vec::as_slice).unwrap_or_default();
            !served(of_collection, shape)
        })
        .collect();
    assert!(unserved.is_empty(), "queries no index serves:\n{unserved:#?}");
}

#[tokio::test]
async fn an_index_made_before_with_the_same_keys_and_other_options_does_not_stop_a_start() {
    let ctx = testkit::TestContext::new();
    let store = ctx.store().await;
    let options = mongodb::options::IndexOptions::builder().expire_after(Duration::from_secs(3600)).build();
    let theirs = mongodb::IndexModel::builder().keys(bson::doc! { "seen_at": 1 }).options(options).build();
    store.database().collection::<Document>("runners").create_index(theirs).await.expect("an operator's index");
    let conflict = store
        .database()
        .collection::<Document>("runners")
        .create_index(mongodb::IndexModel::builder().keys(bson::doc! { "seen_at": 1 }).build())
        .await;
    assert!(conflict.is_err(), "the server refuses the same keys with other options");

    store.ensure_indexes().await.expect("the service starts, keeping the operator's index");
}

#[tokio::test]
async fn an_index_a_newer_one_replaces_is_dropped_at_start() {
    let ctx = testkit::TestContext::new();
    let store = ctx.store().await;
    let predictions = store.database().collection::<Document>("predictions");
    let old = mongodb::IndexModel::builder().keys(bson::doc! { "status": 1, "created_at": 1 }).build();
    predictions.create_index(old).await.expect("an earlier release's index");

    store.ensure_indexes().await.expect("indexes made");
    store.ensure_indexes().await.expect("and again, with nothing left to drop");

    let names: Vec<String> = predictions.list_index_names().await.expect("index names");
    assert!(!names.contains(&"status_1_created_at_1".to_owned()), "{names:?}");
    assert!(names.contains(&"status_1_created_at_1__id_1".to_owned()), "{names:?}");
}

#[tokio::test]
async fn a_new_database_is_migrated_at_start_and_another_releases_index_set_is_served_as_it_is() {
    use common::store::migrations::{INDEX_SET, Standing};
    let ctx = testkit::TestContext::new();
    let store = ctx.store().await;
    let predictions = store.database().collection::<Document>("predictions");
    let migrations = store.database().collection::<Document>("migrations");
    let record = |set: i64| {
        let migrations = migrations.clone();
        async move {
            let filter = bson::doc! {"_id": "indexes"};
            migrations.update_one(filter, bson::doc! {"$set": {"set": set}}).await.expect("recorded");
        }
    };
    let names = || async { predictions.list_index_names().await.expect("index names") };

    assert_eq!(store.indexes_at_start().await.expect("started"), Standing::Unrecorded);
    assert_eq!(store.index_standing().await.expect("read"), Standing::Current, "a new database is migrated");
    assert!(names().await.contains(&"status_1_deadline_at_1".to_owned()));

    // An older release's set (this release's `api admin migrate` not run yet): a replica of
    // this release serves without building or dropping anything.
    predictions.drop_index("status_1_deadline_at_1").await.expect("dropped");
    record(INDEX_SET - 1).await;
    assert_eq!(store.indexes_at_start().await.expect("started"), Standing::Behind(INDEX_SET - 1));
    assert!(!names().await.contains(&"status_1_deadline_at_1".to_owned()), "nothing built at start");
    // A newer release's: served as it is too.
    record(INDEX_SET + 1).await;
    assert_eq!(store.indexes_at_start().await.expect("started"), Standing::Ahead(INDEX_SET + 1));

    // The step of its own builds the set and records it.
    store.migrate().await.expect("migrated");
    assert!(names().await.contains(&"status_1_deadline_at_1".to_owned()));
    assert_eq!(store.index_standing().await.expect("read"), Standing::Current);
}
