//! Every request's handler runs in its own task, so it finishes even when its client goes away
//! or the request timeout answers first; only its response is then thrown away. The task
//! carries the request's deadline (`API_REQUEST_DEADLINE_SECONDS`, see [`common::deadline`]):
//! past it, the reads it makes stop on the server and a prediction still queued for its write
//! is not written, so work nobody waits for any more is dropped between steps, never halfway
//! through one.
//!
//! Why: dropping an operation of the MongoDB driver halfway is not free. A dropped operation
//! closes its connection, and a dropped request still waiting for a pooled connection stays in
//! the pool's wait queue, which the driver (mongodb 3.9) clears one entry per pool event or
//! maintenance tick (every 500 ms). After a burst of disconnecting clients the next request
//! waited ~0.5 s per abandoned waiter: measured 28–55 s. Running handlers to completion also
//! keeps multi-step writes whole (a stored prediction always gets its job).

use std::time::Duration;

use tracing::Instrument;

use axum::{
    extract::{Request, State},
    middleware::Next,
    response::{IntoResponse, Response},
};

/// How long a request's work may go on (`API_REQUEST_DEADLINE_SECONDS`).
#[derive(Clone, Copy, Debug)]
pub struct RequestDeadline(pub Duration);

/// Middleware: runs the rest of the stack for `request` in a spawned task (inside the
/// request's span, so the handler's spans and logs stay in its trace, and within its
/// deadline) and awaits it. A panic in the handler is resumed here, so the panic layer outside
/// still answers 500.
pub async fn run_to_completion(
    State(RequestDeadline(limit)): State<RequestDeadline>,
    request: Request,
    next: Next,
) -> Response {
    let deadline = tokio::time::Instant::now() + limit;
    let work = common::deadline::within(deadline, next.run(request));
    match tokio::spawn(work.instrument(tracing::Span::current())).await {
        Ok(response) => response,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => {
            // Only a runtime shutting down cancels the task.
            tracing::warn!(error = %e, "request task cancelled");
            axum::http::StatusCode::SERVICE_UNAVAILABLE.into_response()
        }
    }
}
