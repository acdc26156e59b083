//! The built-in models end to end through the api, their files, and retention.

use std::time::Duration;

use serde_json::{Value, json};
use testkit::eventually;

use crate::harness::{JsonBody, Options, System};

async fn file(system: &System, url: &str, key: &str) -> reqwest::Response {
    system.http().get(url).bearer_auth(key).send().await.expect("sent")
}

#[tokio::test]
async fn text_to_image_writes_a_png_whose_signed_link_opens_without_a_key_and_whose_file_is_its_accounts() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let done = system.run("demo/text-to-image", json!({"prompt": "a red fox", "width": 64, "height": 48})).await;
    assert_eq!(done["status"], "succeeded");
    assert_eq!(done["capability"], "text-to-image");
    let url = done["output"].as_str().expect("a file URL");
    assert!(url.starts_with(&system.url("/v1/files/file_")), "{url}");

    let response = file(&system, url, &system.admin_key).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "image/png");
    let bytes = response.bytes().await.expect("body");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let dim = |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    assert_eq!((dim(16), dim(20)), (64, 48), "IHDR width and height");

    // The output's link is a signed download: it opens without a key (an `<img src>`, a
    // client's plain fetch), as Replicate's output URLs do, and only as signed.
    let anonymous = system.http().get(url).send().await.expect("sent");
    assert_eq!(anonymous.status(), 200, "opens without a key");
    assert_eq!(anonymous.bytes().await.expect("body"), bytes);
    let tampered = url.replace("signature=", "signature=x");
    assert_eq!(system.http().get(&tampered).send().await.expect("sent").status(), 401, "a tampered link is refused");
    // The file itself is its account's: unsigned, another account's key finds nothing.
    let unsigned = url.split('?').next().expect("a path");
    let other = system.bootstrap_account("other").await;
    assert_eq!(file(&system, unsigned, &other).await.status(), 404);
    assert_eq!(file(&system, unsigned, &system.admin_key).await.status(), 200);
    assert_eq!(system.get("/v1/files/file_aaaaaaaaaaaaaaaaaaaaaaaaaa").await.status(), 404);

    let too_big = system
        .post_json("/v1/models/demo/text-to-image/predictions", &json!({"input": {"prompt": "x", "width": 1025}}))
        .await;
    assert_eq!(too_big.status(), 400);
}

#[tokio::test]
async fn text_to_video_writes_an_animated_gif() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let done =
        system.run("demo/text-to-video", json!({"prompt": "waves", "frames": 4, "width": 40, "height": 30})).await;
    assert_eq!(done["status"], "succeeded");
    assert_eq!(done["capability"], "text-to-video");
    let response = file(&system, done["output"].as_str().expect("url"), &system.admin_key).await;
    assert_eq!(response.headers()["content-type"], "image/gif");
    let bytes = response.bytes().await.expect("body");
    assert_eq!(&bytes[..6], b"GIF89a");
    assert_eq!((u16::from_le_bytes([bytes[6], bytes[7]]), u16::from_le_bytes([bytes[8], bytes[9]])), (40, 30));
    let frames = bytes.windows(2).filter(|w| w == &[0x21, 0xf9]).count();
    assert_eq!(frames, 4, "one graphic control extension per frame");
}

#[tokio::test]
async fn demo_fail_fails_with_its_message() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let done = system.run("demo/fail", json!({"message": "out of ideas"})).await;
    assert_eq!(done["status"], "failed");
    assert_eq!(done["error"], json!({"code": "MODEL_ERROR", "message": "out of ideas"}));
    assert_eq!(done["logs"], "about to fail: out of ideas\n");
    assert!(done["metrics"]["predict_time"].as_f64().is_some());
}

#[tokio::test]
async fn after_retention_input_output_logs_and_files_are_gone() {
    let system = System::start_with(Options {
        notifier: false,
        env: vec![("RETENTION_SECONDS", "1".into()), ("RUNNER_RETENTION_SWEEP_SECONDS", "0.2".into())],
        ..Options::default()
    })
    .await;
    let done = system.run("demo/text-to-image", json!({"prompt": "ephemeral", "width": 16, "height": 16})).await;
    let url = done["output"].as_str().expect("url").to_owned();
    let id = done["id"].as_str().expect("id").to_owned();
    let removed = eventually(Duration::from_secs(15), || async {
        let p = system.get(&format!("/v1/predictions/{id}")).await.json_body().await;
        (p["data_removed"] == true).then_some(p)
    })
    .await
    .expect("data removed after the retention period");
    assert_eq!(removed["input"], json!({}));
    assert_eq!(removed["output"], Value::Null);
    assert_eq!(removed["logs"], "");
    assert_eq!(removed["status"], "succeeded", "the outcome itself is kept");
    assert_eq!(file(&system, &url, &system.admin_key).await.status(), 404);
}
