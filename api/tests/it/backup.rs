//! Backup and restore (docs/operations.md, "Backup and restore"): a backup taken while
//! predictions are being created and run, restored into a new system after the first is gone,
//! holds every prediction, API key, file and pending webhook as it was.
//!
//! The procedure's order is the documented one: the database first, then the jobs and events
//! streams with JetStream's own tool (`nats backup stream`, natscli v0.5.0, installed by
//! `deploy/local/install natscli`), restored on a nats-server of the new system's own. MongoDB's own tools (mongodump, mongorestore) cannot be
//! installed on the machines this runs on, so the database is copied by [`dump`] and
//! [`restore`], which write and read mongodump's layout (one `<collection>.bson` of
//! concatenated documents and one `<collection>.metadata.json` with its indexes each): what
//! mongodump takes without `--oplog`. Files are in GridFS here, so the database holds them.

use std::{
    io::{BufReader, BufWriter, Write},
    path::Path,
    process::Command,
    sync::{Arc, Mutex},
    time::Duration,
};

use bson::{Document, doc};
use futures::TryStreamExt;
use receiver::Receiver;
use reqwest::{Method, multipart};
use serde_json::{Value, json};
use testkit::eventually;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::harness::{JsonBody, Options, System, spawn_runner};

/// A folder removed when dropped.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("backup-test-{:x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).expect("backup folder");
        Self(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes every collection of `db` into `dir` in mongodump's layout; returns how many
/// documents it wrote.
async fn dump(db: &mongodb::Database, dir: &Path) -> usize {
    std::fs::create_dir_all(dir).expect("dump folder");
    let mut names = db.list_collection_names().await.expect("collections listed");
    names.sort();
    let mut written = 0;
    for name in names {
        let collection = db.collection::<Document>(&name);
        let mut out = BufWriter::new(std::fs::File::create(dir.join(format!("{name}.bson"))).expect("bson file"));
        let mut cursor = collection.find(doc! {}).await.expect("collection read");
        while let Some(document) = cursor.try_next().await.expect("document read") {
            document.to_writer(&mut out).expect("document written");
            written += 1;
        }
        out.flush().expect("bson file written");
        let listed = db.run_command(doc! {"listIndexes": &name}).await.expect("indexes listed");
        let indexes = listed.get_document("cursor").and_then(|c| c.get_array("firstBatch")).expect("a first batch");
        let metadata =
            json!({"indexes": bson::Bson::Array(indexes.clone()).into_relaxed_extjson(), "collectionName": name});
        std::fs::write(dir.join(format!("{name}.metadata.json")), metadata.to_string()).expect("metadata written");
    }
    written
}

/// Loads a dump made by [`dump`] (or mongodump) into `db`: each collection's indexes, then its
/// documents. Returns how many documents it loaded.
async fn restore(db: &mongodb::Database, dir: &Path) -> usize {
    let mut loaded = 0;
    for entry in std::fs::read_dir(dir).expect("dump folder") {
        let path = entry.expect("dump entry").path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".bson")) else {
            continue;
        };
        let metadata: Value =
            serde_json::from_slice(&std::fs::read(dir.join(format!("{name}.metadata.json"))).expect("metadata"))
                .expect("metadata is JSON");
        let indexes: Vec<Document> = metadata["indexes"]
            .as_array()
            .expect("indexes")
            .iter()
            .map(|i| {
                let mut index = bson::to_document(&bson::Bson::try_from(i.clone()).expect("extended JSON"))
                    .expect("an index document");
                index.remove("v");
                index.remove("ns");
                index
            })
            .filter(|i| i.get_str("name") != Ok("_id_"))
            .collect();
        db.create_collection(name).await.expect("collection made");
        if !indexes.is_empty() {
            db.run_command(doc! {"createIndexes": name, "indexes": indexes}).await.expect("indexes made");
        }
        let mut reader = BufReader::new(std::fs::File::open(&path).expect("bson file"));
        let mut batch = Vec::new();
        let collection = db.collection::<Document>(name);
        while let Ok(document) = Document::from_reader(&mut reader) {
            batch.push(document);
            if batch.len() == 500 {
                loaded += batch.len();
                collection.insert_many(std::mem::take(&mut batch)).await.expect("documents loaded");
            }
        }
        if !batch.is_empty() {
            loaded += batch.len();
            collection.insert_many(batch).await.expect("documents loaded");
        }
    }
    loaded
}

/// Runs the NATS command line tool against `server`.
fn nats(server: &str, args: &[&str]) {
    let cli = testkit::installed("NATS_CLI");
    let out = Command::new(&cli).args(["--server", server]).args(args).output().expect("nats runs");
    assert!(
        out.status.success(),
        "nats {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn create(system: &System, model: &str, input: Value, webhook: &str) -> String {
    let body = json!({"input": input, "webhook": webhook, "webhook_events_filter": ["completed"]});
    let created = system.post_json(&format!("/v1/models/{model}/predictions"), &body).await;
    assert_eq!(created.status(), 201);
    created.json_body().await["id"].as_str().expect("an id").to_owned()
}

async fn attempts(system: &System, id: &str) -> Vec<Value> {
    let page = system.get(&format!("/v1/predictions/{id}/webhook-deliveries")).await.json_body().await;
    page["results"].as_array().cloned().unwrap_or_default()
}

/// A prediction as a client sees it, without the links that name the api's address.
fn shown(mut prediction: Value) -> Value {
    prediction.as_object_mut().expect("an object").remove("urls");
    prediction
}

#[tokio::test]
async fn a_backup_taken_under_load_restores_into_a_new_system_as_it_was() {
    // Retries every 3 s for half a minute: the failed deliveries still wait at backup time.
    let schedule = ("NOTIFIER_RETRY_SCHEDULE", "1,3,3,3,3,3,3,3,3,3".to_owned());
    let system = System::start_with(Options { env: vec![schedule], ..Options::default() }).await;
    let (healthy, down) = (Receiver::start().await, Receiver::answering(503).await);

    // What the backup must hold: a second key, a file, predictions ended and delivered, ended
    // with their webhook waiting for a retry, and running.
    let created = system.request(Method::POST, "/v1/account/api-keys").send().await.expect("sent").json_body().await;
    let second_key = created["key"].as_str().expect("the key's value").to_owned();
    let bytes: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let form = multipart::Form::new().part(
        "content",
        multipart::Part::bytes(bytes.clone())
            .file_name("weights.bin")
            .mime_str("application/octet-stream")
            .expect("mime"),
    );
    let uploaded = system.request(Method::POST, "/v1/files").multipart(form).send().await.expect("sent");
    assert_eq!(uploaded.status(), 201);
    let file_id = uploaded.json_body().await["id"].as_str().expect("a file id").to_owned();

    let mut delivered = Vec::new();
    for i in 0..4 {
        delivered.push(create(&system, "demo/echo", json!({"prompt": format!("done {i}")}), &healthy.url()).await);
    }
    let mut waiting = Vec::new();
    for i in 0..4 {
        waiting.push(create(&system, "demo/echo", json!({"prompt": format!("waiting {i}")}), &down.url()).await);
    }
    let mut ended_before = Vec::new();
    for id in &delivered {
        ended_before.push(shown(system.wait_for_terminal(id, Duration::from_secs(30)).await));
    }
    let delivered_once = eventually(Duration::from_secs(30), || async {
        let ids: Vec<String> =
            healthy.of_event("completed").iter().map(|d| d.json()["id"].as_str().unwrap_or("").to_owned()).collect();
        delivered.iter().all(|id| ids.contains(id)).then_some(())
    })
    .await;
    assert!(delivered_once.is_some(), "the ended predictions' webhooks were delivered before the backup");
    for id in &waiting {
        let retrying = eventually(Duration::from_secs(30), || async {
            attempts(&system, id).await.iter().any(|a| a["outcome"] == "will_retry").then_some(())
        })
        .await;
        assert!(retrying.is_some(), "{id}'s webhook failed once and waits for a retry");
    }
    let mut running = Vec::new();
    for _ in 0..3 {
        running.push(create(&system, "demo/sleep", json!({"seconds": 2}), &healthy.url()).await);
    }

    // Load: creates go on throughout the backup.
    let made = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop_load = CancellationToken::new();
    let load = {
        let (http, url, key, hook) = (
            system.http().clone(),
            system.url("/v1/models/demo/echo/predictions"),
            system.admin_key.clone(),
            healthy.url(),
        );
        let (made, stop) = (made.clone(), stop_load.clone());
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                let body =
                    json!({"input": {"prompt": "load"}, "webhook": hook, "webhook_events_filter": ["completed"]});
                if let Ok(r) = http.post(&url).bearer_auth(&key).json(&body).send().await
                    && r.status() == 201
                    && let Ok(v) = r.json::<Value>().await
                {
                    made.lock().expect("ids").push(v["id"].as_str().unwrap_or("").to_owned());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    assert!(
        eventually(Duration::from_secs(30), || async { (made.lock().expect("ids").len() >= 5).then_some(()) })
            .await
            .is_some(),
        "the load creates predictions"
    );

    // The backup, in the documented order: the database, then the streams.
    let backup = TempDir::new();
    let store = system.ctx.store().await;
    let documents = dump(store.database(), &backup.path().join("mongodb")).await;
    // The streams a few seconds after the database, as with a large database: the running
    // predictions end in between, so the restored database shows them `processing` while
    // their jobs are gone from the restored stream (the reconciler's stranded predictions).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let bus = system.ctx.bus().await;
    let streams = [bus.subjects().jobs_stream(), bus.subjects().events_stream()];
    for stream in &streams {
        let to = backup.path().join(stream);
        nats(&system.ctx.nats_url, &["backup", "stream", stream, to.to_str().expect("a path"), "--no-progress"]);
    }
    stop_load.cancel();
    load.await.expect("the load ends");

    // The first system goes; the second starts on a NATS server of its own, with the streams
    // restored there, and on a new database.
    let (first_vars, admin_key, secret) = (system.vars.clone(), system.admin_key.clone(), system.secret.clone());
    let http = system.http().clone();
    drop(system);
    let nats_url = testkit::nats_server();
    for stream in &streams {
        let from = backup.path().join(stream);
        nats(&nats_url, &["backup", "restore", "stream", from.to_str().expect("a path"), "--no-progress"]);
    }
    let restored_name = format!("{}_restored", first_vars["MONGODB_DATABASE"]);
    let restored_db = store.database().client().database(&restored_name);
    assert_eq!(restore(&restored_db, &backup.path().join("mongodb")).await, documents, "every document loaded");
    down.answer(200);

    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    let mut vars = first_vars.clone();
    vars.insert("MONGODB_DATABASE".into(), restored_name.clone());
    vars.insert("PUBLIC_BASE_URL".into(), base.clone());
    vars.insert("NATS_URL".into(), nats_url.clone());
    let env = common::config::Env::from_fn(|k| vars.get(k).cloned());
    let second = CancellationToken::new();
    let _stop_second = second.clone().drop_guard();
    let api_config = api::config::ApiConfig::from_env(&env).expect("api configuration");
    let notifier_config = notifier::config::NotifierConfig::from_env(&env).expect("notifier configuration");
    {
        let token = second.clone();
        tokio::spawn(async move { api::serve(api_config, listener, token).await.expect("api serves") });
        let token = second.clone();
        tokio::spawn(async move { notifier::run(notifier_config, token).await.expect("notifier runs") });
    }
    spawn_runner(&vars, &second);
    let get = |path: String, key: String| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            let r = http.get(format!("{base}{path}")).bearer_auth(key).send().await.expect("sent");
            let status = r.status().as_u16();
            (status, r.bytes().await.unwrap_or_default())
        }
    };
    assert!(
        eventually(Duration::from_secs(30), || async {
            (get("/ready".into(), String::new()).await.0 == 200).then_some(())
        })
        .await
        .is_some(),
        "the restored system becomes ready"
    );

    // Keys: both still open the account; the file comes back whole.
    for key in [&admin_key, &second_key] {
        assert_eq!(get("/v1/account".into(), key.clone()).await.0, 200, "a key of the backup works");
    }
    assert_eq!(get("/v1/account".into(), "r8_not_a_key".into()).await.0, 401);
    let (status, body) = get(format!("/v1/files/{file_id}/download"), admin_key.clone()).await;
    assert_eq!((status, body.len()), (200, bytes.len()));
    assert!(body[..] == bytes[..], "the file's bytes are as uploaded");

    // Every prediction of the backup: the ended ones as they were, the others run to the end.
    let ids: Vec<String> = restored_db
        .collection::<Document>("predictions")
        .find(doc! {})
        .await
        .expect("read")
        .try_collect::<Vec<_>>()
        .await
        .expect("read")
        .iter()
        .map(|d| d.get_str("_id").expect("an id").to_owned())
        .collect();
    for id in delivered.iter().chain(&waiting).chain(&running) {
        assert!(ids.contains(id), "{id} is in the backup");
    }
    let loaded = made.lock().expect("ids").iter().filter(|id| ids.contains(id)).count();
    assert!(loaded >= 5, "the backup holds the predictions created under load before it ({loaded})");
    for (id, before) in delivered.iter().zip(&ended_before) {
        let (status, body) = get(format!("/v1/predictions/{id}"), admin_key.clone()).await;
        assert_eq!(status, 200);
        let after: Value = serde_json::from_slice(&body).expect("JSON");
        assert_eq!(&shown(after), before, "an ended prediction is as it was");
    }
    for id in &ids {
        let ended = eventually(Duration::from_secs(90), || async {
            let (_, body) = get(format!("/v1/predictions/{id}"), admin_key.clone()).await;
            let v: Value = serde_json::from_slice(&body).ok()?;
            matches!(v["status"].as_str(), Some("succeeded" | "failed" | "canceled")).then_some(v)
        })
        .await
        .unwrap_or_else(|| panic!("{id} of the backup did not end in the restored system"));
        assert_eq!(ended["status"], "succeeded", "{id}: {ended}");
    }

    // Every prediction's `completed` webhook reaches its receiver, signed with the account's
    // secret; a webhook that waited for a retry goes on with the same webhook-id. A retry the
    // first system's notifier held when the database was copied is leased to it still: it
    // comes once that lease ends (90 s with the 10 s delivery timeout), as after that
    // notifier's crash.
    let all_delivered = eventually(Duration::from_secs(150), || async {
        let mut accepted: Vec<String> = Vec::new();
        for receiver in [&healthy, &down] {
            for d in receiver.of_event("completed") {
                assert!(d.verifies(&secret), "a webhook signed with the account's secret");
                if d.accepted() {
                    accepted.push(d.json()["id"].as_str().unwrap_or("").to_owned());
                }
            }
        }
        ids.iter().all(|id| accepted.contains(id)).then_some(())
    })
    .await;
    if all_delivered.is_none() {
        let mut missing = Vec::new();
        for id in &ids {
            let sent: Vec<(u16, String)> = [&healthy, &down]
                .iter()
                .flat_map(|r| r.deliveries())
                .filter(|d| d.json()["id"] == id.as_str())
                .map(|d| (d.status, d.header("webhook-id").to_owned()))
                .collect();
            if sent.iter().any(|(status, _)| (200..300).contains(status)) {
                continue;
            }
            let (_, shown) = get(format!("/v1/predictions/{id}"), admin_key.clone()).await;
            let (_, records) = get(format!("/v1/predictions/{id}/webhook-deliveries"), admin_key.clone()).await;
            missing.push(format!(
                "{id}: sent {sent:?}; now {}; records {}",
                String::from_utf8_lossy(&shown),
                String::from_utf8_lossy(&records)
            ));
        }
        panic!("every prediction of the backup has its completed webhook delivered; not:\n{}", missing.join("\n"));
    }
    for id in &waiting {
        let sent: Vec<_> = down.of_event("completed").into_iter().filter(|d| d.json()["id"] == id.as_str()).collect();
        let first_id = sent[0].header("webhook-id").to_owned();
        assert!(sent.iter().all(|d| d.header("webhook-id") == first_id), "{id}: one webhook-id before and after");
        // The restored system's records: the attempts before the backup, then its own delivery.
        let (_, body) = get(format!("/v1/predictions/{id}/webhook-deliveries"), admin_key.clone()).await;
        let records: Value = serde_json::from_slice(&body).expect("JSON");
        let outcomes: Vec<&str> =
            records["results"].as_array().expect("results").iter().filter_map(|a| a["outcome"].as_str()).collect();
        assert!(outcomes.contains(&"will_retry") && outcomes.contains(&"delivered"), "{id}: {outcomes:?}");
    }

    // The events stream came back too: a resend of a delivery made before the backup finds
    // its event and sends the same payload again.
    let id = &delivered[0];
    let before: Vec<_> = healthy.of_event("completed").into_iter().filter(|d| d.json()["id"] == id.as_str()).collect();
    let webhook_id = before[0].header("webhook-id").to_owned();
    let resent = http
        .post(format!("{base}/v1/predictions/{id}/webhook-deliveries/{webhook_id}/resend"))
        .bearer_auth(&admin_key)
        .send()
        .await
        .expect("sent");
    assert_eq!(resent.status(), 202);
    let again = eventually(Duration::from_secs(30), || async {
        let now: Vec<_> = healthy.of_event("completed").into_iter().filter(|d| d.json()["id"] == id.as_str()).collect();
        (now.len() > before.len()).then(|| now.last().cloned()).flatten()
    })
    .await
    .expect("the resend is delivered");
    assert_eq!((again.header("webhook-id"), &again.body), (webhook_id.as_str(), &before[0].body));
}
