//! One clock for the progress flushes of every prediction running here: a tick every
//! [`crate::execute::FLUSH_INTERVAL`] that each running job waits for.
//!
//! One clock rather than a timer per job: a timer that becomes the runtime's earliest wakes its
//! driver through an eventfd as it is set, and a short job would set one only to drop it. A
//! job stores its progress at most once per tick, the first at the next tick after it starts.
//! While no job listens the clock stops, and the next job to listen starts it again: an idle
//! runner does not wake for it.

use std::{sync::Arc, time::Duration};

use tokio::sync::{Notify, watch};

/// The clock; it ticks until it is dropped.
pub struct FlushClock {
    ticks: watch::Receiver<()>,
    /// Rung when a job starts listening, so a stopped clock starts again.
    listening: Arc<Notify>,
}

impl FlushClock {
    /// Starts a clock ticking every `interval` while a job listens.
    pub fn start(interval: Duration) -> Self {
        let (tick, ticks) = watch::channel(());
        let listening = Arc::new(Notify::new());
        let heard = listening.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(interval);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            every.tick().await;
            loop {
                // Only the clock's own receiver: nobody listens.
                if tick.receiver_count() <= 1 {
                    tokio::select! {
                        () = heard.notified() => every.reset(),
                        () = tick.closed() => return,
                    }
                    continue;
                }
                tokio::select! {
                    _ = every.tick() => tick.send_replace(()),
                    () = tick.closed() => return,
                }
            }
        });
        Self { ticks, listening }
    }

    /// The ticks from now on (none already past).
    pub fn ticks(&self) -> Ticks {
        let mut ticks = self.ticks.clone();
        ticks.mark_unchanged();
        self.listening.notify_one();
        Ticks(ticks)
    }
}

/// A job's view of the clock.
pub struct Ticks(watch::Receiver<()>);

impl Ticks {
    /// Waits for the next tick (forever once the clock is gone).
    pub async fn next(&mut self) {
        if self.0.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;
    use tokio::time::Instant;

    use super::*;

    const EVERY: Duration = Duration::from_millis(500);

    #[tokio::test(start_paused = true)]
    async fn every_job_waits_for_the_next_tick_of_the_one_clock() {
        let clock = FlushClock::start(EVERY);
        let began = Instant::now();
        let mut early = clock.ticks();
        early.next().await;
        assert_eq!(began.elapsed(), EVERY);
        tokio::time::sleep(EVERY / 5).await;
        let mut late = clock.ticks();
        assert!(late.next().now_or_never().is_none(), "a tick before it subscribed is not its own");
        late.next().await;
        early.next().await;
        assert_eq!(began.elapsed(), EVERY * 2, "both on the same tick");
    }

    #[tokio::test(start_paused = true)]
    async fn a_job_that_falls_behind_gets_one_tick_not_a_burst() {
        let clock = FlushClock::start(EVERY);
        let mut ticks = clock.ticks();
        tokio::time::sleep(EVERY * 3 + EVERY / 2).await;
        ticks.next().await;
        assert!(ticks.next().now_or_never().is_none(), "the missed ticks are one");
    }
}
