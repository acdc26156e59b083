//! Retention's sweeps isolate failures: an item that fails (here, files whose records name an
//! object store this system does not have, so their bytes cannot be deleted) is logged and
//! passed over, and every other item of every sweep is still done in the same pass.

use std::time::Duration;

use common::{
    domain::{FileId, FileStoreKind, PredictionId},
    store::{FileRecord, ModelVersionRecord, model_versions::TrainedFrom},
};
use serde_json::json;

use crate::harness::{JsonBody, Options, System};

fn undeletable(prediction: &common::domain::Prediction, expires_at: Option<bson::DateTime>) -> FileRecord {
    FileRecord {
        id: FileId::generate(),
        account_id: prediction.account_id.clone(),
        name: "stuck.bin".into(),
        content_type: "application/octet-stream".into(),
        size: 1,
        sha256: String::new(),
        md5: String::new(),
        metadata: String::new(),
        created_at: bson::DateTime::now(),
        expires_at,
        prediction_id: expires_at.is_none().then(|| prediction.id.clone()),
        store: FileStoreKind::S3,
        payload: false,
    }
}

#[tokio::test]
async fn an_item_that_fails_holds_up_no_other_item_of_any_sweep() {
    let system = System::start_with(Options { notifier: false, ..Options::default() }).await;
    let mut ended = Vec::new();
    for n in 0..3 {
        let done = system.run("demo/echo", json!({"prompt": format!("p{n}")})).await;
        ended.push(PredictionId::parse(done["id"].as_str().expect("id")).expect("an id"));
    }
    let store = system.ctx.store().await;
    let first = store.predictions().get(&ended[0]).await.expect("read").expect("stored");
    // The oldest prediction has an output file that cannot be deleted, and the earliest
    // expired upload is one too: each comes first in its sweep.
    let stuck_output = undeletable(&first, None);
    let stuck_upload = undeletable(&first, Some(bson::DateTime::from_millis(1)));
    store.file_records().insert(&stuck_output).await.expect("an output record");
    store.file_records().insert(&stuck_upload).await.expect("an upload record");
    let mut uploads = Vec::new();
    for n in 0..3 {
        let form = reqwest::multipart::Form::new()
            .part("content", reqwest::multipart::Part::bytes(vec![n; 10]).file_name("a.bin"));
        let created = system.request(reqwest::Method::POST, "/v1/files").multipart(form).send().await.expect("upload");
        uploads.push(created.json_body().await["id"].as_str().expect("a file id").to_owned());
    }
    let records = store.database().collection::<bson::Document>("file_records");
    let expired = bson::doc! { "$set": { "expires_at": bson::DateTime::from_millis(1000) } };
    records.update_many(bson::doc! { "_id": { "$in": &uploads } }, expired.clone()).await.expect("expired");
    // The third upload is a trained version's weights whose keeping was never written.
    let weights = FileId::parse(&uploads.pop().expect("three")).expect("a file id");
    let version = ModelVersionRecord {
        id: "v-trained".into(),
        model: "test-account/tuned".parse().expect("a model"),
        capability: "text-generation".into(),
        input_schema_json: "{}".into(),
        created_at: bson::DateTime::now(),
        training_input_schema_json: None,
        output_schema_json: None,
        trained_from: Some(TrainedFrom {
            model: "acme/tune".parse().expect("a model"),
            version: "base".into(),
            training: PredictionId::generate(),
            weights: weights.clone(),
        }),
    };
    store.model_versions().record_version(&version).await.expect("a version");

    let sweeper =
        runner::retention::Sweeper::new(store.clone(), system.files().await, Duration::ZERO, Duration::from_secs(3600));
    let swept = sweeper.pass().await;

    assert_eq!(swept.failed, 2, "the two stuck items failed, and only they: {swept:?}");
    for id in &ended[1..] {
        let p = store.predictions().get(id).await.expect("read").expect("stored");
        assert!(p.data_removed, "{id}: cleared though an older one failed");
    }
    let p = store.predictions().get(&ended[0]).await.expect("read").expect("stored");
    assert!(!p.data_removed, "its files were not all deleted, so its data is kept for the next pass");
    for id in &uploads {
        assert_eq!(system.get(&format!("/v1/files/{id}")).await.status(), 404, "{id} expired and deleted");
    }
    let stuck = store.file_records().get(&stuck_upload.id).await.expect("read").expect("kept");
    let later = stuck.expires_at.expect("still expiring").timestamp_millis();
    assert!(later > bson::DateTime::now().timestamp_millis(), "postponed behind the others");
    let kept = store.file_records().get(&weights).await.expect("read").expect("weights a version names are kept");
    assert_eq!(kept.expires_at, None, "kept for good");
}
