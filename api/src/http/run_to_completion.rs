//! Every request's handler runs in its own task, so it finishes even when its client goes away
//! or its deadline answers first; only its response is then thrown away. The task carries the
//! request's deadline (`API_REQUEST_DEADLINE_SECONDS`, see [`common::deadline`]): past it, the
//! reads it makes stop on the server and a prediction still queued for its write is not
//! written, so work nobody waits for any more is dropped between steps, never halfway through
//! one. The client is answered by the deadline (and [`ANSWER_GRACE`]) whatever the work waits
//! for: a write already sent to a stalled database holds the task, not the answer.
//!
//! Why: dropping an operation of the MongoDB driver halfway is not free. A dropped operation
//! closes its connection, and a dropped request still waiting for a pooled connection stays in
//! the pool's wait queue, which the driver (mongodb 3.9) clears one entry per pool event or
//! maintenance tick (every 500 ms). After a burst of disconnecting clients the next request
//! waited ~0.5 s per abandoned waiter: measured 28–55 s. Running handlers to completion also
//! keeps multi-step writes whole (a stored prediction always gets its job).

use std::time::Duration;

use common::deadline::Deadline;
use tracing::Instrument;

use axum::{
    extract::{Request, State},
    middleware::Next,
    response::{IntoResponse, Response},
};

use crate::error::{ApiError, RETRY_AFTER_SECONDS};

/// How long a request's work may go on (`API_REQUEST_DEADLINE_SECONDS`).
#[derive(Clone, Copy, Debug)]
pub struct RequestDeadline(pub Duration);

/// How long past its deadline a request whose work is still under way is answered: the work
/// itself gives up at the deadline where it can (reads, queued writes, publishes) and answers
/// its own 503; this answers for it when a step it cannot leave (a write already sent) holds it.
pub const ANSWER_GRACE: Duration = Duration::from_millis(500);

/// Middleware: runs the rest of the stack for `request` in a spawned task (inside the
/// request's span, so the handler's spans and logs stay in its trace, and within its
/// deadline) and awaits it, at most until the deadline (as the task moves it) and
/// [`ANSWER_GRACE`]: then the client gets a 503 with `Retry-After`, and the task goes on to the
/// end of its step. A panic in the handler is resumed here, so the panic layer outside still
/// answers 500.
pub async fn run_to_completion(
    State(RequestDeadline(limit)): State<RequestDeadline>,
    request: Request,
    next: Next,
) -> Response {
    let deadline = Deadline::at(tokio::time::Instant::now() + limit);
    let work = common::deadline::within(deadline.clone(), next.run(request));
    let mut task = tokio::spawn(work.instrument(tracing::Span::current()));
    // Until the deadline is lifted (an upload, with a time limit of its own): then the work
    // is waited for.
    while let Some(at) = deadline.get() {
        match tokio::time::timeout_at(at + ANSWER_GRACE, &mut task).await {
            Ok(joined) => return answer(joined),
            // The task moved its deadline (`Prefer: wait`) or lifted it: wait on.
            Err(_) if deadline.get() != Some(at) => {}
            Err(_) => {
                tracing::warn!(
                    deadline_ms = limit.as_millis() as u64,
                    "the request's work outlasted its deadline; answered 503 while it finishes"
                );
                return ApiError::Busy {
                    detail: format!(
                        "The service could not finish this request within its deadline ({} s); retry in \
                         {RETRY_AFTER_SECONDS} seconds. A create sent again with the same Idempotency-Key is \
                         never made twice.",
                        limit.as_secs()
                    ),
                    retry_after: RETRY_AFTER_SECONDS,
                }
                .into_response();
            }
        }
    }
    answer(task.await)
}

fn answer(joined: Result<Response, tokio::task::JoinError>) -> Response {
    match joined {
        Ok(response) => response,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => {
            // Only a runtime shutting down cancels the task.
            tracing::warn!(error = %e, "request task cancelled");
            axum::http::StatusCode::SERVICE_UNAVAILABLE.into_response()
        }
    }
}
