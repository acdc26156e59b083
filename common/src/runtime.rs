//! The runtime a service runs on, and where its own loops run.
//!
//! [`build`] reads tokio's own `TOKIO_WORKER_THREADS`. At 1 (what `deploy/local/up`, the
//! compose file and the Kubernetes ConfigMap set) the service gets tokio's current-thread
//! scheduler: one thread runs every task and polls the I/O driver itself, with none of the
//! multi-thread scheduler's cross-thread bookkeeping for a pool of one (shared run-queue
//! atomics, idle-worker checks, waking the parked driver). Measured in alternating cost
//! batches (10 each, `bench cost`): 541 -> 471 µs of CPU per prediction, the api 157 -> 117.
//! Any other value, or none, is the multi-thread runtime with that many workers (one per core
//! by default), for a service given cores of its own.
//!
//! Under the multi-thread runtime the future handed to `block_on` runs on the process's main
//! thread, beside the worker threads rather than on one: a service loop awaited there (the
//! runner's scheduler, the notifier's pull loop, the api's accept loop) would pass every
//! message to and from the workers across threads, each time with an eventfd write and a
//! context switch. [`on_workers`] runs the service as a task on the workers instead.

use std::{future::Future, process::ExitCode};

use tokio::runtime::{Builder, Runtime};

/// Tokio's variable for a runtime's worker threads (its multi-thread builder reads it too).
pub const WORKER_THREADS: &str = "TOKIO_WORKER_THREADS";

/// The runtime for this process, chosen by [`WORKER_THREADS`] (see the module doc).
pub fn build() -> std::io::Result<Runtime> {
    build_for(std::env::var(WORKER_THREADS).ok().as_deref())
}

/// Runs a service's `main` future to its exit code on the runtime [`build`] chooses; a
/// runtime that cannot be built is reported on stderr and fails the process.
pub fn block_on(main: impl Future<Output = ExitCode>) -> ExitCode {
    match build() {
        Ok(runtime) => runtime.block_on(main),
        Err(e) => {
            eprintln!("starting the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The runtime for a [`WORKER_THREADS`] value: the current-thread scheduler for exactly one
/// worker, else the multi-thread one (which reads the variable itself for its pool size).
fn build_for(workers: Option<&str>) -> std::io::Result<Runtime> {
    let mut builder = match workers.map(str::trim) {
        Some("1") => Builder::new_current_thread(),
        _ => Builder::new_multi_thread(),
    };
    builder.enable_all().build()
}

/// Runs `service` as a task on the runtime's worker threads and returns its output; a panic
/// in it goes on unwinding here, as if it had been awaited in place.
pub async fn on_workers<F>(service: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match tokio::spawn(service).await {
        Ok(output) => output,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

#[cfg(test)]
mod tests {
    use tokio::runtime::RuntimeFlavor;

    use super::*;

    #[test]
    fn one_worker_thread_is_the_current_thread_scheduler() {
        let runtime = build_for(Some("1")).expect("a current-thread runtime");
        assert_eq!(runtime.handle().runtime_flavor(), RuntimeFlavor::CurrentThread);
        // Timers and I/O are enabled: a service sleeps and listens on it.
        let port = runtime.block_on(async {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback listener");
            listener.local_addr().expect("its address").port()
        });
        assert_ne!(port, 0);
    }

    #[test]
    fn more_workers_or_none_set_is_the_multi_thread_scheduler() {
        for workers in [None, Some("2"), Some("not a number")] {
            let runtime = build_for(workers).expect("a multi-thread runtime");
            assert_eq!(runtime.handle().runtime_flavor(), RuntimeFlavor::MultiThread, "{workers:?}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn the_service_runs_on_a_worker_thread_not_the_awaiting_one() {
        // A `#[tokio::test]` body, like `main`'s, runs on the thread that called `block_on`.
        let awaiting = std::thread::current().id();
        let service = on_workers(async { std::thread::current().id() }).await;
        assert_ne!(service, awaiting);
    }

    #[tokio::test]
    #[should_panic(expected = "boom")]
    async fn a_panic_in_the_service_reaches_the_caller() {
        on_workers(async { panic!("boom") }).await;
    }
}
