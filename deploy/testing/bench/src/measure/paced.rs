//! Calls made alone, at a fixed rate (an open loop), and the load tool's CPU per call: what a
//! client pays for a call when it was idle before it, as in the end-to-end phase at 200/s.
//! Back to back or 8 at a time (the baselines' levels) a client stays awake between calls and
//! pays for its wake-ups once per batch; 5 ms apart every call pays them.
//!
//! The CPU is read from the scheduler's nanosecond accounting (`/proc/self/task/*/schedstat`):
//! a few hundred calls of tens of microseconds each are too little for the 10 ms ticks of
//! `/proc/self/stat`.

use std::time::Duration;

use futures::{StreamExt, stream::FuturesUnordered};
use tokio::time::{Instant, MissedTickBehavior, interval};

use crate::measure::rate::Measured;

/// The rate calls are paced at: the end-to-end phase whose CPU is held to 4 × the floor.
pub const PACED_RATE: u32 = 200;

/// Starts `op(n)` `per_second` times a second for `seconds`, each on schedule whether or not
/// the ones before have answered, and waits for the last. Returns the calls answered per
/// second and the load tool's CPU per call.
pub async fn paced<F, Fut>(seconds: u64, per_second: u32, op: F) -> anyhow::Result<Measured>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let calls = seconds * u64::from(per_second);
    let mut ticks = interval(Duration::from_secs(1) / per_second);
    // A late tick starts its call at once and the schedule keeps its times, as an open loop.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let cpu_before = own_cpu_seconds()?;
    let started = Instant::now();
    let mut in_flight = FuturesUnordered::new();
    let mut issued = 0;
    while issued < calls || !in_flight.is_empty() {
        tokio::select! {
            _ = ticks.tick(), if issued < calls => {
                in_flight.push(op(issued));
                issued += 1;
            }
            Some(done) = in_flight.next() => done?,
        }
    }
    Ok(Measured {
        per_second: calls as f64 / started.elapsed().as_secs_f64(),
        client_cpu_us: (own_cpu_seconds()? - cpu_before) * 1e6 / calls.max(1) as f64,
    })
}

/// The CPU seconds this process's threads alive now have run, to the nanosecond.
pub fn own_cpu_seconds() -> anyhow::Result<f64> {
    let mut nanoseconds = 0u64;
    for task in std::fs::read_dir("/proc/self/task")? {
        // A thread may exit between listing and reading; it no longer counts.
        if let Ok(schedstat) = std::fs::read_to_string(task?.path().join("schedstat")) {
            nanoseconds += run_time_ns(&schedstat)?;
        }
    }
    Ok(nanoseconds as f64 / 1e9)
}

/// The first field of a `schedstat` line: nanoseconds on the CPU.
fn run_time_ns(schedstat: &str) -> anyhow::Result<u64> {
    let field = schedstat.split_whitespace().next().unwrap_or_default();
    field.parse().map_err(|e| anyhow::anyhow!("schedstat {schedstat:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
    };

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn calls_start_on_schedule_even_while_earlier_ones_are_unanswered() {
        let (started, most_at_once, now) = (Mutex::new(Vec::new()), AtomicUsize::new(0), AtomicUsize::new(0));
        let begun = Instant::now();
        let measured = paced(1, 200, |n| {
            let (started, most_at_once, now) = (&started, &most_at_once, &now);
            async move {
                started.lock().expect("the test's lock").push((n, begun.elapsed()));
                most_at_once.fetch_max(now.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                // Each call takes 12 ms: more than two intervals of 5 ms.
                tokio::time::sleep(Duration::from_millis(12)).await;
                now.fetch_sub(1, Ordering::SeqCst);
                anyhow::Ok(())
            }
        })
        .await
        .expect("every call answers");
        let started = started.into_inner().expect("the test's lock");
        assert_eq!(started.len(), 200, "one call per tick for a second");
        assert_eq!(started[100], (100, Duration::from_millis(500)), "on schedule");
        assert_eq!(most_at_once.load(Ordering::SeqCst), 3, "calls overlap rather than wait");
        assert!((measured.per_second - 200.0 / 1.007).abs() < 0.5, "the last answers 12 ms after its start");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_call_fails_the_measurement() {
        let failed = paced(1, 10, |n| async move { if n == 3 { anyhow::bail!("refused") } else { Ok(()) } }).await;
        assert_eq!(failed.err().map(|e| e.to_string()).as_deref(), Some("refused"));
    }

    #[test]
    fn the_cpu_is_read_to_the_nanosecond() -> anyhow::Result<()> {
        assert_eq!(run_time_ns("312336286 45106843 43\n")?, 312_336_286);
        assert!(run_time_ns("").is_err());
        // Spinning shows within a few milliseconds of CPU, far below a 10 ms tick.
        let before = own_cpu_seconds()?;
        let spin = std::time::Instant::now();
        let mut spent = 0.0;
        while spent < 0.002 && spin.elapsed() < Duration::from_secs(5) {
            spent = own_cpu_seconds()? - before;
        }
        assert!((0.002..0.1).contains(&spent), "2 ms of spinning shows ({spent} s)");
        Ok(())
    }
}
