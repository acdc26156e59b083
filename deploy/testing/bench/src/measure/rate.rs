//! Operations per second of an operation run a fixed number at a time, closed loop, and the
//! load tool's own CPU per operation: what the baselines, and the prices of the CPU floor, are
//! made of.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use futures::future::try_join_all;
use harness::processes::own_usage;
use tokio::time::Instant;

/// One baseline at one in-flight level.
#[derive(Clone, Copy, Debug)]
pub struct Measured {
    /// Operations per second.
    pub per_second: f64,
    /// CPU microseconds the load tool spent per operation (its client's share of the cost).
    pub client_cpu_us: f64,
}

/// Operations per second of `op` run `in_flight` at a time for `seconds`, and the load tool's
/// CPU per operation. Operations in flight at the end are finished, not dropped: a dropped
/// MongoDB operation costs its connection.
pub async fn rate<F, Fut>(seconds: u64, in_flight: usize, op: F) -> anyhow::Result<Measured>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let cpu_before = own_usage()?.cpu_seconds;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let next = AtomicU64::new(0);
    let worker = || async {
        while Instant::now() < deadline {
            op(next.fetch_add(1, Ordering::Relaxed)).await?;
        }
        anyhow::Ok(())
    };
    try_join_all((0..in_flight).map(|_| worker())).await?;
    let ops = next.load(Ordering::Relaxed).max(1) as f64;
    Ok(Measured {
        per_second: ops / started.elapsed().as_secs_f64(),
        client_cpu_us: (own_usage()?.cpu_seconds - cpu_before) * 1e6 / ops,
    })
}
