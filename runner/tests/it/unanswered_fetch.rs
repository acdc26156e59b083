//! A fetch nobody answers: when a cluster node goes down with the leader of a lane's consumer,
//! pull requests sent to it are lost. The scheduler gives up on such a fetch and goes on,
//! instead of waiting for it forever with every free slot of the runner.
//!
//! The lost pull requests are made with a JetStream API under a prefix of the test's own,
//! passed through to the real one except for pull requests while they are being dropped.

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use common::domain::{AccountId, ModelRef};
use futures::StreamExt;
use runner::{
    lanes::Lanes,
    scheduler::{DRAIN, FETCH_TIMEOUT, Scheduler},
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::fixture::Fixture;

/// Serves the JetStream API under `prefix` until the test ends, passing each request on to
/// `$JS.API`, except pull requests while `drop_pulls` is set.
async fn jetstream_proxy(client: async_nats::Client, prefix: String, drop_pulls: Arc<AtomicBool>) {
    let mut requests = client.subscribe(format!("{prefix}.>")).await.expect("subscribe");
    client.flush().await.expect("subscribed");
    tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            let Some(reply) = request.reply.clone() else { continue };
            let Some(api) =
                request.subject.as_str().strip_prefix(&format!("{prefix}.")).map(|r| format!("$JS.API.{r}"))
            else {
                continue;
            };
            if api.starts_with("$JS.API.CONSUMER.MSG.NEXT.") {
                // The stream answers the pull straight to the requester's inbox.
                if !drop_pulls.load(Ordering::SeqCst) {
                    client.publish_with_reply(api, reply, request.payload).await.expect("pass the pull on");
                }
                continue;
            }
            let client = client.clone();
            tokio::spawn(async move {
                if let Ok(answer) = client.request(api, request.payload).await {
                    client.publish(reply, answer.payload).await.ok();
                }
            });
        }
    });
}

#[tokio::test]
async fn a_fetch_nobody_answers_does_not_stop_the_scheduler() {
    let fixture = Fixture::new(&[]).await;
    let client = fixture.bus.client().clone();
    let prefix = format!("lostpulls{}", AccountId::generate().as_str().replace(['-', '_'], ""));
    let drop_pulls = Arc::new(AtomicBool::new(true));
    jetstream_proxy(client.clone(), prefix.clone(), drop_pulls.clone()).await;
    let subjects = fixture.bus.subjects().clone();
    let stream = async_nats::jetstream::with_prefix(client, &prefix)
        .get_stream(subjects.jobs_stream())
        .await
        .expect("the jobs stream, through the proxy");
    let model: ModelRef = "demo/echo".parse().expect("model");
    let lanes = Arc::new(Lanes::new(stream, subjects, Duration::from_secs(30), 5));
    let scheduler = Arc::new(Scheduler::new(1, std::slice::from_ref(&model), 1, &HashMap::new(), lanes));
    let (started, mut starts) = tokio::sync::mpsc::unbounded_channel();
    let shutdown = CancellationToken::new();
    let run = tokio::spawn({
        let (scheduler, shutdown) = (scheduler.clone(), shutdown.clone());
        async move {
            scheduler
                .run(shutdown, move |message, _, slots| started.send((message, slots)).expect("the test listens"))
                .await;
        }
    });

    let account = AccountId::generate();
    let job = fixture.create_of(&account, "demo/echo", json!({"prompt": "held up"})).await;
    let lane =
        common::lane::Lane { model: model.clone(), route: job.route(), account: account.clone(), level: job.priority };
    scheduler.ring(lane.clone(), runner::scheduler::fair_pick::Heard::Doorbell).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(starts.try_recv().is_err(), "its pull request was dropped, so nothing came");

    // The stream answers again. The doorbell of the next job (or the scan) reopens the lane
    // once the lost fetch has been given up on.
    drop_pulls.store(false, Ordering::SeqCst);
    let asked_from = Instant::now();
    let (message, _slots) = loop {
        scheduler.ring(lane.clone(), runner::scheduler::fair_pick::Heard::Doorbell).await;
        match tokio::time::timeout(Duration::from_millis(500), starts.recv()).await {
            Ok(got) => break got.expect("the scheduler runs"),
            Err(_) => assert!(
                asked_from.elapsed() < FETCH_TIMEOUT * 3,
                "the job did not start within {:?}: the scheduler is still waiting for the lost fetch",
                FETCH_TIMEOUT * 3
            ),
        }
    };
    assert!(message.subject.as_str().ends_with(job.id.as_str()), "the job came: {}", message.subject);
    message.ack().await.expect("ack");

    shutdown.cancel();
    // It stops within its drain (it may still take what its lanes announced) and a moment.
    tokio::time::timeout(DRAIN + Duration::from_secs(2), run).await.expect("it stops when told").expect("no panic");
}
