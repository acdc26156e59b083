//! One trace per prediction: the spans the api, runner and notifier produce for one create
//! request share its trace id, with the parent links of the path it took (captured in memory,
//! see `testkit::telemetry::init_for_tests`).

use std::time::Duration;

use opentelemetry::trace::{SpanId, TraceId};
use serde_json::json;
use testkit::eventually;

use receiver::Receiver;

use crate::harness::System;

fn random_hex(bytes: usize) -> String {
    (0..bytes).map(|_| format!("{:02x}", rand::random::<u8>())).collect()
}

#[tokio::test]
async fn one_trace_runs_from_the_create_request_through_the_job_to_the_webhook_attempt() {
    let system = System::start().await;
    let receiver = Receiver::start().await;
    let (trace, caller) = (random_hex(16), random_hex(8));
    let body =
        json!({"input": {"prompt": "traced"}, "webhook": receiver.url(), "webhook_events_filter": ["completed"]});
    let created = system
        .http()
        .post(system.url("/v1/models/demo/echo/predictions"))
        .bearer_auth(&system.admin_key)
        .header("traceparent", format!("00-{trace}-{caller}-01"))
        .json(&body)
        .send()
        .await
        .expect("sent");
    assert_eq!(created.status(), 201);
    let hook = eventually(Duration::from_secs(20), || async { receiver.of_event("completed").into_iter().next() })
        .await
        .expect("the completed webhook");
    let sent_traceparent = hook.header("traceparent").to_owned();
    assert!(sent_traceparent.starts_with(&format!("00-{trace}-")), "the receiver sees the trace: {sent_traceparent}");

    let trace_id = TraceId::from_hex(&trace).expect("hex");
    let names = ["request", "job", "model_call", "webhook", "webhook_attempt"];
    let spans = eventually(Duration::from_secs(10), || async {
        let spans: Vec<_> = testkit::telemetry::captured_spans()
            .into_iter()
            .filter(|s| s.span_context.trace_id() == trace_id)
            .collect();
        let all_named = names.iter().all(|n| spans.iter().any(|s| s.name == *n));
        // The attempt's webhook span ends after it (once the attempt is recorded).
        let attempt_parent = spans.iter().find(|s| s.name == "webhook_attempt").map(|s| s.parent_span_id);
        let parent_ended = spans.iter().any(|s| Some(s.span_context.span_id()) == attempt_parent);
        (all_named && parent_ended).then_some(spans)
    })
    .await
    .unwrap_or_else(|| panic!("spans named {names:?} in trace {trace}"));
    let one = |name: &str| spans.iter().find(|s| s.name == name).expect("present");
    let id_of = |name: &str| one(name).span_context.span_id();
    let within = |id: SpanId| spans.iter().any(|s| s.span_context.span_id() == id);

    assert_eq!(one("request").parent_span_id, SpanId::from_hex(&caller).expect("hex"), "continues the caller's span");
    assert!(within(one("job").parent_span_id), "the job's parent is a span of the create request");
    assert_ne!(one("job").parent_span_id, id_of("job"));
    assert_eq!(one("model_call").parent_span_id, id_of("job"), "the model call runs inside the job");
    // The job and the spans inside it (the model call, the event publishes).
    let runner_spans: Vec<SpanId> = std::iter::once(id_of("job"))
        .chain(spans.iter().filter(|s| s.parent_span_id == id_of("job")).map(|s| s.span_context.span_id()))
        .collect();
    for webhook in spans.iter().filter(|s| s.name == "webhook") {
        assert!(runner_spans.contains(&webhook.parent_span_id), "each event's webhook span follows the job");
    }
    let attempt_parent = one("webhook_attempt").parent_span_id;
    assert!(
        spans.iter().any(|s| s.name == "webhook" && s.span_context.span_id() == attempt_parent),
        "the attempt runs inside its event's webhook span"
    );
    assert_eq!(
        sent_traceparent,
        format!("00-{trace}-{}-01", id_of("webhook_attempt")),
        "the receiver's parent is the attempt"
    );
}
