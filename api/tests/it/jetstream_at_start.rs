//! A service that starts while JetStream cannot answer yet (a three-node cluster still
//! electing its meta leader, a server still starting) waits for its streams, rather than
//! exiting at the first stream request that times out (`Bus::ensure_streams_at_start`, which
//! every service's start calls through `common::connect`). Found by the fault suite: its
//! three-node row's api once exited 5 s after it started, on "jetstream request timed out".

use std::{
    net::TcpStream,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use common::{bus::Bus, subjects::Subjects};

/// A nats-server of this test, stopped when dropped (a failing assertion leaves none behind).
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A nats-server on `port`, with JetStream (its store under `dir`) or without.
fn nats_server(port: u16, jetstream: Option<&std::path::Path>) -> Server {
    let binary = testkit::installed("NATS_SERVER");
    let mut command = Command::new(binary);
    command.args(["-a", "127.0.0.1", "-p", &port.to_string()]);
    if let Some(dir) = jetstream {
        command.arg("-js").arg("-sd").arg(dir);
    }
    let child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start nats-server");
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nats-server did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
    Server(child)
}

#[tokio::test]
async fn streams_are_made_once_jetstream_answers_rather_than_failing_the_start() {
    let port = testkit::free_port();
    let dir = std::env::temp_dir().join(format!("ps-test-js-at-start-{}-{port}", std::process::id()));
    // First a server without JetStream: a stream request finds nobody to answer it.
    let without = nats_server(port, None);
    let url = format!("nats://127.0.0.1:{port}");
    let subjects = Subjects::new("jsstart").expect("a prefix");
    let bus = Bus::connect(&url, subjects.clone(), "jetstream-at-start").await.expect("connect");
    let starting = tokio::spawn({
        let bus = bus.clone();
        async move { bus.ensure_streams_at_start().await }
    });
    // Waited on for as long as it is away (nothing to observe but that the start has not
    // ended: a failed start would end it at once).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!starting.is_finished(), "the start ended while JetStream was away: {:?}", starting.await);

    // Then JetStream comes, on the same address; the client reconnects by itself.
    drop(without);
    let with = nats_server(port, Some(&dir));
    let made = tokio::time::timeout(Duration::from_secs(60), starting).await;
    let made = made.expect("the start ends within its wait").expect("the task ran");
    assert!(made.is_ok(), "the streams were made: {made:?}");
    let jetstream = async_nats::jetstream::new(async_nats::connect(&url).await.expect("connect"));
    for stream in [subjects.jobs_stream(), subjects.events_stream()] {
        assert!(jetstream.get_stream(&stream).await.is_ok(), "{stream} exists");
    }
    drop(with);
    let _ = std::fs::remove_dir_all(&dir);
}
