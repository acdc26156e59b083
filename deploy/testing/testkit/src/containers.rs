//! Servers from containers (`mongo:7`, `nats:2 -js`) when a Docker engine answers.
//!
//! The containers carry fixed names and are reused by later test runs (testcontainers'
//! reusable containers), because a test binary cannot remove them at exit: at most these two
//! are left running, and each test still uses its own database and prefix.

use std::{os::unix::net::UnixStream, path::Path};

use testcontainers::{
    GenericImage, ImageExt, ReuseDirective,
    core::{IntoContainerPort, WaitFor},
    runners::SyncRunner,
};

/// Whether a Docker engine answers on `DOCKER_HOST` or the default socket.
pub(super) fn docker_available() -> bool {
    match std::env::var("DOCKER_HOST") {
        Ok(host) if !host.is_empty() => {
            host.strip_prefix("unix://").is_none_or(|socket| UnixStream::connect(socket).is_ok())
        }
        _ => Path::new("/var/run/docker.sock").exists() && UnixStream::connect("/var/run/docker.sock").is_ok(),
    }
}

pub(super) fn mongo() -> String {
    // Test commands on: the tests inject failures with the `failCommand` failpoint.
    let container = GenericImage::new("mongo", "7")
        .with_wait_for(WaitFor::message_on_stdout("Waiting for connections"))
        .with_exposed_port(27017.tcp())
        .with_cmd(["mongod", "--setParameter", "enableTestCommands=1"])
        .with_container_name("prediction-service-test-mongo")
        .with_reuse(ReuseDirective::Always)
        .start()
        .expect("start mongo:7");
    let port = container.get_host_port_ipv4(27017).expect("mongo port");
    std::mem::forget(container);
    format!("mongodb://127.0.0.1:{port}")
}

pub(super) fn nats() -> String {
    let container = GenericImage::new("nats", "2")
        .with_wait_for(WaitFor::message_on_stderr("Server is ready"))
        .with_exposed_port(4222.tcp())
        .with_cmd(["-js"])
        .with_container_name("prediction-service-test-nats")
        .with_reuse(ReuseDirective::Always)
        .start()
        .expect("start nats:2");
    let port = container.get_host_port_ipv4(4222).expect("nats port");
    std::mem::forget(container);
    format!("nats://127.0.0.1:{port}")
}
