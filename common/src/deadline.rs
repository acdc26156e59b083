//! A request's deadline, carried by the task that serves it, so the calls it makes can give up
//! when its client no longer waits: reads get what is left of it as their `maxTimeMS` (at most
//! [`crate::store::READ_TIME_LIMIT`]), a batched write drops a document whose deadline passed
//! while it queued ([`crate::store::GroupCommitError::Abandoned`]), and a publish waits no
//! longer than it.
//!
//! The api sets one per request (`API_REQUEST_DEADLINE_SECONDS`); a `Prefer: wait` create
//! moves it by its wait, and an upload clears it (its own limit is the upload's time limit).
//! Code outside such a task (the runner, the notifier, background work) has none and keeps the
//! fixed limits.

use std::{
    future::Future,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::time::Instant;

/// A request's deadline, shared between the task that does its work (which may move it or
/// lift it) and the one that answers its client (which answers when it passes, whatever the
/// work is waiting for).
#[derive(Clone, Debug)]
pub struct Deadline(Arc<Mutex<Option<Instant>>>, Instant);

impl Deadline {
    /// A deadline at `at`, for a request that arrives now.
    pub fn at(at: Instant) -> Self {
        Self(Arc::new(Mutex::new(Some(at))), Instant::now())
    }

    /// When it passes; `None` once lifted.
    pub fn get(&self) -> Option<Instant> {
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn update(&self, change: impl FnOnce(Option<Instant>) -> Option<Instant>) {
        let mut at = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *at = change(*at);
    }
}

tokio::task_local! {
    /// The deadline of the request the current task serves.
    static DEADLINE: Deadline;
}

/// Runs `work` with `deadline` as its task's deadline.
pub async fn within<F: Future>(deadline: Deadline, work: F) -> F::Output {
    DEADLINE.scope(deadline, work).await
}

/// The current task's deadline, if it has one.
pub fn current() -> Option<Instant> {
    DEADLINE.try_with(Deadline::get).ok().flatten()
}

/// When the current task's request arrived (`Prefer: wait` counts from it), if it serves one.
pub fn arrived() -> Option<Instant> {
    DEADLINE.try_with(|d| d.1).ok()
}

/// What is left of the current task's deadline: `None` without one, zero once it passed.
pub fn remaining() -> Option<Duration> {
    current().map(|deadline| deadline.saturating_duration_since(Instant::now()))
}

/// Moves the current task's deadline `by` later (a create about to hold for `Prefer: wait`).
pub fn extend(by: Duration) {
    let _ = DEADLINE.try_with(|d| d.update(|at| at.map(|deadline| deadline + by)));
}

/// Lifts the current task's deadline (an upload, which has a limit of its own).
pub fn clear() {
    let _ = DEADLINE.try_with(|d| d.update(|_| None));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_task_sees_its_deadline_move_and_go_and_other_tasks_see_none() {
        assert_eq!(remaining(), None, "outside a request");
        let deadline = Instant::now() + Duration::from_secs(10);
        let shared = Deadline::at(deadline);
        within(shared.clone(), async {
            assert_eq!(current(), Some(deadline));
            extend(Duration::from_secs(5));
            assert_eq!(current(), Some(deadline + Duration::from_secs(5)));
            assert_eq!(tokio::spawn(async { current() }).await.ok().flatten(), None, "not inherited");
        })
        .await;
        assert_eq!(shared.get(), Some(deadline + Duration::from_secs(5)), "the answering side sees the move");
        within(shared.clone(), async { clear() }).await;
        assert_eq!(shared.get(), None, "and the lift");
        within(Deadline::at(Instant::now() - Duration::from_millis(1)), async {
            assert_eq!(remaining(), Some(Duration::ZERO), "passed");
        })
        .await;
    }

    #[tokio::test]
    async fn a_read_gets_what_is_left_of_the_deadline_within_the_fixed_limit() {
        use crate::store::{READ_TIME_LIMIT, read_limit};
        assert_eq!(read_limit(), READ_TIME_LIMIT, "no request, the fixed limit");
        within(Deadline::at(Instant::now() + Duration::from_secs(60)), async {
            assert_eq!(read_limit(), READ_TIME_LIMIT)
        })
        .await;
        within(Deadline::at(Instant::now() + Duration::from_millis(300)), async {
            let limit = read_limit();
            assert!(limit <= Duration::from_millis(300) && limit > Duration::from_millis(200), "{limit:?}");
        })
        .await;
        within(Deadline::at(Instant::now()), async {
            assert_eq!(read_limit(), Duration::from_millis(1), "passed: fails at once")
        })
        .await;
    }
}
