//! Shedding load: the api works on at most `API_MAX_IN_FLIGHT` requests at once, and answers
//! a request past that bound at once, before it touches MongoDB or NATS: 503 problem+json with
//! `Retry-After: 1`. Past its capacity a service that queues every request answers all of them
//! late (clients time out and retry, so the queue grows: an overload that outlives the load);
//! one that sheds answers most of them in time and tells the rest when to come back.
//!
//! What a slot covers: a request from the moment it reaches the routes until its handler
//! returns the response head. A streamed body (a download, an SSE stream) is sent after that,
//! outside the bound; an upload is read inside it. A `Prefer: wait` create gives its slot
//! back once its prediction is stored and its job sent ([`release_while_waiting`]): a held
//! wait costs a subscription, not work, and waits have their own cap (`API_MAX_WAITS`).
//! `/health`, `/ready` and `/metrics` are never shed.
//!
//! A shed request costs as little as it can: it is not logged one by one (the request log
//! leaves 503s out, see [`crate::app`]); the first shed of a second logs how many were shed in
//! the last second that shed any, and `http_requests_total{status="503"}` counts them all.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicU64, Ordering},
};

use crate::problem::{Problem, ProblemKind};
use axum::{
    extract::{Request, State},
    http::{HeaderValue, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;

/// The `Retry-After` of a shed request, in seconds.
pub const RETRY_AFTER_SECONDS: u32 = 1;

/// The bound on requests in flight, shared by every route of one api replica, and the count of what it shed.
#[derive(Clone)]
pub struct InFlight {
    slots: Arc<Semaphore>,
    bound: usize,
    log: Arc<ShedLog>,
}

impl InFlight {
    /// At most `bound` requests at once.
    pub fn new(bound: usize) -> Self {
        let bound = bound.max(1);
        Self { slots: Arc::new(Semaphore::new(bound)), bound, log: Arc::default() }
    }

    /// Requests holding a slot now (`api_requests_in_flight`).
    pub fn working(&self) -> usize {
        self.bound.saturating_sub(self.slots.available_permits())
    }
}

/// Sheds counted per second, for one log line a second at most.
#[derive(Default)]
struct ShedLog {
    /// The second (since the Unix epoch) being counted.
    second: AtomicU64,
    /// Sheds in that second.
    count: AtomicU64,
}

impl ShedLog {
    /// Counts one shed; the first of a new second logs the count of the one before.
    fn count(&self) {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let before = self.second.swap(now, Ordering::Relaxed);
        if before == now {
            self.count.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let shed = self.count.swap(1, Ordering::Relaxed);
        if shed > 0 {
            let at = chrono::DateTime::from_timestamp(i64::try_from(before).unwrap_or_default(), 0).unwrap_or_default();
            tracing::warn!(shed, second = %at.format("%H:%M:%S"), "requests shed in one second at the in-flight bound (503 with Retry-After)");
        }
    }
}

tokio::task_local! {
    /// The slot of the request this task serves, so the handler can give it back early.
    static SLOT: Arc<Mutex<Option<OwnedSemaphorePermit>>>;
}

/// Middleware: runs the request in a slot, or answers 503 at once when none is free.
pub async fn shed(State(in_flight): State<InFlight>, request: Request, next: Next) -> Response {
    if matches!(request.uri().path(), "/health" | "/ready" | "/metrics") {
        return next.run(request).await;
    }
    let Ok(permit) = in_flight.slots.try_acquire_owned() else {
        in_flight.log.count();
        return overloaded();
    };
    SLOT.scope(Arc::new(Mutex::new(Some(permit))), next.run(request)).await
}

/// Gives the current request's slot back (a create about to hold for `Prefer: wait`).
pub fn release_while_waiting() {
    let _ = SLOT.try_with(|slot| slot.lock().unwrap_or_else(|p| p.into_inner()).take());
}

fn overloaded() -> Response {
    let problem = Problem::new(
        ProblemKind::Unavailable,
        format!("The service is at capacity; retry in {RETRY_AFTER_SECONDS} second."),
    );
    let mut response = ApiError::Problem(problem).into_response();
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
    response
}
