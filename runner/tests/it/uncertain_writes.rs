//! Writes whose wait for the majority timed out (`writeConcernError` code 64: applied on the
//! primary, unconfirmed) while majority reads still show the prediction as it was before: the
//! runner settles them on the primary, never by the lagging read. The stand-in has no
//! replicas, so a wire-level proxy ([`mongo_faults`]) gives the write its error and answers the
//! runner's majority reads of the prediction with its earlier document.

use std::time::Duration;

use bson::{Document, doc};
use common::domain::{Prediction, PredictionStatus};
use mongo_faults::{Command, Fault, MongoFaults};
use serde_json::json;

use crate::{cancel::next_completed, fixture::Fixture};

/// A fixture and a runner of demo/sleep that reaches MongoDB through a fault proxy.
async fn runner_behind_faults() -> (Fixture, MongoFaults) {
    let fixture = Fixture::new(&[]).await;
    let real = fixture.vars["MONGODB_URI"].clone();
    let faults = MongoFaults::start(testkit::host_port(&real)).await.expect("proxy");
    fixture.start_runner_with("demo/sleep", &[("MONGODB_URI", faults.uri(&real).as_str())]);
    (fixture, faults)
}

/// `p`'s document as stored now (read directly, not through the proxy).
async fn document_of(fixture: &Fixture, p: &Prediction) -> Document {
    let coll = fixture.store.database().collection::<Document>("predictions");
    coll.find_one(doc! { "_id": p.id.as_str() }).await.expect("read").expect("stored")
}

/// Answers every majority read of the whole of `p` (not a `local` one, not a status check's
/// projection) with `stale`, as a lagging majority snapshot would.
fn majority_reads_lag(faults: &MongoFaults, p: &Prediction, stale: Document) {
    let id = p.id.to_string();
    faults.inject(1_000, Fault::Answer(vec![stale]), move |c: &Command| {
        c.name == "find"
            && c.collection == "predictions"
            && c.read_concern() != Some("local")
            && !c.body.contains_key("projection")
            && c.mentions(&id)
    });
}

#[tokio::test]
async fn a_result_whose_majority_acknowledgment_timed_out_is_settled_on_the_primary_and_announced() {
    let (fixture, faults) = runner_behind_faults().await;
    faults.inject(1, Fault::Unconfirmed, |c| {
        c.name == "update" && c.collection == "predictions" && c.mentions("completed_at")
    });
    let p = fixture.create("demo/sleep", json!({"seconds": 3})).await;
    let mut events = fixture.bus.client().subscribe(fixture.bus.subjects().events(&p.id)).await.expect("subscribe");
    let running =
        fixture.wait_until(&p.id, Duration::from_secs(60), |p| p.status == PredictionStatus::Processing).await;
    majority_reads_lag(&faults, &running, document_of(&fixture, &running).await);

    // The result's write applied, its answer said unconfirmed; its retry matches nothing, and
    // a majority read would still say `processing`: the result would be dropped unannounced.
    let completed = next_completed(&mut events, Duration::from_secs(60)).await.expect("its completed event");
    assert_eq!(completed.prediction.map(|p| p.status), Some(PredictionStatus::Succeeded.into()));
    let injected = faults.injected();
    assert_eq!(injected.first(), Some(&("update".to_owned(), "predictions".to_owned())), "{injected:?}");
    let stored = fixture.current(&p.id).await;
    assert_eq!(stored.status, PredictionStatus::Succeeded);
}

#[tokio::test]
async fn a_start_whose_majority_acknowledgment_timed_out_is_settled_on_the_primary_and_runs_once() {
    let (fixture, faults) = runner_behind_faults().await;
    let p = fixture.store_prediction("demo/sleep", json!({"seconds": 1}), Duration::from_secs(300)).await;
    faults.inject(1, Fault::Unconfirmed, |c| {
        c.name == "update" && c.collection == "predictions" && c.mentions("held_by")
    });
    majority_reads_lag(&faults, &p, document_of(&fixture, &p).await);
    fixture.publish_job(&p).await;

    // The start applied, its answer said unconfirmed; the job's next delivery finds it
    // `processing` under this very job on the primary (a majority read would say `starting`
    // on every delivery, until the job ran out of them) and takes it over from itself.
    let done = fixture.wait_until(&p.id, Duration::from_secs(120), |p| p.status.is_terminal()).await;
    assert_eq!(done.status, PredictionStatus::Succeeded, "{:?}", done.error);
    assert_eq!(faults.injected().first(), Some(&("update".to_owned(), "predictions".to_owned())));
}
