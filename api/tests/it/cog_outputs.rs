//! Real models' outputs in Replicate's shapes (docs/outputs.md): real Cog servers
//! (coglet 0.23.1, no Docker) returning a list of files (`List[Path]`), a token stream
//! (`Iterator[str]`), a stream of files (`Iterator[Path]`) and an object holding a file
//! (a `BaseModel`), run through the api and a runner and read on both surfaces: the model's
//! JSON value on `/replicate/v1`, the interface's string on `/v1`, every file a stored file
//! behind a link of the surface (never a `data:` URI), and each version's own `Output` schema.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use testkit::{
    cog::{CogMode, CogServer},
    eventually,
};

use crate::harness::{JsonBody, Options, System};

/// The four fixtures, served by one runner.
async fn system_with_output_models() -> (System, Vec<CogServer>) {
    let names = ["images", "tokens", "frames", "annotate"];
    let servers = futures::future::join_all(names.iter().map(|n| CogServer::start_ready(n, CogMode::Predict))).await;
    let cog = names.iter().zip(&servers).map(|(n, s)| format!("acme/{n}={}", s.url)).collect::<Vec<_>>().join(",");
    let system =
        System::start_with(Options { notifier: false, env: vec![("RUNNER_COG", cog)], ..Options::default() }).await;
    for name in names {
        let registered = eventually(Duration::from_secs(90), || async {
            (system.get(&format!("/v1/models/acme/{name}")).await.status() == 200).then_some(())
        })
        .await;
        assert!(registered.is_some(), "the runner registered acme/{name}");
    }
    (system, servers)
}

/// Runs `model` on `input` through `root` (`/v1` or `/replicate/v1`) and returns the ended
/// prediction as that surface shows it.
async fn run_on(system: &System, root: &str, model: &str, input: Value) -> Value {
    let created = system
        .request(Method::POST, &format!("{root}/models/{model}/predictions"))
        .json(&json!({"input": input}))
        .send()
        .await
        .expect("sent");
    assert_eq!(created.status(), 201, "a create of {model}");
    let id = created.json_body().await["id"].as_str().expect("an id").to_owned();
    let done = system.wait_for_terminal(&id, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    system.get(&format!("{root}/predictions/{id}")).await.json_body().await
}

/// The bytes behind a file link, read with the admin key.
async fn bytes_of(system: &System, url: &str) -> Vec<u8> {
    let response = system.http().get(url).bearer_auth(&system.admin_key).send().await.expect("sent");
    assert_eq!(response.status(), 200, "{url}");
    response.bytes().await.expect("the body").to_vec()
}

/// Whether `url` is a signed download of a file on `root`.
fn is_link(url: &Value, root: &str, base: &str) -> bool {
    url.as_str().and_then(|u| u.split_once('?')).is_some_and(|(path, query)| {
        path.starts_with(&format!("{base}{root}/files/")) && path.ends_with("/download") && query.contains("signature=")
    })
}

#[tokio::test]
async fn real_models_outputs_keep_their_shape_on_replicate_are_strings_on_v1_and_declare_their_schema() {
    let (system, _servers) = system_with_output_models().await;
    let base = system.url("");

    // List[Path]: an array of links; on /v1 the compact JSON text of the links.
    let images = run_on(&system, "/replicate/v1", "acme/images", json!({"count": 2, "size": 3})).await;
    let links = images["output"].as_array().expect("a list of files").clone();
    assert_eq!(links.len(), 2, "{images}");
    for link in &links {
        assert!(is_link(link, "/replicate/v1", &base), "{link}");
        assert!(bytes_of(&system, link.as_str().expect("a link")).await.starts_with(b"\x89PNG"));
    }
    assert_ne!(links[0], links[1], "each file is a file of its own");
    let on_v1 = system.get(&format!("/v1/predictions/{}", images["id"].as_str().expect("id"))).await.json_body().await;
    let text = on_v1["output"].as_str().expect("a string on /v1");
    let parsed: Value = serde_json::from_str(text).expect("compact JSON text");
    assert!(parsed.as_array().is_some_and(|l| l.len() == 2 && l.iter().all(|u| is_link(u, "/v1", &base))), "{text}");
    assert!(!text.contains("data:") && !text.contains(' '), "{text}");

    // Iterator[str]: the tokens as an array; on /v1 the text.
    let tokens = run_on(&system, "/replicate/v1", "acme/tokens", json!({"text": "one two three", "delay": 0})).await;
    assert_eq!(tokens["output"], json!(["one ", "two ", "three"]));
    let on_v1 = system.get(&format!("/v1/predictions/{}", tokens["id"].as_str().expect("id"))).await.json_body().await;
    assert_eq!(on_v1["output"], "one two three");

    // Iterator[Path]: an array of links, each file's own bytes.
    let frames = run_on(&system, "/replicate/v1", "acme/frames", json!({"count": 3, "delay": 0})).await;
    let frames = frames["output"].as_array().expect("a list of files").clone();
    assert_eq!(frames.len(), 3);
    for (i, link) in frames.iter().enumerate() {
        assert!(is_link(link, "/replicate/v1", &base), "{link}");
        assert_eq!(bytes_of(&system, link.as_str().expect("a link")).await, format!("frame {i}\n").into_bytes());
    }

    // An object: its fields as the model returned them, the file a link; on /v1 compact JSON.
    let annotated = run_on(&system, "/replicate/v1", "acme/annotate", json!({"prompt": "red fox"})).await;
    let output = &annotated["output"];
    assert_eq!(output["caption"], "a picture of red fox");
    assert_eq!(output["scores"], json!([1.0, 1.0]));
    assert!(is_link(&output["image"], "/replicate/v1", &base), "{output}");
    assert_eq!(bytes_of(&system, output["image"].as_str().expect("a link")).await, b"mask of red fox\n");
    let id = annotated["id"].as_str().expect("id");
    let on_v1 = system.get(&format!("/v1/predictions/{id}")).await.json_body().await;
    let parsed: Value = serde_json::from_str(on_v1["output"].as_str().expect("a string on /v1")).expect("JSON text");
    assert_eq!(parsed["caption"], "a picture of red fox");
    assert!(is_link(&parsed["image"], "/v1", &base), "{parsed}");

    // Each version's `Output` schema is the model's own: an iterator is marked as one.
    let schema_of = |model: &'static str| {
        let system = &system;
        async move {
            let m = system.get(&format!("/replicate/v1/models/{model}")).await.json_body().await;
            m["latest_version"]["openapi_schema"]["components"]["schemas"]["Output"].clone()
        }
    };
    let tokens = schema_of("acme/tokens").await;
    assert_eq!((tokens["type"].as_str(), tokens["x-cog-array-type"].as_str()), (Some("array"), Some("iterator")));
    let images = schema_of("acme/images").await;
    assert_eq!(images["type"], "array");
    assert_eq!(images["items"]["format"], "uri");
    assert!(images.get("x-cog-array-type").is_none(), "a list is not an iterator: {images}");
    let annotate = schema_of("acme/annotate").await;
    assert!(annotate.to_string().contains("\"uri\""), "the object's file field is a uri: {annotate}");
}
