//! The Files API through the api: upload, list, get, download (signed, ranged), delete, the
//! size limit, isolation between accounts, file inputs end to end, and expiry.

use std::time::Duration;

use reqwest::{Method, multipart};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use testkit::eventually;

use crate::harness::{JsonBody, Options, System};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `len` bytes that are not all alike, so a wrong range shows.
fn sample(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

async fn upload_as(
    system: &System,
    key: &str,
    root: &str,
    name: &str,
    bytes: Vec<u8>,
    metadata: Option<&str>,
) -> reqwest::Response {
    let part = multipart::Part::bytes(bytes).file_name(name.to_owned()).mime_str("image/png").expect("mime");
    let mut form = multipart::Form::new().part("content", part);
    if let Some(m) = metadata {
        form = form.text("metadata", m.to_owned());
    }
    system.with_key(Method::POST, &format!("{root}/files"), key).multipart(form).send().await.expect("sent")
}

async fn upload(system: &System, bytes: Vec<u8>) -> Value {
    let metadata = r#"{"who": "test", "$odd.name": [1, {"nested": null}]}"#;
    let response = upload_as(system, &system.admin_key, "/v1", "photo.png", bytes, Some(metadata)).await;
    assert_eq!(response.status(), 201);
    response.json_body().await
}

fn no_runner() -> Options {
    Options { runner: false, notifier: false, ..Options::default() }
}

#[tokio::test]
async fn an_upload_is_stored_whole_with_its_checksums_and_listed_newest_first() {
    let system = System::start_with(no_runner()).await;
    let bytes = sample(300 * 1024);
    let file = upload(&system, bytes.clone()).await;
    assert_eq!(file["name"], "photo.png");
    assert_eq!(file["content_type"], "image/png");
    assert_eq!(file["size"], 300 * 1024);
    assert_eq!(file["checksums"]["sha256"], hex(&Sha256::digest(&bytes)));
    assert_eq!(file["etag"], file["checksums"]["md5"]);
    assert_eq!(file["metadata"], json!({"who": "test", "$odd.name": [1, {"nested": null}]}), "any names, kept as sent");
    let id = file["id"].as_str().expect("id");
    assert_eq!(file["urls"]["get"], system.url(&format!("/v1/files/{id}")));
    assert!(file["expires_at"].as_str().is_some());

    let got = system.get(&format!("/v1/files/{id}")).await.json_body().await;
    assert_eq!(got["checksums"], file["checksums"]);
    let second = upload(&system, b"second".to_vec()).await;
    let list = system.get("/v1/files?limit=1").await.json_body().await;
    assert_eq!(list["total_count"], 2);
    assert_eq!(list["results"][0]["id"], second["id"], "newest first");
    assert_eq!(list["previous"], Value::Null);
    assert_eq!(list["next"], system.url("/v1/files?limit=1&offset=1"));

    // The bytes, with the bearer key: whole, then a range, then not modified.
    let download = system.get(&format!("/v1/files/{id}/download")).await;
    assert_eq!(download.status(), 200);
    assert_eq!(download.headers()["content-length"], (300 * 1024).to_string().as_str());
    let etag = download.headers()["etag"].to_str().expect("etag").to_owned();
    assert_eq!(etag, format!("\"{}\"", file["etag"].as_str().expect("md5")));
    assert_eq!(download.bytes().await.expect("body").to_vec(), bytes);
    let part = system
        .request(Method::GET, &format!("/v1/files/{id}/download"))
        .header("range", "bytes=262140-262150")
        .send()
        .await
        .expect("sent");
    assert_eq!(part.status(), 206);
    assert_eq!(part.headers()["content-range"], format!("bytes 262140-262150/{}", 300 * 1024).as_str());
    assert_eq!(
        part.bytes().await.expect("body").to_vec(),
        bytes[262_140..=262_150].to_vec(),
        "a range across two GridFS chunks"
    );
    let cached = system
        .request(Method::GET, &format!("/v1/files/{id}/download"))
        .header("if-none-match", &etag)
        .send()
        .await
        .expect("sent");
    assert_eq!(cached.status(), 304);
    let past = system
        .request(Method::GET, &format!("/v1/files/{id}/download"))
        .header("range", "bytes=999999999-")
        .send()
        .await
        .expect("sent");
    assert_eq!(past.status(), 416);
    assert_eq!(past.headers()["content-type"], "application/problem+json");

    // Deleted: gone everywhere.
    assert_eq!(system.request(Method::DELETE, &format!("/v1/files/{id}")).send().await.expect("sent").status(), 204);
    assert_eq!(system.get(&format!("/v1/files/{id}")).await.status(), 404);
    assert_eq!(system.get(&format!("/v1/files/{id}/download")).await.status(), 404);
    assert_eq!(system.request(Method::DELETE, &format!("/v1/files/{id}")).send().await.expect("sent").status(), 404);
}

#[tokio::test]
async fn a_signed_download_works_without_a_key_until_tampered_with_or_expired() {
    let system = System::start_with(no_runner()).await;
    let file = upload(&system, b"signed bytes".to_vec()).await;
    let signed = file["urls"]["download"].as_str().expect("signed url").to_owned();
    assert!(signed.contains("/download?owner=") && signed.contains("&expiry=") && signed.contains("&signature="));
    let anonymous = system.http().get(&signed).send().await.expect("sent");
    assert_eq!(anonymous.status(), 200);
    assert_eq!(anonymous.bytes().await.expect("body").as_ref(), b"signed bytes");

    let tampered = signed.replace("signature=", "signature=A");
    assert_eq!(system.http().get(&tampered).send().await.expect("sent").status(), 401);
    let (head, expiry) = signed.split_once("&expiry=").expect("expiry");
    let later = expiry.split_once('&').expect("rest");
    let extended = format!("{head}&expiry={}&{}", later.0.parse::<i64>().expect("n") + 1, later.1);
    assert_eq!(system.http().get(&extended).send().await.expect("sent").status(), 401);
    let expired = system
        .http()
        .get(format!(
            "{}?owner=x&expiry=1&signature=abc",
            system.url(&format!("/v1/files/{}/download", file["id"].as_str().expect("id")))
        ))
        .send()
        .await
        .expect("sent");
    assert_eq!(expired.status(), 401);
    assert_eq!(expired.headers()["content-type"], "application/problem+json");
    let without_key = system
        .http()
        .get(system.url(&format!("/v1/files/{}/download", file["id"].as_str().expect("id"))))
        .send()
        .await
        .expect("sent");
    assert_eq!(without_key.status(), 401);
}

#[tokio::test]
async fn another_account_sees_no_file_and_cannot_use_one_as_input() {
    let system = System::start_with(no_runner()).await;
    let file = upload(&system, b"mine".to_vec()).await;
    let id = file["id"].as_str().expect("id");
    let other = system.bootstrap_account("other").await;
    for path in [format!("/v1/files/{id}"), format!("/v1/files/{id}/download"), format!("/replicate/v1/files/{id}")] {
        let response = system.with_key(Method::GET, &path, &other).send().await.expect("sent");
        assert_eq!(response.status(), 404, "{path}");
    }
    let delete = system.with_key(Method::DELETE, &format!("/v1/files/{id}"), &other).send().await.expect("sent");
    assert_eq!(delete.status(), 404);
    let listed = system.with_key(Method::GET, "/v1/files", &other).send().await.expect("sent").json_body().await;
    assert_eq!(listed["total_count"], 0);

    system.register_models_only().await;
    let create = system
        .with_key(Method::POST, "/v1/models/demo/checksum/predictions", &other)
        .json(&json!({"input": {"file": file["urls"]["get"]}}))
        .send()
        .await
        .expect("sent");
    assert_eq!(create.status(), 400);
    let body = create.json_body().await;
    assert_eq!(body["errors"][0]["field"], "input.file");
    assert!(body["errors"][0]["message"].as_str().expect("message").contains(id));
}

#[tokio::test]
async fn an_upload_past_the_limit_is_413_and_leaves_nothing_behind() {
    let system = System::start_with(Options {
        runner: false,
        notifier: false,
        env: vec![("API_MAX_FILE_BYTES", "100000".into())],
    })
    .await;
    let response = upload_as(&system, &system.admin_key, "/v1", "big.bin", sample(100_001), None).await;
    assert_eq!(response.status(), 413);
    assert_eq!(response.headers()["content-type"], "application/problem+json");
    let body = response.json_body().await;
    assert_eq!(body["code"], "PAYLOAD_TOO_LARGE");
    assert_eq!(system.get("/v1/files").await.json_body().await["total_count"], 0);
    assert_eq!(system.stored_pieces().await, 0, "no byte of the refused upload");
    let at_limit = upload_as(&system, &system.admin_key, "/v1", "ok.bin", sample(100_000), None).await;
    assert_eq!(at_limit.status(), 201);
}

#[tokio::test]
async fn uploads_without_a_file_or_with_bad_metadata_are_400_and_need_write() {
    let system = System::start_with(no_runner()).await;
    let form = multipart::Form::new().text("metadata", "{}");
    let response = system.request(Method::POST, "/v1/files").multipart(form).send().await.expect("sent");
    assert_eq!(response.status(), 400);
    assert_eq!(response.json_body().await["errors"][0]["field"], "content");
    let bad = upload_as(&system, &system.admin_key, "/v1", "a.txt", b"a".to_vec(), Some("[1, 2]")).await;
    assert_eq!(bad.status(), 400);
    assert_eq!(bad.json_body().await["errors"][0]["field"], "metadata");
    // An array sent the way forms send one (a part per item), and the document's own encoding.
    let twice = multipart::Form::new()
        .text("metadata", "{}")
        .text("metadata", "{}")
        .part("content", multipart::Part::bytes(b"a".to_vec()));
    let refused = system.request(Method::POST, "/v1/files").multipart(twice).send().await.expect("sent");
    assert_eq!(refused.status(), 400);
    assert_eq!(refused.json_body().await["errors"][0]["field"], "metadata");
    let doc = system.get("/openapi.json").await.json_body().await;
    let encoding = &doc["paths"]["/v1/files"]["post"]["requestBody"]["content"]["multipart/form-data"]["encoding"];
    assert_eq!(encoding["metadata"]["contentType"], "application/json", "metadata is one JSON part");
    let extra = multipart::Form::new().text("surprise", "1").part("content", multipart::Part::bytes(b"a".to_vec()));
    let refused = system.request(Method::POST, "/v1/files").multipart(extra).send().await.expect("sent");
    assert_eq!(refused.status(), 400);
    assert_eq!(refused.json_body().await["errors"][0]["field"], "surprise");
    let not_multipart = system.post_json("/v1/files", &json!({"content": "x"})).await;
    assert_eq!(not_multipart.status(), 400);
    assert_eq!(system.get("/v1/files").await.json_body().await["total_count"], 0, "the refused uploads left nothing");

    let created = system.post_json("/v1/account/api-keys", &json!({"scopes": ["read"]})).await.json_body().await;
    let reader = created["key"].as_str().expect("key");
    let refused = upload_as(&system, reader, "/v1", "a.txt", b"a".to_vec(), None).await;
    assert_eq!(refused.status(), 403);
}

#[tokio::test]
async fn a_file_input_reaches_a_built_in_model_as_its_exact_bytes_by_upload_on_either_surface_and_by_data_uri() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let bytes = sample(300 * 1024);
    let digest = hex(&Sha256::digest(&bytes));
    let file = upload(&system, bytes.clone()).await;
    let id = file["id"].as_str().expect("id");
    let urls = [
        file["urls"]["get"].as_str().expect("get").to_owned(),
        file["urls"]["download"].as_str().expect("download").to_owned(),
        system.url(&format!("/replicate/v1/files/{id}")),
    ];
    for url in urls {
        let done = system.run("demo/checksum", json!({"file": &url})).await;
        assert_eq!(done["status"], "succeeded", "{done}");
        let output: Value = serde_json::from_str(done["output"].as_str().expect("output")).expect("json");
        assert_eq!(output["sha256"], digest, "{url}");
        assert_eq!(output["size"], 300 * 1024);
        assert_eq!(done["input"]["file"], url, "the input shows what the client sent");
    }
    let inline = format!("data:text/plain;base64,{}", base64_of(b"inline bytes"));
    let done = system.run("demo/checksum", json!({"file": &inline})).await;
    let output: Value = serde_json::from_str(done["output"].as_str().expect("output")).expect("json");
    assert_eq!(output["sha256"], hex(&Sha256::digest(b"inline bytes")));

    let bad = system.post_json("/v1/models/demo/checksum/predictions", &json!({"input": {"file": "not a url"}})).await;
    assert_eq!(bad.status(), 400);
    let unknown = system
        .post_json(
            "/v1/models/demo/checksum/predictions",
            &json!({"input": {"file": system.url("/v1/files/file_aaaaaaaaaaaaaaaaaaaaaaaaaa")}}),
        )
        .await;
    assert_eq!(unknown.status(), 400);
    assert_eq!(unknown.json_body().await["errors"][0]["field"], "input.file");
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[tokio::test]
async fn a_file_deleted_between_create_and_run_fails_the_prediction_plainly() {
    let system = System::start_with(Options { runner: false, notifier: false, ..Options::default() }).await;
    system.register_models_only().await;
    let file = upload(&system, b"soon gone".to_vec()).await;
    let created = system
        .post_json("/v1/models/demo/checksum/predictions", &json!({"input": {"file": file["urls"]["get"]}}))
        .await
        .json_body()
        .await;
    let id = file["id"].as_str().expect("id");
    assert_eq!(system.request(Method::DELETE, &format!("/v1/files/{id}")).send().await.expect("sent").status(), 204);
    system.start_runner();
    let done = system.wait_for_terminal(created["id"].as_str().expect("id"), Duration::from_secs(30)).await;
    assert_eq!(done["status"], "failed");
    assert_eq!(done["error"]["code"], "INPUT_FILE_MISSING");
    assert!(done["error"]["message"].as_str().expect("message").contains(id));
}

#[tokio::test]
async fn expired_uploads_are_deleted_unless_a_running_prediction_uses_them() {
    let system = System::start_with(Options {
        runner: false,
        notifier: false,
        env: vec![("RUNNER_RETENTION_SWEEP_SECONDS", "0.2".into())],
    })
    .await;
    system.register_models_only().await;
    let kept = upload(&system, b"in use".to_vec()).await;
    let gone = upload(&system, b"unused".to_vec()).await;
    system.post_json("/v1/models/demo/checksum/predictions", &json!({"input": {"file": kept["urls"]["get"]}})).await;
    // Both expire now; only the one no prediction waits for goes.
    let records = system.ctx.store().await.database().collection::<bson::Document>("file_records");
    records
        .update_many(bson::doc! {}, bson::doc! { "$set": { "expires_at": bson::DateTime::from_millis(1000) } })
        .await
        .expect("expired");
    let store = system.ctx.store().await;
    let files = system.files().await;
    let sweeper = runner::retention::Sweeper::new(
        store.clone(),
        files.clone(),
        Duration::from_secs(3600),
        Duration::from_secs(3600),
    );
    eventually(Duration::from_secs(10), || async { (sweeper.expire_files(&files).await.done > 0).then_some(()) })
        .await
        .expect("a pass");
    assert_eq!(system.get(&format!("/v1/files/{}", gone["id"].as_str().expect("id"))).await.status(), 404);
    let still = records.find_one(bson::doc! { "_id": kept["id"].as_str().expect("id") }).await.expect("read");
    let postponed =
        still.expect("kept while its prediction waits").get_datetime("expires_at").expect("expiry").timestamp_millis();
    assert!(postponed > bson::DateTime::now().timestamp_millis(), "its expiry moved on");
}

#[tokio::test]
async fn a_file_of_the_default_limit_goes_up_and_comes_back_whole() {
    let system = System::start_with(no_runner()).await;
    const MIB: usize = 100; // API_MAX_FILE_BYTES's default: a download reads 400 GridFS chunks in batches
    let piece =
        |n: usize| bytes::Bytes::from((0..1024 * 1024).map(|i| ((i * 31 + n * 7919) % 251) as u8).collect::<Vec<u8>>());
    let mut expected = Sha256::new();
    (0..MIB).for_each(|n| expected.update(piece(n)));
    let stream = futures::stream::iter((0..MIB).map(move |n| Ok::<_, std::io::Error>(piece(n))));
    let part = multipart::Part::stream_with_length(reqwest::Body::wrap_stream(stream), (MIB * 1024 * 1024) as u64)
        .file_name("big.bin");
    let response = system
        .request(Method::POST, "/v1/files")
        .multipart(multipart::Form::new().part("content", part))
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), 201);
    let file = response.json_body().await;
    let expected = hex(&expected.finalize());
    assert_eq!(file["checksums"]["sha256"], expected);
    let download = system.get(&format!("/v1/files/{}/download", file["id"].as_str().expect("id"))).await;
    assert_eq!(download.status(), 200);
    let mut body = download.bytes_stream();
    let mut got = Sha256::new();
    while let Some(chunk) = futures::TryStreamExt::try_next(&mut body).await.expect("body") {
        got.update(&chunk);
    }
    assert_eq!(hex(&got.finalize()), expected);
}

#[tokio::test]
async fn replicates_filename_and_type_parts_name_and_type_the_file_and_bad_ones_are_400() {
    let system = System::start_with(no_runner()).await;
    let form = multipart::Form::new()
        .text("filename", "cat.png")
        .text("type", "image/png")
        .part("content", multipart::Part::bytes(b"\x89PNG".to_vec()).file_name("blob"));
    let created = system.request(Method::POST, "/replicate/v1/files").multipart(form).send().await.expect("sent");
    assert_eq!(created.status(), 201);
    let file = created.json_body().await;
    assert_eq!((&file["name"], &file["content_type"]), (&json!("cat.png"), &json!("image/png")), "{file}");
    // `null` is how a form sends no value: no name or type then, as for metadata.
    let form = multipart::Form::new().text("type", "null").part("content", multipart::Part::bytes(b"a".to_vec()));
    assert_eq!(system.request(Method::POST, "/v1/files").multipart(form).send().await.expect("sent").status(), 201);
    let long = "n".repeat(256);
    for (part, value) in [("type", "not a type".to_owned()), ("filename", long)] {
        let form = multipart::Form::new().text(part, value).part("content", multipart::Part::bytes(b"a".to_vec()));
        let refused = system.request(Method::POST, "/v1/files").multipart(form).send().await.expect("sent");
        assert_eq!(refused.status(), 400, "{part}");
        assert_eq!(refused.json_body().await["errors"][0]["field"], part);
    }
}
