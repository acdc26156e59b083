//! A file input reaching a real Cog model server (coglet 0.23.1 from PyPI, no Docker) through
//! the api and a runner: the runner hands the server a signed download URL of this api, the
//! server fetches it without a key, and the model answers the SHA-256 and size of what it read.

use std::time::Duration;

use reqwest::{Method, multipart};
use serde_json::json;
use sha2::{Digest, Sha256};
use testkit::{
    cog::{CogMode, CogServer},
    eventually,
};

use crate::harness::{JsonBody, Options, System};

#[tokio::test]
async fn a_cog_model_with_a_path_input_sees_the_exact_bytes_of_an_upload_and_of_a_data_uri() {
    let server = CogServer::start_ready("hash", CogMode::Predict).await;
    let system = System::start_with(Options {
        notifier: false,
        env: vec![("RUNNER_COG", format!("acme/hash={}", server.url))],
        ..Options::default()
    })
    .await;
    let registered = eventually(Duration::from_secs(90), || async {
        (system.get("/v1/models/acme/hash").await.status() == 200).then_some(())
    })
    .await;
    assert!(registered.is_some(), "the runner registered acme/hash");

    let bytes: Vec<u8> = (0..300 * 1024).map(|i| (i * 13 % 256) as u8).collect();
    let expected = format!("{:x} {}", Sha256::digest(&bytes), bytes.len());
    let part = multipart::Part::bytes(bytes.clone())
        .file_name("input.bin")
        .mime_str("application/octet-stream")
        .expect("mime");
    let upload = system
        .request(Method::POST, "/v1/files")
        .multipart(multipart::Form::new().part("content", part))
        .send()
        .await
        .expect("sent");
    assert_eq!(upload.status(), 201);
    let file = upload.json_body().await;

    let done = system.run("acme/hash", json!({"file": file["urls"]["get"].as_str().expect("url")})).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["output"], expected, "the model read the uploaded bytes");

    use base64::Engine;
    let small = b"inline through a data URI";
    let inline = format!("data:text/plain;base64,{}", base64::engine::general_purpose::STANDARD.encode(small));
    let done = system.run("acme/hash", json!({"file": &inline})).await;
    assert_eq!(done["output"], format!("{:x} {}", Sha256::digest(small), small.len()));
}
