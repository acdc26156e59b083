//! Output files a real Cog server (coglet 0.23.1) uploads to the runner (`--upload-url` to the
//! runner's callback receiver, `PUT /upload/{name}`): each is streamed into the file store as
//! a file of the prediction's account, and the output names the stored files, in the model's
//! shape.

use std::time::Duration;

use common::{
    domain::{FileId, PredictionStatus},
    files::Files,
};
use serde_json::{Value, json};
use testkit::{
    cog::{CogMode, CogServer},
    eventually, free_port,
};

use crate::fixture::Fixture;

/// A Cog server of fixture `name` uploading to a runner that serves it as `acme/{name}`.
async fn uploading_runner(fixture: &Fixture, name: &str) -> CogServer {
    let port = free_port();
    let upload_url = format!("http://127.0.0.1:{port}/upload/");
    let server = CogServer::start_ready_uploading(name, CogMode::Predict, Some(&upload_url)).await;
    let cog = format!("acme/{name}={}", server.url);
    let bind = format!("127.0.0.1:{port}");
    fixture.start_runner_with("acme/*", &[("RUNNER_COG", cog.as_str()), ("RUNNER_COG_CALLBACK_BIND", bind.as_str())]);
    let model = format!("acme/{name}").parse().expect("model");
    let registered =
        eventually(Duration::from_secs(60), || async { fixture.store.models().get(&model).await.ok().flatten() }).await;
    assert!(registered.is_some(), "the runner registered acme/{name}");
    server
}

/// The stored file a string of a stored output names.
fn file_of(url: &Value) -> FileId {
    let url = url.as_str().expect("a URL");
    assert!(url.contains("/v1/files/"), "a stored file's URL, not {url}");
    FileId::parse(url.rsplit('/').next().expect("an id")).expect("a file id")
}

#[tokio::test]
async fn uploaded_output_files_stream_into_the_store_and_the_output_names_them() {
    let fixture = Fixture::new(&[]).await;
    let _server = uploading_runner(&fixture, "images").await;
    // Two files of 3 MiB each: more than one GridFS chunk and one S3 part apart.
    let p = fixture.create("acme/images", json!({"count": 2, "kib": 3072})).await;
    let done = fixture.wait_until(&p.id, Duration::from_secs(60), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Succeeded, "{:?}", done.error);
    let items = done.output.as_ref().and_then(Value::as_array).expect("a list").clone();
    assert_eq!(items.len(), 2);
    let files = Files::new(&fixture.store);
    let mut names = Vec::new();
    for item in &items {
        let info = files.get(&file_of(item)).await.expect("read").expect("stored");
        assert_eq!(info.size, 3072 * 1024);
        assert_eq!((&info.account_id, &info.prediction_id), (&p.account_id, &Some(p.id.clone())));
        // coglet 0.23.1 lists uploaded files in the order their uploads finished, so each is
        // matched by its name: out-{i}.bin holds the byte i.
        let i: u8 = info.name.trim_start_matches("out-").trim_end_matches(".bin").parse().expect("out-{i}.bin");
        let bytes = files.read_all(&info).await.expect("read");
        assert!(bytes.iter().all(|b| *b == i), "{} holds its own bytes", info.name);
        names.push(info.name);
    }
    names.sort();
    assert_eq!(names, ["out-0.bin", "out-1.bin"]);
}

// coglet declares each upload's length: on S3 a file past one part goes in one PutObject
// (S3_SINGLE_PUT_MAX_BYTES, at S3's limit for the tests' S3Proxy), held to that length.
#[tokio::test]
async fn an_uploaded_file_past_one_part_reaches_s3_whole() {
    let ctx_env = testkit::TestContext::new().s3_env();
    let env: Vec<(&str, &str)> = ctx_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let fixture = Fixture::new(&env).await;
    let _server = uploading_runner(&fixture, "images").await;
    let kib = 7 * 1024 + 3;
    let p = fixture.create("acme/images", json!({"count": 1, "kib": kib})).await;
    let done = fixture.wait_until(&p.id, Duration::from_secs(60), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Succeeded, "{:?}", done.error);
    let items = done.output.as_ref().and_then(Value::as_array).expect("a list").clone();
    let config =
        common::config::CommonConfig::from_env(&common::config::Env::from_fn(|k| fixture.vars.get(k).cloned()))
            .expect("configuration");
    let files = Files::open(&fixture.store, &config.files).await.expect("the file store opens");
    let info = files.get(&file_of(&items[0])).await.expect("read").expect("stored");
    assert_eq!(info.store, common::files::FileStoreKind::S3);
    assert_eq!(info.size, kib as i64 * 1024);
    let bytes = files.read_all(&info).await.expect("read");
    assert_eq!(bytes.len(), kib * 1024);
    assert!(bytes.iter().all(|b| *b == 0), "out-0.bin holds the byte 0");
}

#[tokio::test]
async fn an_upload_of_a_run_the_runner_is_not_doing_is_refused() {
    let fixture = Fixture::new(&[]).await;
    let port = free_port();
    let bind = format!("127.0.0.1:{port}");
    let server = CogServer::start_ready("echo", CogMode::Predict).await;
    let cog = format!("acme/echo={}", server.url);
    fixture.start_runner_with("acme/*", &[("RUNNER_COG", cog.as_str()), ("RUNNER_COG_CALLBACK_BIND", bind.as_str())]);
    let url = format!("http://127.0.0.1:{port}/upload/x.bin");
    let answer = eventually(Duration::from_secs(60), || async {
        reqwest::Client::new().put(&url).header("x-prediction-id", "psnotarun").body("x").send().await.ok()
    })
    .await
    .expect("the receiver answers");
    assert_eq!(answer.status(), 404);
    let answer = reqwest::Client::new().put(&url).body("x").send().await.expect("sent");
    assert_eq!(answer.status(), 400, "an upload names its prediction");
}
