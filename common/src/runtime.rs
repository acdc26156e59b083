//! Where a service's own loops run. Under `#[tokio::main]` the future handed to `block_on`
//! runs on the process's main thread, beside the worker threads rather than on one: a service
//! loop awaited there (the runner's scheduler, the notifier's pull loop, the api's accept loop)
//! passes every message to and from the workers across threads, each time with an eventfd
//! write and a context switch. [`on_workers`] runs the service as a task on the workers, so a
//! service started with `TOKIO_WORKER_THREADS=1` really runs on one thread.

use std::future::Future;

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
    use super::*;

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
