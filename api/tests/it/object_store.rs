//! Files in an S3-compatible store (S3Proxy here), beyond what the Files API tests check on
//! both stores: downloads skip the api with a redirect to a presigned URL, files stay readable
//! across a switch of store, deletes and retention empty the bucket, an upload cut off leaves
//! nothing after the sweep, and a store that is down is a 503 with `Retry-After`.

use std::time::Duration;

use common::{
    domain::AccountId,
    files::{FileStore, Files, NewFile, s3::PART_SIZE},
};
use futures::StreamExt;
use reqwest::{Method, multipart};
use serde_json::Value;
use testkit::{eventually, proxy::TcpProxy};

use crate::harness::{JsonBody, Options, System};

fn on_s3(extra: &[(&'static str, &str)]) -> Options {
    let mut env = vec![("FILES_STORE", "s3".to_owned())];
    env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    Options { runner: false, notifier: false, env }
}

fn sample(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 13 % 253) as u8).collect()
}

async fn upload(system: &System, name: &str, bytes: Vec<u8>) -> Value {
    let part = multipart::Part::bytes(bytes).file_name(name.to_owned()).mime_str("image/png").expect("mime");
    let form = multipart::Form::new().part("content", part);
    let response = system.request(Method::POST, "/v1/files").multipart(form).send().await.expect("sent");
    assert_eq!(response.status(), 201);
    response.json_body().await
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client")
}

fn query_value(url: &str, name: &str) -> Option<String> {
    let url = reqwest::Url::parse(url).ok()?;
    url.query_pairs().find(|(k, _)| k == name).map(|(_, v)| v.into_owned())
}

#[tokio::test]
async fn a_download_answers_a_redirect_to_the_object_that_serves_the_exact_bytes_and_ranges() {
    let system = System::start_with(on_s3(&[])).await;
    let bytes = sample(PART_SIZE + 1234); // a multipart upload of two parts
    let file = upload(&system, "photo.png", bytes.clone()).await;
    let id = file["id"].as_str().expect("id");
    let http = no_redirects();

    // With the key: a redirect, valid for 15 minutes, carrying the file's ETag.
    let bearer = http
        .get(system.url(&format!("/v1/files/{id}/download")))
        .bearer_auth(&system.admin_key)
        .send()
        .await
        .expect("sent");
    assert_eq!(bearer.status(), 307);
    assert_eq!(bearer.headers()["etag"], format!("\"{}\"", file["etag"].as_str().expect("etag")).as_str());
    let location = bearer.headers()["location"].to_str().expect("location").to_owned();
    assert!(location.starts_with(&testkit::s3().endpoint), "{location}");
    assert_eq!(query_value(&location, "X-Amz-Expires").as_deref(), Some("900"));
    let object = http.get(&location).send().await.expect("sent");
    assert_eq!(object.status(), 200);
    assert_eq!(object.headers()["content-type"], "image/png");
    assert_eq!(object.bytes().await.expect("body").to_vec(), bytes);
    let (from, to) = (PART_SIZE - 10, PART_SIZE + 10);
    let part = http.get(&location).header("range", format!("bytes={from}-{to}")).send().await.expect("sent");
    assert_eq!(part.status(), 206);
    assert_eq!(part.bytes().await.expect("body").to_vec(), bytes[from..=to].to_vec(), "across parts");

    // Signed: a redirect that lives no longer than the link.
    let signed = file["urls"]["download"].as_str().expect("signed");
    let expiry: i64 = query_value(signed, "expiry").expect("expiry").parse().expect("n");
    let redirected = http.get(signed).send().await.expect("sent");
    assert_eq!(redirected.status(), 307);
    let location = redirected.headers()["location"].to_str().expect("location").to_owned();
    let lives: i64 = query_value(&location, "X-Amz-Expires").expect("expires").parse().expect("n");
    assert!(lives <= expiry - chrono::Utc::now().timestamp() + 1, "{lives} s outlives the link");
    assert_eq!(http.get(&location).send().await.expect("sent").bytes().await.expect("body").to_vec(), bytes);

    // Not modified and out of range are still the api's answers.
    let cached = http
        .get(system.url(&format!("/v1/files/{id}/download")))
        .bearer_auth(&system.admin_key)
        .header("if-none-match", format!("\"{}\"", file["etag"].as_str().expect("etag")))
        .send()
        .await
        .expect("sent");
    assert_eq!(cached.status(), 304);
    let past = http
        .get(system.url(&format!("/v1/files/{id}/download")))
        .bearer_auth(&system.admin_key)
        .header("range", "bytes=999999999-")
        .send()
        .await
        .expect("sent");
    assert_eq!(past.status(), 416);
}

#[tokio::test]
async fn with_redirects_off_a_file_in_s3_streams_through_the_api() {
    let system = System::start_with(on_s3(&[("FILES_S3_REDIRECT", "false")])).await;
    let bytes = sample(300 * 1024);
    let file = upload(&system, "a.bin", bytes.clone()).await;
    let url = system.url(&format!("/v1/files/{}/download", file["id"].as_str().expect("id")));
    let whole = no_redirects().get(&url).bearer_auth(&system.admin_key).send().await.expect("sent");
    assert_eq!(whole.status(), 200);
    assert_eq!(whole.bytes().await.expect("body").to_vec(), bytes);
    let part = no_redirects()
        .get(&url)
        .bearer_auth(&system.admin_key)
        .header("range", "bytes=10-19")
        .send()
        .await
        .expect("sent");
    assert_eq!(part.status(), 206);
    assert_eq!(part.bytes().await.expect("body").to_vec(), bytes[10..20].to_vec());
}

#[tokio::test]
async fn files_stored_before_a_switch_of_store_stay_readable_from_either() {
    let system = System::start_with(on_s3(&[])).await;
    let on_s3 = system.files().await;
    let on_gridfs = Files::new(&system.ctx.store().await);
    let body = |b: &'static [u8]| futures::stream::once(async move { Ok(bytes::Bytes::from_static(b)) }).boxed();
    let old = on_gridfs.create(new_file(), body(b"kept in gridfs"), u64::MAX).await.expect("stored");
    let new = on_s3.create(new_file(), body(b"kept in s3"), u64::MAX).await.expect("stored");
    assert_eq!(old.store, common::files::FileStoreKind::Gridfs);
    assert_eq!(new.store, common::files::FileStoreKind::S3);
    assert_eq!(on_s3.read_all(&old).await.expect("gridfs file read by an s3 process"), b"kept in gridfs");
    let record = on_s3.get(&new.id).await.expect("read").expect("recorded");
    assert_eq!(on_s3.read_all(&record).await.expect("s3 file"), b"kept in s3");
    assert!(on_gridfs.read_all(&record).await.is_err(), "a process without S3 settings cannot read it");
}

fn new_file() -> NewFile {
    NewFile {
        account_id: AccountId::generate(),
        name: "f.bin".into(),
        content_type: "application/octet-stream".into(),
        metadata: String::new(),
        expires_at: None,
        prediction_id: None,
    }
}

#[tokio::test]
async fn deletes_and_retention_leave_no_object_in_the_bucket() {
    let system = System::start_with(on_s3(&[])).await;
    let deleted = upload(&system, "deleted.bin", sample(PART_SIZE + 1)).await;
    upload(&system, "expired.bin", sample(1000)).await;
    let files = system.files().await;
    assert_eq!(files.s3().expect("s3").list_keys().await.expect("listed").len(), 2);

    let id = deleted["id"].as_str().expect("id");
    assert_eq!(system.request(Method::DELETE, &format!("/v1/files/{id}")).send().await.expect("sent").status(), 204);
    let records = system.ctx.store().await.database().collection::<bson::Document>("file_records");
    records
        .update_many(bson::doc! {}, bson::doc! { "$set": { "expires_at": bson::DateTime::from_millis(1000) } })
        .await
        .expect("expired");
    let store = system.ctx.store().await;
    let sweeper =
        runner::retention::Sweeper::new(store, files.clone(), Duration::from_secs(3600), Duration::from_secs(3600));
    assert_eq!(sweeper.expire_files(&files).await.failed, 0, "swept");

    assert_eq!(files.s3().expect("s3").list_keys().await.expect("listed"), Vec::<String>::new());
    assert_eq!(system.get("/v1/files").await.json_body().await["total_count"], 0);
}

/// A body that sends `len` bytes and then never ends, like a client whose api was killed.
fn stalled_body(len: usize) -> common::files::ByteStream<'static> {
    let bytes = bytes::Bytes::from(sample(len));
    futures::stream::once(async move { Ok(bytes) }).chain(futures::stream::pending()).boxed()
}

#[tokio::test]
async fn an_upload_cut_off_leaves_nothing_in_either_store_after_the_sweep() {
    for store in ["gridfs", "s3"] {
        let system = System::start_with(Options {
            runner: false,
            notifier: false,
            env: vec![("FILES_STORE", store.to_owned())],
        })
        .await;
        let files = system.files().await;
        let writer = files.clone();
        let cut_off =
            tokio::spawn(async move { writer.put_bytes("big.bin", stalled_body(2 * PART_SIZE), u64::MAX).await });
        let unfinished = system.ctx.store().await.database().collection::<bson::Document>("unfinished_uploads");
        // Wait until bytes have reached the store: GridFS chunks, or a part of a multipart upload.
        let noted = eventually(Duration::from_secs(30), || async {
            let note = unfinished.find_one(bson::doc! {}).await.ok().flatten()?;
            let id = common::domain::FileId::parse(note.get_str("_id").ok()?).ok()?;
            let upload_id = note.get_str("multipart_upload_id").ok().map(str::to_owned);
            let stored = match (&upload_id, files.s3()) {
                (Some(upload_id), Some(s3)) => s3.multipart_parts_kept(&id, upload_id).await.ok()? > 0,
                _ => system.stored_pieces().await > 0,
            };
            stored.then_some((id, upload_id))
        })
        .await
        .unwrap_or_else(|| panic!("{store}: the upload reached the store"));
        cut_off.abort(); // the process dies mid-upload
        let _ = cut_off.await;

        assert_eq!(files.sweep_unfinished(100).await.expect("swept"), 0, "{store}: a recent upload is left alone");
        let (id, upload_id) = noted;
        assert_eq!(upload_id.is_some(), store == "s3", "{store}: a multipart upload exactly on S3");
        // S3Proxy may refuse the abort (500) while it still writes the part the killed
        // upload was sending: the note is kept and the next sweep tries again, as documented.
        let swept = std::sync::atomic::AtomicUsize::new(0);
        let gone = eventually(Duration::from_secs(30), || async {
            let now = files.sweep_unfinished_older_than(Duration::ZERO, 100).await.expect("swept");
            swept.fetch_add(now, std::sync::atomic::Ordering::Relaxed);
            (unfinished.count_documents(bson::doc! {}).await.ok()? == 0).then_some(())
        })
        .await;
        assert!(gone.is_some(), "{store}: the unfinished upload was swept");
        assert_eq!(swept.into_inner(), 1, "{store}");

        assert_eq!(system.stored_pieces().await, 0, "{store}: no byte left");
        assert_eq!(unfinished.count_documents(bson::doc! {}).await.expect("count"), 0, "{store}: the note is gone");
        if let (Some(s3), Some(upload_id)) = (files.s3(), upload_id.as_deref()) {
            let kept = s3.multipart_parts_kept(&id, upload_id).await.expect("asked");
            assert_eq!(kept, 0, "the multipart upload was aborted");
        }
    }
}

#[tokio::test]
async fn a_finished_upload_is_never_swept() {
    let system = System::start_with(on_s3(&[])).await;
    let file = upload(&system, "kept.bin", sample(1000)).await;
    let files = system.files().await;
    // As if the api died between storing the record and removing the note.
    let unfinished = system.ctx.store().await.database().collection::<bson::Document>("unfinished_uploads");
    let note = bson::doc! { "_id": file["id"].as_str().expect("id"), "store": "s3", "started_at": bson::DateTime::from_millis(0) };
    unfinished.insert_one(note).await.expect("noted");
    assert_eq!(files.sweep_unfinished(100).await.expect("swept"), 0);
    assert_eq!(unfinished.count_documents(bson::doc! {}).await.expect("count"), 0, "the stale note is dropped");
    let url = file["urls"]["download"].as_str().expect("signed");
    assert_eq!(system.http().get(url).send().await.expect("sent").bytes().await.expect("body").to_vec(), sample(1000));
}

#[tokio::test]
async fn an_upload_the_store_will_not_discard_stays_noted_and_holds_up_no_other() {
    let proxy = TcpProxy::start(testkit::host_port(&testkit::s3().endpoint)).await.expect("proxy");
    let endpoint = format!("http://{}", proxy.addr());
    let system = System::start_with(on_s3(&[("S3_ENDPOINT", endpoint.as_str())])).await;
    let files = system.files().await;
    let unfinished = system.ctx.store().await.database().collection::<bson::Document>("unfinished_uploads");
    let on_s3_id = common::domain::FileId::generate();
    let on_gridfs_id = common::domain::FileId::generate();
    let old = bson::DateTime::from_millis(0);
    // The S3 one is older, so a sweep that stopped at a failure would never reach the other.
    let notes = [
        bson::doc! { "_id": on_s3_id.as_str(), "store": "s3", "multipart_upload_id": "gone", "started_at": old },
        bson::doc! { "_id": on_gridfs_id.as_str(), "store": "gridfs", "started_at": bson::DateTime::from_millis(1) },
    ];
    unfinished.insert_many(notes).await.expect("noted");

    proxy.cut();
    assert_eq!(files.sweep_unfinished_older_than(Duration::ZERO, 100).await.expect("swept"), 1, "the GridFS one");
    let kept = unfinished.find_one(bson::doc! {}).await.expect("read").expect("one note kept");
    assert_eq!(kept.get_str("_id").expect("id"), on_s3_id.as_str(), "the one S3 refused stays noted");
    assert_eq!(kept.get_i32("sweeps_failed").expect("counted"), 1);
    assert!(kept.get_datetime("started_at").expect("date") > &old, "it waits behind newer uploads");
    assert_eq!(files.sweep_unfinished(100).await.expect("swept"), 0, "not tried again at once");

    proxy.restore();
    assert_eq!(
        files.sweep_unfinished_older_than(Duration::ZERO, 100).await.expect("swept"),
        1,
        "swept once S3 answers"
    );
    assert_eq!(unfinished.count_documents(bson::doc! {}).await.expect("count"), 0);
}

#[tokio::test]
async fn the_store_down_is_a_503_with_retry_after_and_back_up_it_serves_again() {
    let proxy = TcpProxy::start(testkit::host_port(&testkit::s3().endpoint)).await.expect("proxy");
    let endpoint = format!("http://{}", proxy.addr());
    let system = System::start_with(on_s3(&[("S3_ENDPOINT", endpoint.as_str()), ("FILES_S3_REDIRECT", "false")])).await;
    let file = upload(&system, "a.bin", sample(2000)).await;
    let download = system.url(&format!("/v1/files/{}/download", file["id"].as_str().expect("id")));

    proxy.cut();
    let part = multipart::Part::bytes(sample(1000)).file_name("b.bin");
    let refused = system
        .request(Method::POST, "/v1/files")
        .multipart(multipart::Form::new().part("content", part))
        .send()
        .await
        .expect("sent");
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["content-type"], "application/problem+json");
    assert!(refused.headers().contains_key("retry-after"));
    let unread = system.http().get(&download).bearer_auth(&system.admin_key).send().await.expect("sent");
    assert_eq!(unread.status(), 503);
    assert!(unread.headers().contains_key("retry-after"));

    proxy.restore();
    let read = system.http().get(&download).bearer_auth(&system.admin_key).send().await.expect("sent");
    assert_eq!(read.status(), 200);
    assert_eq!(read.bytes().await.expect("body").to_vec(), sample(2000));
    assert_eq!(system.get("/v1/files").await.json_body().await["total_count"], 1, "the refused upload is not listed");
}

#[tokio::test]
async fn a_store_unreachable_at_start_does_not_stop_the_api_and_files_work_once_it_answers() {
    let proxy = TcpProxy::start(testkit::host_port(&testkit::s3().endpoint)).await.expect("proxy");
    proxy.cut();
    let endpoint = format!("http://{}", proxy.addr());
    let system = System::start_with(on_s3(&[("S3_ENDPOINT", endpoint.as_str())])).await;
    let part = || multipart::Part::bytes(sample(1000)).file_name("b.bin");
    let refused = system
        .request(Method::POST, "/v1/files")
        .multipart(multipart::Form::new().part("content", part()))
        .send()
        .await
        .expect("sent");
    assert_eq!(refused.status(), 503);

    proxy.restore();
    let stored = eventually(Duration::from_secs(20), || async {
        let form = multipart::Form::new().part("content", part());
        let response = system.request(Method::POST, "/v1/files").multipart(form).send().await.ok()?;
        (response.status() == 201).then_some(())
    })
    .await;
    assert!(stored.is_some(), "uploads work once the store answers (its bucket created then)");
}

/// The bytes the store serves for file `id`.
async fn object_of(files: &Files, id: &common::domain::FileId) -> Vec<u8> {
    let s3 = files.s3().expect("an S3 store");
    let url = s3.presigned_get(id, "f.bin", "application/octet-stream", Duration::from_secs(60)).expect("a URL");
    let response = reqwest::get(url).await.expect("read the object");
    assert_eq!(response.status(), 200);
    response.bytes().await.expect("its bytes").to_vec()
}

/// Whether the write of file `id` (not yet recorded, so still noted as unfinished) was a
/// multipart upload: the note keeps its upload id.
async fn was_multipart(system: &System, id: &common::domain::FileId) -> bool {
    let notes = system.ctx.store().await.database().collection::<bson::Document>("unfinished_uploads");
    let note = notes.find_one(bson::doc! {"_id": id.as_str()}).await.expect("read").expect("the upload is noted");
    note.get_str("multipart_upload_id").is_ok()
}

fn in_chunks(bytes: Vec<u8>) -> common::files::ByteStream<'static> {
    let chunks: Vec<_> = bytes.chunks(64 * 1024).map(|c| Ok(bytes::Bytes::copy_from_slice(c))).collect();
    futures::stream::iter(chunks).boxed()
}

// A file whose length is declared (as a Cog server's upload declares it) goes to the store in
// one PutObject (S3_SINGLE_PUT_MAX_BYTES; the tests' S3Proxy has it at S3's limit), streamed,
// and is held to that length: a body longer or shorter than declared is refused and leaves no
// object, and one declared past the limit is refused unread. Undeclared, it is a multipart
// upload as before.
#[tokio::test]
async fn a_file_of_declared_length_is_one_put_held_to_that_length() {
    use common::files::{FileBody, FileStoreError, FilesError};
    let system = System::start_with(on_s3(&[])).await;
    let files = system.files().await;
    let bytes = sample(PART_SIZE + 123_457);
    let length = bytes.len() as u64;

    let whole = files.put_bytes("f.bin", FileBody::sized(in_chunks(bytes.clone()), length), u64::MAX).await;
    let whole = whole.expect("stored");
    assert_eq!(object_of(&files, &whole.id).await, bytes, "the bytes, whole");
    assert!(!was_multipart(&system, &whole.id).await, "declared, one PutObject");
    assert_eq!(whole.written.size, length);

    let parts = files.put_bytes("f.bin", in_chunks(bytes.clone()), u64::MAX).await.expect("stored");
    assert_eq!(object_of(&files, &parts.id).await, bytes);
    assert!(was_multipart(&system, &parts.id).await, "undeclared, a multipart upload");
    assert_eq!((parts.written.sha256, parts.written.md5), (whole.written.sha256, whole.written.md5));

    let s3 = files.s3().expect("an S3 store");
    let kept = s3.list_keys().await.expect("list").len();
    for declared in [length + 1, length - 1] {
        let refused = files.put_bytes("f.bin", FileBody::sized(in_chunks(bytes.clone()), declared), u64::MAX).await;
        match refused {
            Err(FilesError::Bytes(FileStoreError::Body(e))) => assert!(e.to_string().contains("declared"), "{e}"),
            other => panic!("{declared} bytes declared for {length}: {other:?}"),
        }
    }
    let unread: common::files::ByteStream<'static> =
        futures::stream::poll_fn(|_| -> std::task::Poll<Option<std::io::Result<bytes::Bytes>>> {
            panic!("a body declared past the limit is not read")
        })
        .boxed();
    let too_large = files.put_bytes("f.bin", FileBody::sized(unread, length), length - 1).await;
    assert!(matches!(too_large, Err(FilesError::Bytes(FileStoreError::TooLarge { .. }))), "{too_large:?}");
    // S3Proxy removes a cut-off write's temporary file once it sees the request end.
    let after = eventually(Duration::from_secs(10), || async {
        let keys = s3.list_keys().await.ok()?.len();
        (keys == kept).then_some(keys)
    })
    .await;
    assert_eq!(after, Some(kept), "the refused bodies left no object");
}

#[tokio::test]
async fn the_console_lets_images_come_from_the_store_its_downloads_redirect_to() {
    let csp = |system: &System| {
        let url = system.url("/login");
        async move {
            let page = reqwest::get(url).await.expect("sent");
            page.headers()["content-security-policy"].to_str().expect("text").to_owned()
        }
    };
    // An output image's link answers 307 to its object: the page must allow that origin.
    let redirecting = System::start_with(on_s3(&[])).await;
    let bytes = sample(64);
    let file = upload(&redirecting, "photo.png", bytes).await;
    let id = file["id"].as_str().expect("id");
    let answer = no_redirects()
        .get(redirecting.url(&format!("/v1/files/{id}/download")))
        .bearer_auth(&redirecting.admin_key)
        .send()
        .await
        .expect("sent");
    assert_eq!(answer.status(), 307);
    let location = reqwest::Url::parse(answer.headers()["location"].to_str().expect("text")).expect("a URL");
    let origin = location.origin().ascii_serialization();
    let policy = csp(&redirecting).await;
    assert!(policy.contains(&format!("img-src 'self' {origin};")), "{policy}");
    // Streamed through the api, files come from its own origin only.
    let streaming = System::start_with(on_s3(&[("FILES_S3_REDIRECT", "false")])).await;
    let policy = csp(&streaming).await;
    assert!(policy.contains("img-src 'self';"), "{policy}");
}
